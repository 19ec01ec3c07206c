//! The progress rule of one replication connection: what may be read, what may be confirmed to
//! PostgreSQL, and what a Kafka transaction commit covers.
//!
//! Invariants (correctness notes, "the LSN rules"):
//! - **Confirm only what Kafka holds.** [`Progress::confirmable`] is the [`AckTracker`]
//!   watermark: the end of the longest prefix of source transactions whose records Kafka
//!   acknowledged (or an idle keepalive behind it). After a failed delivery it never moves.
//! - **With Kafka transactions, only what a committed transaction holds.** An acknowledged record
//!   of a Kafka transaction that later aborts is invisible to read-committed consumers, so while
//!   the open Kafka transaction holds records, confirmation is capped at the watermark it had when
//!   it got its first one; [`Progress::kafka_committed`] lifts the cap. A commit may run while
//!   the next Kafka transaction fills ([`Progress::kafka_commit_started`], then
//!   [`Progress::kafka_commit_settled`]): the committing transaction's cap holds until it
//!   settles, and the next one's cap is taken as it gets its first record, so neither lifts
//!   the other's.
//! - **Confirmations never go backwards** and are handed out once ([`Progress::take_confirmation`]).
//! - **In exactly-once mode, only what a committed checkpoint covers**
//!   ([`Progress::with_checkpoints`]): confirmation is further capped at the covered LSN of the
//!   last checkpoint committed in Kafka (or verified by the skip after a start), so a restart
//!   can always tell from Kafka alone what it holds.
//! - **A checkpoint names only what a start may skip** ([`Progress::checkpoint_to_write`]): none
//!   before the skip after a start is verified, and none covering an open transaction.
//! - **Read only within the in-flight limits** ([`Progress::can_read`]): records and payload
//!   bytes handed to Kafka and not acknowledged stay below the configured bounds.

use crate::{
    Lsn,
    watermark::{AckTracker, FramingError, TxId},
};

/// The in-flight bounds (`relay.max_in_flight_records`, `relay.max_in_flight_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub records: u64,
    pub bytes: u64,
}

/// Progress bookkeeping for one connection.
#[derive(Debug)]
pub struct Progress {
    tracker: AckTracker,
    limits: Limits,
    transactional: bool,
    confirmed: Lsn,
    received: Lsn,
    in_flight_bytes: u64,
    acked: u64,
    /// With Kafka transactions, while the open one holds records: the watermark when it got its
    /// first one.
    confirm_cap: Option<Lsn>,
    /// With Kafka transactions, while a commit runs: the cap of the transaction it commits.
    committing_cap: Option<Lsn>,
    /// A commit runs (started and not settled).
    committing: bool,
    /// While skipping after a start, and always in exactly-once mode: the covered LSN of the
    /// last committed (or verified) checkpoint.
    checkpointed: Option<Lsn>,
    exactly_once: bool,
    kafka_txn_records: u64,
    /// Checkpoints are written on this connection ([`with_checkpoints`](Self::with_checkpoints)).
    checkpoints: bool,
    /// The skip's end was handed to the rule ([`release_skip`](Self::release_skip)).
    skip_released: bool,
    /// Without Kafka transactions: the covered LSN of the last checkpoint written.
    last_written: Lsn,
    /// Payload bytes Kafka acknowledged since the last checkpoint written
    /// ([`checkpoint_volume_due`](Self::checkpoint_volume_due)).
    acked_bytes_unwritten: u64,
    /// After a failed delivery: what was confirmable then, never exceeded again (a skip
    /// released or a checkpoint committed later lifts no cap).
    frozen: Option<Lsn>,
}

