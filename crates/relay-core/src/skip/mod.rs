//! The skip after a start or takeover: which changes of the stream Kafka already holds.
//!
//! PostgreSQL streams from the slot's confirmed position, which after a crash may lie well
//! behind what Kafka holds. The newest [`Checkpoint`] says how far that is; changes at or
//! before it are skipped, later ones published.
//!
//! Invariants (never a silent skip):
//! - When the checkpoint's own change is in the part of the stream PostgreSQL sends (its
//!   transaction commits at or after the slot's start), the stream must meet it: same
//!   transaction, same change index, same fingerprint. Anything else is a changed history (a
//!   restored snapshot, a divergent timeline, a changed mapping): [`HistoryChanged`].
//! - Below `covered_lsn` and after the checkpoint's change, no routed change of the
//!   checkpoint's tables may appear: every one of them has a record, so the checkpoint's `last`
//!   would be at or after it.
//! - Until the skip is over ([`Skip::is_done`]) nothing may be confirmed; afterwards the
//!   checkpoint's `covered_lsn` may be ([`Skip::covered`]).

use crate::{
    Lsn,
    checkpoint::{ChangeRef, Checkpoint},
};

/// What to do with one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Kafka holds it already.
    Skip,
    Publish,
}

/// The stream does not continue the history the checkpoint describes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the database's history changed under the relay: the checkpoint in Kafka says {expected}, \
     but the stream has {found}. A restored snapshot, a promoted standby that was behind, or a \
     changed [[outbox]] mapping can cause this. Nothing was confirmed; see docs/operations.md \
     (\"History changed\") before starting again"
)]
pub struct HistoryChanged {
    pub expected: String,
    pub found: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InTxn {
    /// Before the checkpoint's transaction: published by an earlier Kafka transaction.
    SkipAll,
    /// The checkpoint's own transaction: skip up to its change, publish after it.
    Checkpoint {
        seen: u64,
    },
    /// After the checkpoint's change and below `covered_lsn`: only changes without a record.
    Verify,
    Publish,
}

/// Where the skip stands, for the progress rule's gates ([`crate::progress::Progress`]): a
/// plain value, so that the rule is tested without a checkpoint to skip by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkipStatus {
    /// [`Skip::is_verified`].
    pub verified: bool,
    /// [`Skip::is_done`].
    pub done: bool,
    /// [`Skip::covered`].
    pub covered: Lsn,
}

/// The skip of one connection.
#[derive(Debug, Clone)]
pub struct Skip {
    covered: Lsn,
    last: Option<ChangeRef>,
    tables: Vec<String>,
    /// The checkpoint's change was met (or PostgreSQL does not send it).
    met: bool,
    done: bool,
    txn: Option<(Lsn, InTxn)>,
}

impl Skip {
    /// `start` is the slot's confirmed position when streaming started: PostgreSQL sends every
    /// transaction that commits at or after it. Without a checkpoint nothing is skipped.
    pub fn new(checkpoint: Option<&Checkpoint>, start: Lsn) -> Self {
        let Some(c) = checkpoint else {
            return Self::none();
        };
        let met = c.last.as_ref().is_none_or(|l| l.commit_lsn < start);
        Self {
            covered: c.covered_lsn,
            last: c.last.clone(),
            tables: c.tables.clone(),
            met,
            // Every transaction PostgreSQL sends commits after the covered position.
            done: met && c.covered_lsn <= start,
            txn: None,
        }
    }

    /// Nothing to skip.
    pub fn none() -> Self {
        Self {
            covered: Lsn::ZERO,
            last: None,
            tables: Vec::new(),
            met: true,
            done: true,
            txn: None,
        }
    }

    /// The skip is over: every later change is published, and [`covered`](Self::covered) may
    /// be confirmed.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Every change skipped so far is one Kafka holds: the checkpoint's own change was met (or
    /// PostgreSQL does not send it). From now on a checkpoint may be written.
    pub fn is_verified(&self) -> bool {
        self.met
    }

