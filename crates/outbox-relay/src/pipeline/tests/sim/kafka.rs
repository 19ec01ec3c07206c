//! The model of Kafka in the simulation, and the faults: partitions that acknowledge their
//! oldest records in their own order and pace, refuse one (then store nothing after it, except
//! at a partition's head, where a broker keeps no producer state), and the process and server
//! faults drawn between them. Exactly-once, a refusal fails its Kafka transaction and the
//! rest of that transaction's records in flight are reported purged (before or after the
//! refused one's report, drawn).

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use rand::{Rng, rngs::StdRng};
use rdkafka::error::RDKafkaErrorCode;
use tokio::sync::watch;

use super::{Bug, MAX_FAULTS, MAX_IN_FLIGHT, World};
use crate::pipeline::tests::{memory::MemorySink, refused_with};

/// A record's identity within one run: its transaction's commit position and its sequence.
pub(super) fn id(o: &crate::sink::Origin) -> (u64, u64) {
    (o.commit_lsn.0, o.seq)
}

/// The partition the memory sink puts a key on.
fn partition(key: &str) -> i32 {
    relay_core::partition::of_key(key.as_bytes(), super::memory::MEMORY_PARTITIONS)
}

/// Lanes: the topic-partitions records are batched and ordered in, numbered: the events'
/// partitions first, then the dead-letter topic's.
pub(super) const LANES: i32 = 2 * super::memory::MEMORY_PARTITIONS;

/// The lane of a record as `sent` logs it.
pub(super) fn lane((key, value): &(String, String)) -> i32 {
    let dead_lettered = super::poison::event(value).1;
    partition(key) + i32::from(dead_lettered) * super::memory::MEMORY_PARTITIONS
}

/// Each record handed to the sink in this run, by its identity: (key, value as logged).
pub(super) fn sent(sink: &MemorySink) -> HashMap<(u64, u64), (String, String)> {
    sink.sent()
        .into_iter()
        .map(|s| {
            (
                id(&s.origin),
                super::poison::stored(&s.topic, &s.key, &s.value),
            )
        })
        .collect()
}

