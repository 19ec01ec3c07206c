//! The gap a lost slot leaves, healed from the outbox table: which rows are in it, in which
//! order they go out, and what a heal cannot cover.
//!
//! Invariant (what a heal publishes, docs/operations.md "Slot lost"): a row is published iff
//! 1. the new slot will not stream it: its transaction id is not among the transactions the new
//!    slot decodes up to the moment the heal's snapshot was taken (read from the slot itself,
//!    without consuming it), and the row is visible in that snapshot; and
//! 2. Kafka may not hold it: its transaction committed at or after the commit time of the
//!    checkpoint's last change minus the margin. Commit timestamps are taken just before the
//!    commit record is written, so two transactions' timestamps may invert against their
//!    commit order within a short window; the margin takes the rows of that window too (Kafka
//!    may hold them: the caller leaves out the ids it finds there), so an inversion never
//!    loses a row.
//!
//! A row without a commit timestamp (committed while `track_commit_timestamp` was off, or older
//! than the commit-timestamp horizon) cannot be placed: it is counted as uncovered, never
//! guessed. Rows go out in commit-timestamp order, then transaction id, then their position in
//! the transaction: transactions that serialise on a row lock (the usual per-aggregate writer)
//! have increasing commit timestamps, so per-key order holds between them.

use std::collections::HashSet;

/// One outbox row as the heal sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapRow {
    /// The inserting transaction (`xmin`).
    pub xid: u64,
    /// `pg_xact_commit_timestamp(xmin)` in µs since the Unix epoch; `None`: not known.
    pub commit_time_us: Option<i64>,
    /// The command that inserted it within its transaction (`cmin`: each statement of a
    /// transaction takes the next one, so it orders a transaction's rows across statements).
    pub command: u64,
    /// Its physical position (orders the rows of one multi-row statement).
    pub position: u64,
}

/// What bounds the gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// The commit time of the checkpoint's last change (µs since the Unix epoch).
    pub checkpoint_time_us: i64,
    /// Rows this much earlier than the checkpoint's commit time are published too.
    pub margin_us: i64,
    /// Transactions the new slot streams (they are not the heal's).
    pub streamed: HashSet<u64>,
}

/// What the heal does with one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Committed well before the checkpoint's change: Kafka holds it.
    InKafka,
    /// The new slot streams it.
    Streamed,
    /// In the gap: publish it. `doubtful`: within the margin, so Kafka may hold it already.
    Heal { doubtful: bool },
    /// No commit timestamp: the heal cannot say where it belongs.
    Unplaced,
}

/// The verdict on one row.
pub fn verdict(row: &GapRow, b: &Bounds) -> Verdict {
    if b.streamed.contains(&row.xid) {
        return Verdict::Streamed;
    }
    let Some(t) = row.commit_time_us else {
        return Verdict::Unplaced;
    };
    if t < b.checkpoint_time_us.saturating_sub(b.margin_us) {
        Verdict::InKafka
    } else {
        Verdict::Heal {
            doubtful: t <= b.checkpoint_time_us,
        }
    }
}

/// Sorts rows into the order the heal publishes them: commit time, transaction, position.
/// Rows without a commit time go last (they are never published; the order only keeps the
/// sort total).
pub fn order(rows: &mut [GapRow]) {
    rows.sort_by_key(order_key);
}

/// The key [`order`] sorts by, for callers that sort rows of their own.
pub fn order_key(r: &GapRow) -> (bool, Option<i64>, u64, u64, u64) {
    (
        r.commit_time_us.is_none(),
        r.commit_time_us,
        r.xid,
        r.command,
        r.position,
    )
}

