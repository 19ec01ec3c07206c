//! The in-flight budget of a process that relays several sources (`relay.max_in_flight_bytes_total`):
//! whether one source may read more, given what it and all sources hold in flight.
//!
//! Invariant: a source with nothing in flight may always read. That is what makes the budget
//! safe to share: no source waits for other sources' acknowledgements with nothing of its own
//! to wait for, so none starves, and a source's back-pressure release (which fires when *its*
//! acknowledgements stop while it is paused) is never tripped by the others' load. The price is
//! a bounded overshoot: the total passes the limit by at most what the sources read between
//! two looks at the total (one turn each), which [`overshoot_bound`] states and the property
//! test checks.

/// Whether a source holding `own_records` records in flight may read more, when every source of
/// the process holds `total_bytes` in flight against `limit_bytes` (0: no limit).
pub fn may_read(own_records: u64, total_bytes: u64, limit_bytes: u64) -> bool {
    limit_bytes == 0 || own_records == 0 || total_bytes < limit_bytes
}

/// The most the total may reach: the limit, plus one turn of reading per source (`turn_bytes`:
/// the largest a source reads before it looks at the total again).
pub fn overshoot_bound(limit_bytes: u64, sources: u64, turn_bytes: u64) -> u64 {
    limit_bytes + sources * turn_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_rule() {
        assert!(may_read(5, 1_000, 0), "no limit");
        assert!(may_read(0, 1_000, 10), "nothing in flight: always");
        assert!(may_read(5, 9, 10));
        assert!(!may_read(5, 10, 10));
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// Source `s` takes a turn: reads up to `n` records of `size` bytes while it may.
        Read { s: usize, n: u8, size: u16 },
        /// Kafka acknowledges the oldest record of source `s`.
        Ack { s: usize },
    }

    fn step(sources: usize) -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..sources, 1u8..8, 1u16..500).prop_map(|(s, n, size)| Step::Read { s, n, size }),
            (0..sources).prop_map(|s| Step::Ack { s }),
        ]
    }

    proptest! {
        /// Sources sharing a budget, each looking at the total once per turn (as the pipeline
        /// does): the total stays within the bound, and a source that cannot read always has
        /// something in flight, so an acknowledgement will let it go on.
        #[test]
        fn shared_budget_is_bounded_and_never_starves_a_source(
            limit in 0u64..5_000,
            steps in (1usize..6).prop_flat_map(|n| proptest::collection::vec(step(n), 1..300).prop_map(move |s| (n, s))),
        ) {
            let (n, steps) = steps;
            let mut own: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); n];
            let mut total = 0u64;
            for st in steps {
                match st {
                    Step::Read { s, n: count, size } => {
                        // One look at the total per turn; the turn reads up to `count` records.
                        if may_read(own[s].len() as u64, total, limit) {
                            for _ in 0..count {
                                own[s].push_back(u64::from(size));
                                total += u64::from(size);
                            }
                        } else {
                            prop_assert!(!own[s].is_empty(), "a blocked source has nothing to wait for");
                        }
                    }
                    Step::Ack { s } => {
                        if let Some(b) = own[s].pop_front() {
                            total -= b;
                        }
                    }
                }
                if limit > 0 {
                    // A turn reads at most 7 records of at most 499 bytes.
                    prop_assert!(total <= overshoot_bound(limit, n as u64, 7 * 499), "total {total}");
                }
            }
        }
    }
}
