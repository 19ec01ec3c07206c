//! The pipeline's skip and checkpoint bookkeeping, as one value ([`Ledger`]) that only this
//! file changes: what Kafka already holds after the start (the skip), the open transaction's
//! change index, the checkpoint trail, the checkpoint that primes the next Kafka transaction,
//! and the Kafka commit still running. The pipeline's other files tell it what happened (a
//! transaction began, a change came, got its record, committed, was acknowledged, a checkpoint
//! was written or committed) and ask it what a checkpoint names; when a checkpoint is due is
//! the progress rule's ([`relay_core::progress`]), not the ledger's.
//!
//! Invariants:
//! - Every change of the open transaction that has a record or could have one (an INSERT, a
//!   transactional logical message) is counted once, in stream order, by [`Ledger::change`];
//!   the index restarts at each [`Ledger::begin`]. The skip and the trail see the same index,
//!   so a checkpoint names a change the next start's skip can find again.
//! - The trail is fed only when checkpoints are written on this connection
//!   ([`Ledger::writes_checkpoints`]); without them it stays empty.
//! - A primer is a copy of the last checkpoint put into a Kafka transaction, and exists only
//!   from the first such checkpoint of this connection on (the skip is verified by then): it
//!   covers no more than an earlier checkpoint named, and the closing checkpoint of the
//!   transaction it primes follows it ([`super::send`]). It is sent at most once per
//!   transaction.
//! - At most one Kafka commit runs at a time; it is taken from the ledger only once its end
//!   is known ([`Ledger::commit_ended`]), so the progress rule and the ledger never disagree
//!   about whether one runs.

use relay_core::{
    Lsn,
    checkpoint::{Checkpoint, Fingerprint, Trail},
    skip::{HistoryChanged, Skip, SkipStatus, Verdict},
};

use std::time::Duration;

use tokio::time::Instant;

use super::deliberate::Bug::ForgetSplitPoint;
use crate::sink::{RunningCommit, checkpoint_topic::Identity};

/// The skip and checkpoint bookkeeping of one connection (module comment).
pub(super) struct Ledger {
    /// What Kafka already holds after the start ([`relay_core::skip`]): from the checkpoint
    /// read at this connection's start until the skip is done.
    skip: Skip,
    /// Changes the skip skipped on this connection (logged when it is done).
    skipped: u64,
    /// The change index of the next change of the open transaction (reset at each begin).
    change_index: u64,
    /// Checkpoints are written (the topic is usable): under this identity, naming the
    /// trail's last change. Decided at this connection's start.
    checkpoints: Option<Identity>,
    /// The changes published since the last checkpoint (this connection).
    trail: Trail,
    /// With transactions: the last checkpoint put into a Kafka transaction, repeated as the
    /// first record of the next one that carries records; from the first checkpoint of this
    /// connection on.
    primer: Option<Primer>,
    /// A Kafka commit sent and not answered yet (two producers: the next transaction fills
    /// meanwhile): from [`commit_sent`](Self::commit_sent) until the loop settles it.
    committing: Option<Committing>,
}

/// The last checkpoint put into a Kafka transaction, to open the next one with.
struct Primer {
    topic: String,
    key: String,
    value: Vec<u8>,
    /// Already sent in the open transaction.
    primed: bool,
}

impl Ledger {
    /// What the start found: the skip, the trail it goes on from, and the checkpoints'
    /// identity (`None`: no checkpoints on this connection).
    pub(super) fn new(skip: Skip, trail: Trail, checkpoints: Option<Identity>) -> Self {
        Self {
            skip,
            skipped: 0,
            change_index: 0,
            checkpoints,
            trail,
            primer: None,
            committing: None,
        }
    }

    /// Checkpoints are written on this connection.
    pub(super) fn writes_checkpoints(&self) -> bool {
        self.checkpoints.is_some()
    }

    /// Where the skip stands, for the progress rule's gates.
    pub(super) fn skip_status(&self) -> SkipStatus {
        self.skip.status()
    }

    /// How many changes the skip passed on this connection.
    pub(super) fn skipped(&self) -> u64 {
        self.skipped
    }

    /// A source transaction begins at `commit_lsn`: its change index starts from 0.
    pub(super) fn begin(&mut self, commit_lsn: Lsn) -> Result<(), HistoryChanged> {
        self.skip.begin(commit_lsn)?;
        self.change_index = 0;
        Ok(())
    }