impl Progress {
    /// `start` is the slot's `confirmed_flush_lsn`; `transactional` is
    /// `kafka.transactional_id` being set.
    pub fn new(start: Lsn, limits: Limits, transactional: bool) -> Self {
        Self {
            tracker: AckTracker::new(start),
            limits,
            transactional,
            confirmed: start,
            received: start,
            in_flight_bytes: 0,
            acked: 0,
            confirm_cap: None,
            committing_cap: None,
            committing: false,
            checkpointed: None,
            exactly_once: false,
            kafka_txn_records: 0,
            checkpoints: false,
            skip_released: false,
            last_written: start,
            acked_bytes_unwritten: 0,
            frozen: None,
        }
    }

    /// After a start with a checkpoint to skip by ([`crate::skip`]): nothing is confirmed until
    /// [`skip_done`](Self::skip_done). In exactly-once mode, never anything beyond what a
    /// committed checkpoint covers.
    pub fn with_checkpoints(mut self, exactly_once: bool) -> Self {
        self.checkpointed = Some(self.confirmed);
        self.exactly_once = exactly_once;
        self.checkpoints = true;
        self
    }

    /// The skip after the start is over: `covered` (the checkpoint's) may be confirmed, and in
    /// at-least-once mode checkpoints no longer cap anything.
    pub fn skip_done(&mut self, covered: Lsn) {
        if self.exactly_once {
            self.checkpoint_committed(covered);
        } else {
            self.checkpointed = None;
        }
    }

    /// A checkpoint covering `covered` is in Kafka (committed with its transaction, or found and
    /// verified by the skip after a start).
    pub fn checkpoint_committed(&mut self, covered: Lsn) {
        if let Some(c) = self.checkpointed.as_mut() {
            *c = (*c).max(covered);
        }
    }

    /// The LSN a checkpoint written now covers: the acknowledged prefix (with Kafka
    /// transactions, call it once every record of the open one is acknowledged).
    pub fn checkpoint_position(&self) -> Lsn {
        self.tracker.watermark()
    }

    /// With Kafka transactions: the LSN a checkpoint that ends the open transaction covers,
    /// taken before its records are acknowledged: every source transaction closed so far. The
    /// commit makes every record handed to it visible together with the checkpoint, or none of
    /// them, and every earlier record is in a committed transaction. Once the commit's reports
    /// are read it equals [`checkpoint_position`](Self::checkpoint_position).
    pub fn checkpoint_position_handed(&self) -> Lsn {
        debug_assert!(
            self.transactional,
            "only a Kafka transaction makes this safe"
        );
        self.tracker.handed()
    }

    /// Exactly-once mode: the stream moved past the last checkpoint without records (idle
    /// keepalives, heartbeats, other tables), so only a checkpoint lets that be confirmed.
    pub fn checkpoint_due(&self) -> bool {
        self.exactly_once
            && self
                .checkpointed
                .is_some_and(|c| self.tracker.watermark() > c && !self.tracker.is_failed())
    }

    /// A Begin: `commit_lsn` is the transaction's final LSN.
    pub fn begin(&mut self, commit_lsn: Lsn, commit_time_unix_us: i64) -> Result<(), FramingError> {
        self.tracker
            .begin(commit_lsn, commit_time_unix_us)
            .map(|_| ())
    }

    /// One record of the open transaction goes to Kafka. The id travels with it and comes back
    /// with its acknowledgement.
    pub fn record(&mut self) -> Result<TxId, FramingError> {
        self.tracker.add_record()
    }

    /// librdkafka accepted the record (or the dead-letter record in its place): `bytes` of key
    /// and value are in flight, and with Kafka transactions the open one now holds a record.
    pub fn handed(&mut self, bytes: u64) {
        self.in_flight_bytes += bytes;
        self.kafka_txn_records += 1;
        if self.transactional && self.confirm_cap.is_none() {
            self.confirm_cap = Some(self.tracker.watermark());
        }
    }

    /// A Commit.
    pub fn commit(&mut self, commit_lsn: Lsn, end_lsn: Lsn) -> Result<(), FramingError> {
        self.saw(end_lsn);
        self.tracker.commit(commit_lsn, end_lsn)
    }