/// Plays Kafka and the faults while the pipeline runs; returns only for a fault that ends the
/// run at once (kill -9, PostgreSQL crash).
pub(super) async fn drive(
    world: &World,
    sink: &MemorySink,
    rng: &mut StdRng,
    faults: &mut usize,
    stop: &watch::Sender<bool>,
    broken: &mut HashSet<i32>,
) -> bool {
    let mut stopping = false;
    // Partitions that acknowledged or refused a record of this run's producer.
    let mut heads = HashSet::new();
    let began = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1..20))).await;
        // Two minutes of (paused) time in one run: the pipeline makes no progress (a run of
        // these WALs ends in seconds; a stalled one reaches the restart backoffs' maxima).
        if began.elapsed() > Duration::from_secs(120) {
            world.violation("a run made no progress for 2 minutes".into());
            return true;
        }
        let pending = sink.pending_origins();
        if pending.len() > MAX_IN_FLIGHT {
            world.violation(format!(
                "{} records in flight, over max_in_flight_records = {MAX_IN_FLIGHT}",
                pending.len()
            ));
        }
        let sent = sent(sink);
        let (confirmed, tail) = {
            let pg = world.pg.lock().unwrap();
            (pg.confirmed, pg.tail)
        };
        if !stopping && confirmed >= tail && pending.is_empty() {
            world.step(format!("the end of the WAL {tail:#x} confirmed: stop"));
            let _ = stop.send(true);
            stopping = true;
            continue;
        }
        let may_fault = *faults < MAX_FAULTS && !stopping;
        if may_fault && super::takeover::cut_off_now(world) {
            *faults += 1;
            world.step(
                "postgres: the relay's host is cut off; a second instance takes the slot".into(),
            );
            *world.cut_off.lock().unwrap() = true;
            return true;
        }
        let roll: f64 = rng.random();
        if may_fault && roll < 0.005 {
            *faults += 1;
            world.step("relay: kill -9".into());
            return true;
        }
        if may_fault && roll < 0.01 {
            *faults += 1;
            world.step("relay: SIGTERM".into());
            let _ = stop.send(true);
            stopping = true;
            continue;
        }
        if may_fault && roll < 0.015 {
            *faults += 1;
            let mut pg = world.pg.lock().unwrap();
            world.step(format!(
                "postgres: crash, the slot back from {:#x} to its durable {:#x}",
                pg.confirmed, pg.durable
            ));
            pg.confirmed = pg.durable;
            return false;
        }
        if may_fault && world.exactly_once && roll < 0.02 {
            *faults += 1;
            world.step("kafka: the next commit fails".into());
            sink.fail_next_commit();
            continue;
        }
        if roll < 0.05 {
            let mut pg = world.pg.lock().unwrap();
            if pg.durable != pg.confirmed {
                world.step(format!(
                    "postgres: checkpoint, the slot durable at {:#x}",
                    pg.confirmed
                ));
                pg.durable = pg.confirmed;
            }
            continue;
        }
        let Some(pick) = (!pending.is_empty()).then(|| pending[rng.random_range(0..pending.len())])
        else {
            continue;
        };
        let p = lane(&sent[&id(&pick)]);
        if broken.contains(&p) {
            continue;
        }
        let oldest: Vec<(u64, u64)> = pending
            .iter()
            .filter(|o| lane(&sent[&id(o)]) == p)
            .map(id)
            .collect();
        if may_fault && roll < 0.06 {
            *faults += 1;
            // A broker keeps no producer state at a partition's head: a refused first record
            // does not stop the ones after it from being stored (issue 40 item 7).
            if !heads.insert(p) {
                broken.insert(p);
            }
            world.step(format!(
                "kafka: partition {p} refuses {} (timed out)",
                sent[&oldest[0]].1
            ));
            refuse(
                world,
                sink,
                rng,
                &[oldest[0]],
                refused_with(RDKafkaErrorCode::MessageTimedOut),
            );
            continue;
        }
        heads.insert(p);
        let n = rng.random_range(1..=oldest.len().min(3));
        // A batch with a poison record is refused whole, for good (not authorised).
        if oldest[..n]
            .iter()
            .any(|r| super::poison::refused(world, &sent[r].1))
        {
            broken.insert(p);
            world.step(format!(
                "kafka: partition {p} refuses a batch of {n} for good ({})",
                oldest[..n]
                    .iter()
                    .map(|r| sent[r].1.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            refuse(
                world,
                sink,
                rng,
                &oldest[..n],
                refused_with(RDKafkaErrorCode::TopicAuthorizationFailed),
            );
            continue;
        }
        let acked: HashSet<(u64, u64)> = oldest[..n].iter().copied().collect();
        // Exactly-once: acknowledged records become visible when their transaction commits.
        if !world.exactly_once {
            let mut log = world.log.lock().unwrap();
            for (i, seq) in oldest[..n].iter().enumerate() {
                // The bug: the first of a batch "implicitly acknowledged", never stored.
                if world.bug == Bug::ImplicitAckTaken && i == 0 && n > 1 {
                    continue;
                }
                log.push(sent[seq].clone());
            }
        }
        sink.report(|_, o| acked.contains(&id(o)), None);
    }
}

/// Reports `refused` with `failure`. Exactly-once, the refusal fails the Kafka transaction and
/// librdkafka purges the rest of its records; the refused records' reports may come before or
/// after the purged ones'.
fn refuse(
    world: &World,
    sink: &MemorySink,
    rng: &mut StdRng,
    refused: &[(u64, u64)],
    failure: crate::sink::Failure,
) {
    let purged = world.exactly_once.then(|| {
        let sent = sink.sent();
        let txns: HashSet<u64> = sent
            .iter()
            .filter(|s| refused.contains(&id(&s.origin)))
            .map(|s| s.kafka_txn)
            .collect();
        let of_txn: HashSet<(u64, u64)> = sent
            .iter()
            .filter(|s| txns.contains(&s.kafka_txn) && !refused.contains(&id(&s.origin)))
            .map(|s| id(&s.origin))
            .collect();
        (of_txn, rng.random_bool(0.5))
    });
    let purge = |of_txn: &HashSet<(u64, u64)>| {
        if !of_txn.is_empty() {
            sink.report(
                |_, o| of_txn.contains(&id(o)),
                Some(refused_with(RDKafkaErrorCode::PurgeInflight)),
            );
        }
    };
    if let Some((of_txn, true)) = &purged {
        purge(of_txn);
    }
    sink.report(|_, o| refused.contains(&id(o)), Some(failure));
    if let Some((of_txn, false)) = &purged {
        purge(of_txn);
    }
}