    pub fn covered(&self) -> Lsn {
        self.covered
    }

    /// [`SkipStatus`] now.
    pub fn status(&self) -> SkipStatus {
        SkipStatus {
            verified: self.met,
            done: self.done,
            covered: self.covered,
        }
    }

    /// A transaction committed at `commit_lsn` begins.
    pub fn begin(&mut self, commit_lsn: Lsn) -> Result<(), HistoryChanged> {
        if self.done {
            self.txn = Some((commit_lsn, InTxn::Publish));
            return Ok(());
        }
        let mode = match &self.last {
            Some(l) if commit_lsn == l.commit_lsn && !self.met => InTxn::Checkpoint { seen: 0 },
            Some(l) if !self.met && commit_lsn > l.commit_lsn => {
                return Err(self.changed(format!(
                    "a transaction committed at {commit_lsn}, after it, where it should be"
                )));
            }
            Some(l) if commit_lsn < l.commit_lsn => InTxn::SkipAll,
            _ if commit_lsn >= self.covered => {
                self.done = true;
                InTxn::Publish
            }
            _ => InTxn::Verify,
        };
        self.txn = Some((commit_lsn, mode));
        Ok(())
    }

    /// The next change of the open transaction (`index` counts every INSERT and transactional
    /// message of the transaction from 0). `routed` names the outbox table (or message prefix)
    /// it is routed by, if any; `fingerprint` renders its [`crate::checkpoint::Fingerprint`].
    pub fn change(
        &mut self,
        index: u64,
        routed: Option<&str>,
        fingerprint: impl FnOnce() -> String,
    ) -> Result<Verdict, HistoryChanged> {
        let Some((commit_lsn, mode)) = self.txn else {
            return Ok(Verdict::Publish);
        };
        match mode {
            InTxn::Publish => Ok(Verdict::Publish),
            InTxn::SkipAll => Ok(Verdict::Skip),
            InTxn::Verify => match routed {
                Some(t) if self.tables.iter().any(|x| x == t) => Err(self.changed(format!(
                    "change #{index} of the transaction committed at {commit_lsn}, a row of \
                     {t} that no checkpoint covers, below the covered LSN {}",
                    self.covered
                ))),
                _ => Ok(Verdict::Skip),
            },
            InTxn::Checkpoint { .. } => {
                let last = self
                    .last
                    .as_ref()
                    .expect("a checkpoint transaction has a change");
                if index < last.index {
                    self.txn = Some((commit_lsn, InTxn::Checkpoint { seen: index + 1 }));
                    return Ok(Verdict::Skip);
                }
                if index > last.index {
                    return Ok(Verdict::Publish);
                }
                let found = fingerprint();
                if found != last.fingerprint {
                    return Err(
                        self.changed(format!("change #{index} of that transaction is {found}"))
                    );
                }
                self.met = true;
                self.txn = Some((commit_lsn, InTxn::Publish));
                Ok(Verdict::Skip)
            }
        }
    }

    /// The open transaction commits.
    pub fn commit(&mut self) -> Result<(), HistoryChanged> {
        if let Some((commit_lsn, InTxn::Checkpoint { seen })) = self.txn {
            return Err(self.changed(format!(
                "the transaction committed at {commit_lsn} ended after {seen} changes"
            )));
        }
        self.txn = None;
        Ok(())
    }

    /// A keepalive outside a transaction: the stream reached `wal_end` with nothing more to
    /// send, so a met checkpoint whose covered LSN is behind it ends the skip.
    pub fn keepalive(&mut self, wal_end: Lsn) {
        if !self.done && self.met && self.txn.is_none() && wal_end >= self.covered {
            self.done = true;
        }
    }

    fn changed(&self, found: String) -> HistoryChanged {
        let expected = match &self.last {
            Some(l) => format!(
                "{l} is the last one Kafka holds, and all up to {}",
                self.covered
            ),
            None => format!("Kafka holds everything up to {}", self.covered),
        };
        HistoryChanged { expected, found }
    }
}

#[cfg(test)]
mod tests;
