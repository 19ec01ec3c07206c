//! Where a partition is read from, and which records of it are new.
//!
//! Invariant: the applier's position is the `next_offset` it stored in its own offsets table in
//! the transaction that applied the record before it; Kafka's committed offsets are never read.
//! A stored position outside the log (below its start: retention deleted records never applied;
//! beyond its end: the topic was re-created) is never silently reset: the partition stops with
//! an alert, and only an operator's `apply reset` moves it. The stored position only moves
//! forward (`GREATEST` in SQL), so an instance that lost the partition and still commits cannot
//! move it back.

/// Where a partition with no stored position starts (`kafka.start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewPartition {
    /// The first record still in the log: every event already written is applied.
    Earliest,
    /// The end of the log: only events written from now on.
    Latest,
}

/// Where to start reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At this offset (the stored position).
    At(i64),
    /// At the log's start (no stored position, `start = "earliest"`).
    Earliest,
    /// At the log's end (no stored position, `start = "latest"`).
    Latest,
}

/// The stored position is outside the log: an alert, and the partition does not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OutOfLog {
    #[error(
        "the stored position {stored} is below the log start {low}: records {stored}..{low} were \
         deleted by the topic's retention before they were applied. Nothing was skipped yet; to \
         accept the loss, move the position with `outbox-relay apply reset --to {low}`"
    )]
    BelowStart { stored: i64, low: i64 },
    #[error(
        "the stored position {stored} is beyond the log end {high}: the topic was deleted and \
         re-created, or the offsets table belongs to another cluster. Check the topic, then move \
         the position with `outbox-relay apply reset`"
    )]
    BeyondEnd { stored: i64, high: i64 },
}

/// Where to start, from the stored position (if any) and the log's `low..high` watermarks.
pub fn start(
    stored: Option<i64>,
    low: i64,
    high: i64,
    new: NewPartition,
) -> Result<Start, OutOfLog> {
    match stored {
        Some(s) if s < low => Err(OutOfLog::BelowStart { stored: s, low }),
        Some(s) if s > high => Err(OutOfLog::BeyondEnd { stored: s, high }),
        Some(s) => Ok(Start::At(s)),
        None => Ok(match new {
            NewPartition::Earliest => Start::Earliest,
            NewPartition::Latest => Start::Latest,
        }),
    }
}

/// The next offset of one partition the applier has not applied yet (known once a record was
/// read or a stored position was found).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    next: Option<i64>,
}

impl Cursor {
    pub fn at(next: Option<i64>) -> Cursor {
        Cursor { next }
    }

    pub fn next(self) -> Option<i64> {
        self.next
    }

    /// Whether a record at `offset` is new. A record below the cursor is one the consumer
    /// delivered again (after a pause, a seek or a rebalance): it was applied or is in the
    /// batch already, so it is dropped here, before it reaches a transaction. Offsets may jump
    /// forward (transaction markers and aborted records take offsets under `read_committed`).
    pub fn admit(&mut self, offset: i64) -> bool {
        if self.next.is_some_and(|n| offset < n) {
            return false;
        }
        self.next = Some(offset + 1);
        true
    }

    /// The position another writer (or a COMMIT of unknown outcome) left in the offsets table:
    /// records below it are applied. Never moves the cursor back.
    pub fn observe_stored(&mut self, stored: i64) {
        if self.next.is_none_or(|n| stored > n) {
            self.next = Some(stored);
        }
    }
}

/// After a COMMIT whose outcome is unknown (the connection broke during it): the transaction
/// that was to store `next` committed if the stored position (read again on a new connection)
/// has reached it, by this commit or by another instance that applied the same records.
pub fn committed_after_unknown(stored_now: Option<i64>, next: i64) -> bool {
    stored_now.is_some_and(|s| s >= next)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_new_partition_starts_where_the_config_says() {
        assert_eq!(
            start(None, 5, 9, NewPartition::Earliest),
            Ok(Start::Earliest)
        );
        assert_eq!(start(None, 5, 9, NewPartition::Latest), Ok(Start::Latest));
        assert_eq!(start(Some(7), 5, 9, NewPartition::Latest), Ok(Start::At(7)));
        // At the very end or the very start: fine.
        assert_eq!(
            start(Some(9), 5, 9, NewPartition::Earliest),
            Ok(Start::At(9))
        );
        assert_eq!(
            start(Some(5), 5, 9, NewPartition::Earliest),
            Ok(Start::At(5))
        );
    }

    #[test]
    fn a_position_outside_the_log_is_refused_with_the_command_to_accept_it() {
        let e = start(Some(3), 5, 9, NewPartition::Earliest).unwrap_err();
        assert_eq!(e, OutOfLog::BelowStart { stored: 3, low: 5 });
        assert!(e.to_string().contains("apply reset --to 5"), "{e}");
        assert_eq!(
            start(Some(12), 5, 9, NewPartition::Earliest),
            Err(OutOfLog::BeyondEnd {
                stored: 12,
                high: 9
            })
        );
    }

    #[test]
    fn unknown_commit_is_decided_by_the_stored_position() {
        assert!(committed_after_unknown(Some(10), 10));
        assert!(committed_after_unknown(Some(11), 10));
        assert!(!committed_after_unknown(Some(9), 10));
        assert!(!committed_after_unknown(None, 10));
    }

    proptest! {
        /// Whatever order and repetition the consumer delivers offsets in (redeliveries after a
        /// pause or rebalance, positions observed from the table), the admitted offsets are
        /// strictly increasing and none is at or below a stored position observed before it.
        #[test]
        fn admitted_offsets_only_increase(
            start in proptest::option::of(0i64..50),
            events in proptest::collection::vec((0i64..100, any::<bool>()), 0..80),
        ) {
            let mut c = Cursor::at(start);
            let mut floor = start.unwrap_or(0);
            let mut last: Option<i64> = None;
            for (offset, is_stored) in events {
                if is_stored {
                    c.observe_stored(offset);
                    floor = floor.max(offset);
                } else if c.admit(offset) {
                    prop_assert!(offset >= floor, "{offset} below a stored position {floor}");
                    prop_assert!(last.is_none_or(|l| offset > l));
                    last = Some(offset);
                    floor = offset + 1;
                }
                prop_assert!(c.next().is_none_or(|n| n >= floor));
            }
        }
    }
}
