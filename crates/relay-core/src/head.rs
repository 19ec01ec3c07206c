//! Partition heads: a producer's first record to a partition goes alone.
//!
//! Invariant: while a partition has acknowledged no record of this producer (or none for
//! [`HEAD_TTL_MS`]), at most one record of the producer for it is in flight. Why: a broker
//! accepts any first sequence number from a producer id it holds no state for on a partition.
//! A first request that Kafka refuses for good (a record too large, say) while a later one is
//! queued leaves a gap at the head that the broker stores: librdkafka sends the queued request
//! even after its gapless guarantee raised the fatal error (seen on its mock: the refused
//! record's report is an error, the next one's a success), and under `on_poison = "halt"` the
//! later events then sit in Kafka before the refused one once it is sent again (issue 40,
//! item 7). Once the partition acknowledged a record of this producer it refuses a gap
//! (OUT_OF_ORDER_SEQUENCE_NUMBER), so later records flow freely. A partition that acknowledged
//! nothing for an hour is a head again: brokers forget idle producer ids
//! (`producer.id.expiration.ms`, a day by default).
//!
//! The partition is the one the record will land on ([`crate::partition`]); `-1` stands for
//! "not known" (the topic's partition count could not be read).

use std::collections::HashMap;

/// Looked up twice per record (sent, reported): foldhash, not SipHash (topics are few and come
/// from the relay's routing, so a fixed seed costs nothing and keeps runs reproducible).
type Map<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// A partition silent for longer than this is treated as a head again.
pub const HEAD_TTL_MS: u64 = 3_600_000;

#[derive(Debug, Clone, Copy, Default)]
struct Partition {
    in_flight: u32,
    /// Of those, the records handed over while the partition was a head.
    as_head: u32,
    /// When it last acknowledged a record of this producer (ms on the caller's clock).
    acked_at: Option<u64>,
}

impl Partition {
    fn established(&self, now_ms: u64) -> bool {
        self.acked_at
            .is_some_and(|at| now_ms.saturating_sub(at) <= HEAD_TTL_MS)
    }
}

/// The heads of one producer's partitions. The loop reads no further change while a head
/// record is in flight ([`Heads::waiting`]): a change's record may land on any partition, and
/// which one is known only once it is read.
#[derive(Debug, Default)]
pub struct Heads {
    topics: Map<String, Map<i32, Partition>>,
    /// Head records in flight, over every partition.
    heads_in_flight: u64,
}

impl Heads {
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&mut self, topic: &str, partition: i32) -> &mut Partition {
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_string(), Map::default());
        }
        self.topics
            .get_mut(topic)
            .expect("inserted above")
            .entry(partition)
            .or_default()
    }

    /// Whether a head record is in flight: then nothing more may be handed over until its
    /// report.
    pub fn waiting(&self) -> bool {
        self.heads_in_flight > 0
    }

    /// A record for `partition` of `topic` was handed over at `now_ms`; `true` if it is the
    /// partition's head record (worth sending at once rather than after `linger.ms`).
    pub fn sent(&mut self, topic: &str, partition: i32, now_ms: u64) -> bool {
        let p = self.entry(topic, partition);
        p.in_flight += 1;
        let head = !p.established(now_ms);
        if head {
            p.as_head += 1;
            self.heads_in_flight += 1;
        }
        head
    }

    /// Its report came back: acknowledged (`ok`) or not. Reports of a partition come in the
    /// order its records were handed over.
    pub fn reported(&mut self, topic: &str, partition: i32, ok: bool, now_ms: u64) {
        let p = self.entry(topic, partition);
        p.in_flight = p.in_flight.saturating_sub(1);
        let was_head = p.as_head > 0;
        if was_head {
            p.as_head -= 1;
        }
        if ok {
            p.acked_at = Some(now_ms);
        }
        if was_head {
            self.heads_in_flight = self.heads_in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_head_in_flight_holds_everything_then_the_partition_flows() {
        let mut h = Heads::new();
        assert!(!h.waiting());
        assert!(h.sent("t", 0, 0), "the first record is the head");
        assert!(h.waiting());
        h.reported("t", 0, true, 2);
        assert!(!h.waiting());
        for _ in 0..3 {
            assert!(!h.sent("t", 0, 3), "established: not a head");
        }
        assert!(!h.waiting());
        // Another partition has a head of its own.
        assert!(h.sent("t", 1, 3));
        assert!(h.waiting());
        // Silent for longer than the TTL: a head again.
        assert!(h.sent("t", 0, 2 + HEAD_TTL_MS + 1));
    }

    #[test]
    fn a_refused_head_leaves_the_partition_a_head() {
        let mut h = Heads::new();
        h.sent("t", 0, 0);
        h.reported("t", 0, false, 1);
        assert!(!h.waiting());
        assert!(h.sent("t", 0, 1));
        assert!(h.waiting());
    }

    /// One step of the loop: a record for partition `p` handed over if nothing waits (else
    /// nothing), or the oldest in-flight record of `p` reported.
    #[derive(Debug, Clone)]
    enum Step {
        Send(i32),
        Report(i32, bool),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0i32..3).prop_map(Step::Send),
            (0i32..3, any::<bool>()).prop_map(|(p, ok)| Step::Report(p, ok)),
        ]
    }

    proptest! {
        /// A partition that has acknowledged nothing never has two records in flight, so a
        /// refused or failed head never has a later record behind it; and the loop is never
        /// held with no head record in flight.
        #[test]
        fn no_partition_without_an_acknowledgement_has_two_in_flight(
            steps in proptest::collection::vec(step(), 0..200),
        ) {
            let mut h = Heads::new();
            let mut in_flight = [0u32; 3];
            let mut acked = [false; 3];
            for (now, s) in steps.into_iter().enumerate() {
                let now = now as u64;
                match s {
                    Step::Send(p) => {
                        if !h.waiting() {
                            h.sent("t", p, now);
                            in_flight[p as usize] += 1;
                        }
                    }
                    Step::Report(p, ok) => {
                        if in_flight[p as usize] > 0 {
                            in_flight[p as usize] -= 1;
                            acked[p as usize] |= ok;
                            h.reported("t", p, ok, now);
                        }
                    }
                }
                for p in 0..3 {
                    prop_assert!(acked[p] || in_flight[p] <= 1, "partition {p}: {in_flight:?}");
                }
                let unacked_in_flight = (0..3).any(|p| !acked[p] && in_flight[p] > 0);
                prop_assert_eq!(h.waiting(), unacked_in_flight);
            }
        }
    }
}