/// A part of the gap the heal cannot cover; any of these makes the heal fail (non-zero exit)
/// after publishing what it could.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Uncovered {
    #[error(
        "no checkpoint of this slot in kafka.checkpoint_topic, so where the gap starts is not \
         known: republish the rows committed since the relay's last confirmation with \
         `outbox-relay republish --since <time> --execute`"
    )]
    NoCheckpoint,
    #[error(
        "the checkpoint names no published change (it was written before the first record), so \
         its commit time is not known: republish with `outbox-relay republish --since <time> \
         --execute`"
    )]
    NoLastChange,
    #[error(
        "the checkpoint's last change ({0}) has no event id (no [[outbox]] table maps a column \
         to the `id` header, or it was a logical message): its commit time cannot be read from \
         the table; republish with `outbox-relay republish --since <time> --execute`"
    )]
    NoEventId(String),
    #[error(
        "the checkpoint's last event ({0}) is no longer in the outbox table (an insert-then-delete \
         outbox, or a retention job removed it): rows of the gap may have been removed too and \
         cannot be re-published from the table; rebuild them from the business tables"
    )]
    CheckpointRowGone(String),
    #[error(
        "track_commit_timestamp is off, so the commit time of the outbox rows is not known: set \
         it on (a restart) for future heals; this gap can only be re-published by hand with \
         `outbox-relay republish --since/--ids`"
    )]
    NoCommitTimestamps,
    #[error(
        "{0} outbox row(s) have no commit timestamp (committed while track_commit_timestamp was \
         off, or older than its horizon) and were not published: check them and republish with \
         `outbox-relay republish --ids`"
    )]
    Unplaced(u64),
    #[error(
        "[[message]] sections ({0}) publish logical messages, which are in no table: their part \
         of the gap cannot be re-published and must be rebuilt from the business tables"
    )]
    Messages(String),
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn bounds(streamed: &[u64]) -> Bounds {
        Bounds {
            checkpoint_time_us: 1_000,
            margin_us: 100,
            streamed: streamed.iter().copied().collect(),
        }
    }

    fn row(xid: u64, t: Option<i64>) -> GapRow {
        GapRow {
            xid,
            commit_time_us: t,
            command: 0,
            position: 0,
        }
    }

    #[test]
    fn rows_are_judged_by_stream_then_commit_time() {
        let b = bounds(&[7]);
        assert_eq!(verdict(&row(7, Some(5_000)), &b), Verdict::Streamed);
        assert_eq!(verdict(&row(1, Some(899)), &b), Verdict::InKafka);
        assert_eq!(
            verdict(&row(1, Some(900)), &b),
            Verdict::Heal { doubtful: true }
        );
        assert_eq!(
            verdict(&row(1, Some(1_000)), &b),
            Verdict::Heal { doubtful: true }
        );
        assert_eq!(
            verdict(&row(1, Some(1_001)), &b),
            Verdict::Heal { doubtful: false }
        );
        assert_eq!(verdict(&row(1, None), &b), Verdict::Unplaced);
    }

    prop_compose! {
        fn any_row()(xid in 0u64..20, t in proptest::option::weighted(0.9, 0i64..3_000),
                     command in 0u64..4, position in 0u64..5) -> GapRow {
            GapRow { xid, commit_time_us: t, command, position }
        }
    }

    proptest! {
        /// Model: transactions commit in some order; their timestamps may invert against it by
        /// less than the margin. Every transaction committed after the checkpoint's one and not
        /// streamed is healed: nothing of the gap is lost.
        #[test]
        fn no_transaction_after_the_checkpoint_is_lost(
            jitter in proptest::collection::vec(0i64..100, 1..40),
            cp in 0usize..40,
            streamed_from in 0usize..45,
        ) {
            let n = jitter.len();
            let cp = cp % n;
            // Transaction i commits i-th, with timestamp 1000*i minus a jitter under the margin
            // (an inversion only against the neighbour's timestamp it jitters past).
            let ts: Vec<i64> = (0..n).map(|i| 1_000 * i as i64 - jitter[i] * 10).collect();
            let b = Bounds {
                checkpoint_time_us: ts[cp],
                margin_us: 1_000,
                streamed: (streamed_from..n).map(|i| i as u64).collect(),
            };
            for (i, t) in ts.iter().enumerate().skip(cp + 1) {
                let v = verdict(&row(i as u64, Some(*t)), &b);
                if i >= streamed_from {
                    prop_assert_eq!(v, Verdict::Streamed);
                } else {
                    prop_assert!(matches!(v, Verdict::Heal { .. }), "txn {} lost: {:?}", i, v);
                }
            }
            // What is not doubtful is after the checkpoint in time.
            for (i, t) in ts.iter().enumerate() {
                if let Verdict::Heal { doubtful: false } = verdict(&row(i as u64, Some(*t)), &b) {
                    prop_assert!(*t > ts[cp]);
                }
            }
        }

        /// The order is total and groups a transaction's rows by position.
        #[test]
        fn order_is_by_commit_time_then_transaction_then_position(
            mut rows in proptest::collection::vec(any_row(), 0..60),
        ) {
            order(&mut rows);
            for w in rows.windows(2) {
                let key = |r: &GapRow| {
                    (r.commit_time_us.is_none(), r.commit_time_us, r.xid, r.command, r.position)
                };
                prop_assert!(key(&w[0]) <= key(&w[1]));
                // A transaction's rows: by command first.
                if w[0].xid == w[1].xid && w[0].commit_time_us == w[1].commit_time_us {
                    prop_assert!(w[0].command <= w[1].command);
                }
            }
        }

        /// Streamed transactions are never published by the heal, whatever their time.
        #[test]
        fn a_streamed_transaction_is_never_healed(r in any_row(), more in proptest::collection::vec(0u64..20, 0..5)) {
            let mut streamed: HashSet<u64> = more.into_iter().collect();
            streamed.insert(r.xid);
            let b = Bounds { checkpoint_time_us: 1_000, margin_us: 50, streamed };
            prop_assert_eq!(verdict(&r, &b), Verdict::Streamed);
        }
    }
}
