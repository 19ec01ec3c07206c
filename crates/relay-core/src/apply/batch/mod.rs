//! The records of one partition, in one PostgreSQL transaction or as few as the failures allow.
//!
//! Invariant: records are committed in offset order, each at most once per plan, and a record
//! is handed to its failure policy (dead-letter or halt) only when it failed as the *first*
//! record of a transaction, that is with everything before it committed. So one failing
//! handler never undoes the claims and effects of the records beside it, and it costs no
//! savepoint: a definite failure at record `i` rolls the transaction back, the records before
//! `i` are committed again without it, and `i` is tried once more at the head of the rest
//! (where it fails alone or, if it only failed because of its neighbours, goes through).
//! A savepoint per record would do it in one transaction, but past 64 subtransactions in one
//! transaction PostgreSQL spills to `pg_subtrans` (the subxid cache overflows), which slows
//! every snapshot on the server (docs/inbox.md).

use std::ops::Range;

/// The outcome of one transaction over [`Step::Apply`]'s records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Committed (or, after a COMMIT of unknown outcome, found committed in the offsets table).
    Committed,
    /// Rolled back for a transient reason: the same records are tried again after a backoff.
    Transient,
    /// Record `index` (an index into the batch, inside the attempted range) failed definitely.
    Failed(usize),
}

/// A definite error at COMMIT (a deferred constraint) names no record: it is attributed to the
/// last record of the attempt, so the records before it are committed without it and the
/// failure narrows down, attempt by attempt, to the first record that cannot commit, which then
/// fails alone at the head of an attempt.
pub fn failed_at_commit(attempt: &Range<usize>) -> Outcome {
    Outcome::Failed(attempt.end - 1)
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Run these records (indices into the batch) in one transaction and report the outcome.
    Apply(Range<usize>),
    /// Record `index` failed at the head of a transaction: apply the failure policy to it
    /// alone, then call [`Plan::handled`] (dead-lettered) or stop the partition (halt).
    Fail(usize),
    /// Every record is committed or handled.
    Done,
}

/// The plan for one batch of `len` records.
#[derive(Debug, Clone)]
pub struct Plan {
    len: usize,
    /// Records before this one are committed or handled.
    cursor: usize,
    /// The range tried next (or being tried): `cursor..end`.
    end: usize,
    /// A record that failed at the head of the last attempt, not yet handled.
    failing: Option<usize>,
    /// The most records one attempt takes ([`Plan::limit`]).
    cap: usize,
}

impl Plan {
    pub fn new(len: usize) -> Plan {
        Plan {
            len,
            cursor: 0,
            end: len,
            failing: None,
            cap: usize::MAX,
        }
    }

    /// The next attempts take at most `cap` records (at least one): after a conflict with
    /// another transaction, the partition goes on in smaller transactions
    /// (`contention::Width`). Set it before [`Plan::next`], not between it and the report.
    pub fn limit(&mut self, cap: usize) {
        self.cap = cap.max(1);
    }

    /// The end of the attempt [`Plan::next`] gives.
    fn attempt_end(&self) -> usize {
        self.end.min(self.cursor.saturating_add(self.cap))
    }

    /// Records before this index are done (committed or handled).
    pub fn done_before(&self) -> usize {
        self.cursor
    }

    pub fn next(&self) -> Step {
        if let Some(i) = self.failing {
            return Step::Fail(i);
        }
        if self.cursor >= self.len {
            return Step::Done;
        }
        Step::Apply(self.cursor..self.attempt_end())
    }

    /// Reports the outcome of the last [`Step::Apply`].
    ///
    /// # Panics
    /// When called while a failure waits to be handled, or with a failing index outside the
    /// attempted range (a bug in the caller).
    pub fn report(&mut self, outcome: Outcome) {
        assert!(self.failing.is_none(), "a failure is waiting to be handled");
        match outcome {
            Outcome::Committed => {
                self.cursor = self.attempt_end();
                if self.cursor >= self.end {
                    self.end = self.len;
                }
            }
            Outcome::Transient => {}
            Outcome::Failed(i) => {
                assert!(
                    (self.cursor..self.attempt_end()).contains(&i),
                    "failed record {i} outside the attempt {}..{}",
                    self.cursor,
                    self.attempt_end()
                );
                if i == self.cursor {
                    self.failing = Some(i);
                } else {
                    // Commit what came before it, without it.
                    self.end = i;
                }
            }
        }
    }

    /// The failing record was dead-lettered (in its own transaction, offset advanced).
    pub fn handled(&mut self) {
        let i = self.failing.take().expect("no failure to handle");
        self.cursor = i + 1;
        self.end = self.len;
    }
}

#[cfg(test)]
mod tests;
