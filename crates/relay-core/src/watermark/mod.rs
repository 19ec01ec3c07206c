//! The LSN watermark: the one position that is safe to confirm to PostgreSQL.
//!
//! Invariant: the confirmed LSN `P` promises PostgreSQL that every transaction with
//! `commit_lsn < P` is durably in Kafka, because PostgreSQL will never send those again. So `P` is
//! the `end_lsn` of the **longest fully acknowledged prefix** of the transactions received, in
//! receive (= commit) order. Kafka acknowledges out of order across partitions, so "the last
//! delivery callback" is never the answer.
//!
//! A primary keepalive's `wal_end` received outside a transaction is queued as a *mark*: once
//! everything received before it is acknowledged, confirming it is safe (PostgreSQL has already
//! sent every transaction that commits before it) and lets an idle database, or one written only
//! in other tables, release WAL. Keepalives inside a transaction are ignored.
//!
//! The watermark never moves backwards: it starts at the slot's `confirmed_flush_lsn`, and a
//! catch-up keepalive below it (sent while the server re-reads from `restart_lsn`) changes
//! nothing. After a failure ([`AckTracker::fail`]) it never moves again; the pipeline restarts.

use std::collections::VecDeque;

use crate::Lsn;

/// Identifies one received transaction inside the tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxId(u64);

impl TxId {
    /// A record sent outside the stream (`outbox-relay republish`, the heal): in no tracker.
    pub const OUTSIDE: TxId = TxId(u64::MAX);
}

/// Every entry, transaction or mark, takes the next id, so an entry's index in the queue is
/// `id - front id`: acknowledgements find their transaction in O(1).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: u64,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Txn {
        commit_lsn: Lsn,
        end_lsn: Option<Lsn>,
        outstanding: u64,
        commit_time_unix_us: i64,
    },
    Mark {
        lsn: Lsn,
    },
}

/// The replication stream broke transaction framing. The pipeline must restart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("a Begin arrived while transaction {open} was still open")]
    NestedBegin { open: Lsn },
    #[error("a change or Commit arrived outside a transaction")]
    NoOpenTransaction,
    #[error("Commit LSN {commit} does not match the Begin's final LSN {begin}")]
    CommitMismatch { begin: Lsn, commit: Lsn },
    #[error("an acknowledgement arrived for a transaction with nothing outstanding")]
    UnexpectedAck,
}

/// Pure bookkeeping of transactions in flight and the safe flush position.
#[derive(Debug)]
pub struct AckTracker {
    queue: VecDeque<Entry>,
    next_id: u64,
    open: Option<TxId>,
    durable: Lsn,
    failed: bool,
    outstanding_records: u64,
    open_txns: usize,
}

impl AckTracker {
    /// `start` is where the slot stands (its `confirmed_flush_lsn`).
    pub fn new(start: Lsn) -> Self {
        Self {
            queue: VecDeque::new(),
            next_id: 0,
            open: None,
            durable: start,
            failed: false,
            outstanding_records: 0,
            open_txns: 0,
        }
    }

    /// At Begin. `final_lsn` is the LSN of the commit record.
    pub fn begin(
        &mut self,
        final_lsn: Lsn,
        commit_time_unix_us: i64,
    ) -> Result<TxId, FramingError> {
        if let Some(open) = self.open {
            return Err(FramingError::NestedBegin {
                open: self.commit_lsn_of(open),
            });
        }
        let id = TxId(self.push(Kind::Txn {
            commit_lsn: final_lsn,
            end_lsn: None,
            outstanding: 0,
            commit_time_unix_us,
        }));
        self.open = Some(id);
        self.open_txns += 1;
        Ok(id)
    }

    /// One record of the open transaction was handed to Kafka.
    pub fn add_record(&mut self) -> Result<TxId, FramingError> {
        let id = self.open.ok_or(FramingError::NoOpenTransaction)?;
        let Some(Entry {
            kind: Kind::Txn { outstanding, .. },
            ..
        }) = self.queue.back_mut()
        else {
            unreachable!("the open transaction is always the last entry");
        };
        *outstanding += 1;
        self.outstanding_records += 1;
        Ok(id)
    }

    /// At Commit. Completes the transaction's framing; it becomes confirmable once its records
    /// are acknowledged and everything before it is.
    pub fn commit(&mut self, commit_lsn: Lsn, end_lsn: Lsn) -> Result<(), FramingError> {
        let id = self.open.take().ok_or(FramingError::NoOpenTransaction)?;
        let Some(Entry {
            id: back,
            kind:
                Kind::Txn {
                    commit_lsn: begin,
                    end_lsn: end,
                    ..
                },
        }) = self.queue.back_mut()
        else {
            unreachable!("the open transaction is always the last entry");
        };
        debug_assert_eq!(*back, id.0);
        if *begin != commit_lsn {
            return Err(FramingError::CommitMismatch {
                begin: *begin,
                commit: commit_lsn,
            });
        }
        *end = Some(end_lsn);
        self.fold_empty_commit(end_lsn);
        self.advance();
        Ok(())
    }