    /// A primary keepalive.
    pub fn keepalive(&mut self, wal_end: Lsn) {
        self.saw(wal_end);
        self.tracker.keepalive(wal_end);
    }

    /// The stream reached `lsn` (any message's `wal_end`).
    pub fn saw(&mut self, lsn: Lsn) {
        self.received = self.received.max(lsn);
    }

    /// Kafka acknowledged one record of `tx` (`bytes` of payload).
    pub fn ack(&mut self, tx: TxId, bytes: u64) -> Result<(), FramingError> {
        self.tracker.ack(tx)?;
        self.acked += 1;
        self.acked_bytes_unwritten = self.acked_bytes_unwritten.saturating_add(bytes);
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(bytes);
        Ok(())
    }

    /// A delivery failed: nothing more is ever confirmed on this connection.
    pub fn fail(&mut self) {
        if self.frozen.is_none() {
            self.frozen = Some(self.confirmable());
        }
        self.tracker.fail();
    }

    /// The open Kafka transaction committed: everything acknowledged in it may be confirmed.
    /// (The commit flushes: every record in it is acknowledged when it returns, and the
    /// acknowledged prefix, not this call, decides what is confirmed.)
    pub fn kafka_committed(&mut self) {
        self.kafka_commit_started();
        self.kafka_commit_settled();
    }

    /// The open Kafka transaction's commit was sent (every record of it acknowledged); records
    /// handed from now on go to the next transaction. Its cap holds until
    /// [`kafka_commit_settled`](Self::kafka_commit_settled).
    pub fn kafka_commit_started(&mut self) {
        debug_assert!(!self.committing, "one commit at a time");
        self.committing_cap = self.confirm_cap.take();
        self.committing = true;
        self.kafka_txn_records = 0;
    }

    /// The commit sent by [`kafka_commit_started`](Self::kafka_commit_started) succeeded.
    pub fn kafka_commit_settled(&mut self) {
        self.committing_cap = None;
        self.committing = false;
    }

    /// A commit was started and has not settled.
    pub fn kafka_committing(&self) -> bool {
        self.committing
    }

    /// The open Kafka transaction holds records that only a commit makes confirmable.
    pub fn kafka_commit_pending(&self) -> bool {
        self.confirm_cap.is_some()
    }

    /// The stream may be read: the in-flight limits are not reached.
    pub fn can_read(&self) -> bool {
        self.tracker.outstanding_records() < self.limits.records
            && self.in_flight_bytes < self.limits.bytes
    }

    /// The highest LSN that may be confirmed now.
    pub fn confirmable(&self) -> Lsn {
        let w = [self.confirm_cap, self.committing_cap]
            .into_iter()
            .flatten()
            .fold(self.tracker.watermark(), Lsn::min);
        [self.checkpointed, self.frozen]
            .into_iter()
            .flatten()
            .fold(w, Lsn::min)
    }

    /// The LSN to confirm if it moved since the last call; it is then the confirmed LSN.
    pub fn take_confirmation(&mut self) -> Option<Lsn> {
        let c = self.confirmable();
        (c > self.confirmed).then(|| {
            self.confirmed = c;
            c
        })
    }

    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    pub fn received(&self) -> Lsn {
        self.received
    }

    /// Records Kafka acknowledged since the connection started (progress while waiting).
    pub fn acked(&self) -> u64 {
        self.acked
    }

    pub fn outstanding_records(&self) -> u64 {
        self.tracker.outstanding_records()
    }

    /// Payload bytes handed to Kafka and not yet acknowledged.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    pub fn pending_txns(&self) -> usize {
        self.tracker.pending_txns()
    }

    pub fn oldest_pending_commit_time(&self) -> Option<i64> {
        self.tracker.oldest_pending_commit_time()
    }
}

mod gate;
#[cfg(test)]
mod tests;

pub use gate::CheckpointAt;