    /// The next change of the open transaction, counted in its index (`routed`: the source
    /// it is routed by; `None`, a change without a record). `Some(index)`: publish it at that
    /// index; `None`: Kafka holds it already (the skip passed it).
    pub(super) fn change(
        &mut self,
        routed: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> Result<Option<u64>, HistoryChanged> {
        let index = self.change_index;
        let verdict = self.skip.change(index, routed, || fingerprint.render())?;
        self.change_index += 1;
        if verdict == Verdict::Publish {
            return Ok(Some(index));
        }
        self.skipped += 1;
        Ok(None)
    }

    /// The change at `index` of the transaction committing at `commit_lsn` got its record:
    /// the trail names it in the next checkpoint.
    pub(super) fn published(&mut self, commit_lsn: Lsn, index: u64, fingerprint: Fingerprint) {
        if self.checkpoints.is_some() {
            self.trail.published(commit_lsn, index, fingerprint);
        }
    }

    /// The open transaction's commit came, ending at `end_lsn`.
    pub(super) fn committed(&mut self, end_lsn: Lsn) -> Result<(), HistoryChanged> {
        self.skip.commit()?;
        if self.checkpoints.is_some() {
            self.trail.committed(end_lsn);
        }
        Ok(())
    }

    /// A keepalive: the server's WAL reached `wal_end` with no transaction open.
    pub(super) fn keepalive(&mut self, wal_end: Lsn) {
        self.skip.keepalive(wal_end);
    }

    /// Without transactions: every transaction ending at or before `covered` is acknowledged
    /// (the trail keeps what is in flight only).
    pub(super) fn acknowledged(&mut self, covered: Lsn) {
        if self.checkpoints.is_some() {
            self.trail.acknowledged(covered);
        }
    }

    /// The checkpoint covering `covered`, naming the last change published (in a Kafka
    /// transaction, which holds every record handed to it) or, without transactions, the
    /// last of the transactions it covers. `None`: no checkpoints on this connection.
    pub(super) fn checkpoint(&mut self, covered: Lsn, transactional: bool) -> Option<Checkpoint> {
        let id = self.checkpoints.as_ref()?;
        let last = if transactional && super::deliberate::on(ForgetSplitPoint) {
            // The open transaction left out: the last whole transaction read.
            self.trail.within(Lsn(u64::MAX))
        } else if transactional {
            self.trail.latest()
        } else {
            self.trail.within(covered)
        };
        Some(id.at(covered, last))
    }

    /// A checkpoint went into the open Kafka transaction: it primes the next one.
    pub(super) fn checkpoint_in_transaction(&mut self, topic: String, key: String, value: Vec<u8>) {
        self.primer = Some(Primer {
            topic,
            key,
            value,
            primed: false,
        });
    }

    /// The primer the open Kafka transaction still needs before its first record, if any:
    /// the checkpoint's topic, key and value.
    pub(super) fn unprimed(&self) -> Option<(&str, &str, &[u8])> {
        self.primer
            .as_ref()
            .filter(|p| !p.primed)
            .map(|p| (p.topic.as_str(), p.key.as_str(), p.value.as_slice()))
    }

    /// The primer went into the open Kafka transaction.
    pub(super) fn primed(&mut self) {
        if let Some(p) = self.primer.as_mut() {
            p.primed = true;
        }
    }

    /// A Kafka commit whose checkpoint covered `covered` succeeded: the trail forgets what it
    /// named.
    pub(super) fn checkpoint_committed(&mut self, covered: Lsn) {
        self.trail.within(covered);
    }

    /// A Kafka commit was sent and runs on while the next transaction fills.
    pub(super) fn commit_sent(&mut self, running: Committing) {
        self.committing = Some(running);
    }

    /// A Kafka commit runs.
    pub(super) fn committing(&self) -> bool {
        self.committing.is_some()
    }

    /// The running Kafka commit, to wait for its end (it stays in the ledger meanwhile).
    pub(super) fn running_commit(&mut self) -> Option<&mut Committing> {
        self.committing.as_mut()
    }

    /// The running Kafka commit, once its end is known: the caller settles it.
    pub(super) fn commit_ended(&mut self) -> Option<Committing> {
        self.committing.take()
    }
}

/// A commit sent and not yet answered ([`crate::sink::KafkaSink::commit_start`]).
pub(super) struct Committing {
    pub(super) commit: RunningCommit,
    pub(super) timing: CommitTiming,
}

/// What a Kafka commit covered and how long its steps took (logged when it ends).
pub(super) struct CommitTiming {
    /// The checkpoint it carries covers up to here.
    pub(super) covered: Option<Lsn>,
    pub(super) started: Instant,
    /// Until the records and the checkpoint were handed over.
    pub(super) handed: Duration,
    /// Until the producer's flush returned.
    pub(super) flushed: Duration,
}