    /// A transaction that committed without records (other tables of the publication, or an
    /// empty transaction) behind one still in flight carries nothing but its end LSN: it
    /// becomes a mark, and consecutive marks collapse into one. So behind a stuck record the
    /// queue holds at most one entry per transaction *with* records plus one mark between
    /// each, however many other transactions the database commits: memory is bounded by the
    /// in-flight limits, not by the database's transaction rate.
    fn fold_empty_commit(&mut self, end_lsn: Lsn) {
        let len = self.queue.len();
        if len < 2
            || !matches!(
                self.queue.back(),
                Some(Entry {
                    kind: Kind::Txn { outstanding: 0, .. },
                    ..
                })
            )
        {
            return;
        }
        // Nobody holds the id of a transaction without records: it may be reused.
        self.queue.pop_back();
        self.next_id -= 1;
        self.open_txns -= 1;
        match self.queue.back_mut() {
            Some(Entry {
                kind: Kind::Mark { lsn },
                ..
            }) => *lsn = (*lsn).max(end_lsn),
            _ => {
                self.push(Kind::Mark { lsn: end_lsn });
            }
        }
    }

    /// Entries (transactions and marks) the tracker holds: its memory, in units.
    pub fn entries(&self) -> usize {
        self.queue.len()
    }

    /// A primary keepalive. Ignored inside a transaction; otherwise confirmable once everything
    /// received before it is acknowledged.
    pub fn keepalive(&mut self, wal_end: Lsn) {
        if self.open.is_some() || wal_end <= self.durable {
            return;
        }
        match self.queue.back_mut() {
            // Consecutive marks collapse into the newest one: the queue stays small when idle.
            Some(Entry {
                kind: Kind::Mark { lsn },
                ..
            }) => *lsn = (*lsn).max(wal_end),
            _ => {
                self.push(Kind::Mark { lsn: wal_end });
            }
        }
        self.advance();
    }

    /// Kafka acknowledged one record of transaction `id`.
    pub fn ack(&mut self, id: TxId) -> Result<(), FramingError> {
        let idx = self.find(id).ok_or(FramingError::UnexpectedAck)?;
        let Kind::Txn { outstanding, .. } = &mut self.queue[idx].kind else {
            return Err(FramingError::UnexpectedAck);
        };
        if *outstanding == 0 {
            return Err(FramingError::UnexpectedAck);
        }
        *outstanding -= 1;
        self.outstanding_records -= 1;
        if idx == 0 {
            self.advance();
        }
        Ok(())
    }

    /// A delivery failed: progress freezes here for good. Restart from [`Self::watermark`].
    pub fn fail(&mut self) {
        self.failed = true;
    }

    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// The LSN that is safe to confirm: the end of the longest acknowledged prefix.
    pub fn watermark(&self) -> Lsn {
        self.durable
    }

    /// The end of the longest prefix of *closed* entries, acknowledged or not: every record
    /// below it is handed to Kafka. Inside a Kafka transaction that is what a checkpoint ending
    /// it may cover, since the commit makes all of its records visible or none. After a
    /// failure, the watermark.
    pub fn handed(&self) -> Lsn {
        if self.failed {
            return self.durable;
        }
        let closed = self.queue.iter().rev().find_map(|e| match e.kind {
            Kind::Txn {
                end_lsn: Some(end), ..
            } => Some(end),
            Kind::Txn { end_lsn: None, .. } => None,
            Kind::Mark { lsn } => Some(lsn),
        });
        closed.map_or(self.durable, |l| l.max(self.durable))
    }

    /// Records handed to Kafka and not yet acknowledged.
    pub fn outstanding_records(&self) -> u64 {
        self.outstanding_records
    }

    /// Transactions received and not yet confirmable (including an open one).
    pub fn pending_txns(&self) -> usize {
        self.open_txns
    }

    /// Commit time of the oldest transaction not yet confirmable, if any.
    pub fn oldest_pending_commit_time(&self) -> Option<i64> {
        self.queue.iter().find_map(|e| match e.kind {
            Kind::Txn {
                commit_time_unix_us,
                ..
            } => Some(commit_time_unix_us),
            Kind::Mark { .. } => None,
        })
    }

    fn push(&mut self, kind: Kind) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back(Entry { id, kind });
        id
    }

    fn commit_lsn_of(&self, id: TxId) -> Lsn {
        match self.find(id).map(|i| &self.queue[i].kind) {
            Some(Kind::Txn { commit_lsn, .. }) => *commit_lsn,
            _ => Lsn::ZERO,
        }
    }

    fn find(&self, id: TxId) -> Option<usize> {
        let front = self.queue.front()?.id;
        let idx = usize::try_from(id.0.checked_sub(front)?).ok()?;
        (idx < self.queue.len()).then_some(idx)
    }

    fn advance(&mut self) {
        if self.failed {
            return;
        }
        while let Some(front) = self.queue.front() {
            match front.kind {
                Kind::Txn {
                    end_lsn: Some(end),
                    outstanding: 0,
                    ..
                } => {
                    self.durable = self.durable.max(end);
                    self.open_txns -= 1;
                }
                Kind::Mark { lsn } => self.durable = self.durable.max(lsn),
                _ => break,
            }
            self.queue.pop_front();
        }
    }
}

#[cfg(test)]
mod tests;
