//! The gates of the progress rule: when the skip after a start ends, when a checkpoint may and
//! must be written, and when a Kafka transaction must be committed.
//!
//! Invariants:
//! - **The skip is released once**, when it is over ([`Progress::release_skip`]): before that
//!   nothing beyond the start is confirmed, afterwards the checkpoint's covered LSN may be.
//! - **No checkpoint before the skip is verified**: until the stream met the checkpoint's own
//!   change, the acknowledged prefix includes skipped changes that a changed history may not
//!   have, and a checkpoint covering them would hide the change from the next start.
//! - **Without Kafka transactions a checkpoint only moves forward** and covers no more than
//!   Kafka acknowledged; with them it covers every closed source transaction handed to the
//!   open Kafka transaction, never an open one ([`Progress::checkpoint_position_handed`]).
//! - **Without Kafka transactions a checkpoint is due by volume too**
//!   ([`Progress::checkpoint_volume_due`]): a start after a crash of the relay skips what the
//!   newest checkpoint covers, so what a crash sends again is what Kafka acknowledged after it
//!   plus what was in flight. Written once per status interval only, a catch-up at 100k events/s
//!   re-sends up to a second of them; by volume too, about `relay.checkpoint_bytes`.
//! - **An idle checkpoint commits alone**: in exactly-once mode the stream's progress without
//!   records (keepalives, other tables) is confirmable only through a checkpoint, written in a
//!   transaction of its own, so never while records wait for a commit or a commit runs.

use super::Progress;
use crate::{Lsn, skip::SkipStatus, watermark::FramingError};

/// What a checkpoint written now would end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointAt {
    /// The open Kafka transaction's commit (with transactions).
    KafkaCommit,
    /// Nothing: without transactions, a checkpoint follows the acknowledgements it describes.
    Acknowledged,
}

impl Progress {
    /// The skip after the start (`skip`, [`crate::skip::Skip::status`]): once it is over, its
    /// covered LSN goes to the rule ([`skip_done`](Self::skip_done)). `Some(covered)` the one
    /// time that happens.
    pub fn release_skip(&mut self, skip: SkipStatus) -> Option<Lsn> {
        if self.skip_released || !skip.done {
            return None;
        }
        self.skip_released = true;
        self.skip_done(skip.covered);
        Some(skip.covered)
    }

    /// The LSN a checkpoint written now covers, or `None` when none may be written: no
    /// checkpoints on this connection, the skip not verified, a kind of write the mode does not
    /// have, or (without transactions) nothing acknowledged since the last one ([`checkpoint_written`](Self::checkpoint_written)).
    pub fn checkpoint_to_write(&self, skip: SkipStatus, at: CheckpointAt) -> Option<Lsn> {
        if !self.checkpoints || !skip.verified {
            return None;
        }
        match at {
            CheckpointAt::KafkaCommit if self.transactional => {
                Some(self.checkpoint_position_handed())
            }
            CheckpointAt::Acknowledged if !self.transactional => {
                let covered = self.checkpoint_position();
                (covered > self.last_written).then_some(covered)
            }
            // A checkpoint goes with the kind of write the mode has: with Kafka transactions
            // only in a commit (an acknowledgement of a record of an open transaction is no
            // promise that it stays), without them never in one.
            CheckpointAt::KafkaCommit | CheckpointAt::Acknowledged => None,
        }
    }

    /// Without transactions: a checkpoint covering `covered` was handed to Kafka.
    pub fn checkpoint_written(&mut self, covered: Lsn) {
        self.last_written = self.last_written.max(covered);
        self.acked_bytes_unwritten = 0;
    }

    /// Without transactions, with checkpoints on this connection: Kafka acknowledged at least
    /// `every_bytes` of payload (`relay.checkpoint_bytes`; 0: never) since the last checkpoint
    /// written, so one is due now whatever the clock says. Whether one may be written, and what
    /// it covers, is still [`checkpoint_to_write`](Self::checkpoint_to_write)'s: this only
    /// says when to ask.
    pub fn checkpoint_volume_due(&self, every_bytes: u64) -> bool {
        self.checkpoints
            && !self.transactional
            && every_bytes > 0
            && self.acked_bytes_unwritten >= every_bytes
    }

    /// Exactly-once mode, idle: a Kafka transaction holding only a checkpoint is due (the
    /// stream moved past the last checkpoint without records, no records wait for a commit,
    /// no commit runs, and the skip is verified).
    pub fn idle_checkpoint_due(&self, skip: SkipStatus) -> bool {
        self.checkpoint_due()
            && !self.kafka_commit_pending()
            && !self.kafka_committing()
            && skip.verified
    }

    /// A record outside any source transaction (a non-transactional logical message that gets a
    /// record: its dead-letter record) is a transaction of its own at its LSN: call this, then
    /// [`record`](Self::record) and [`handed`](Self::handed) once, then
    /// [`end_alone`](Self::end_alone). It is confirmed like any transaction once Kafka holds
    /// its record, never before the transactions ahead of it.
    pub fn begin_alone(&mut self, lsn: Lsn, time_unix_us: i64) -> Result<(), FramingError> {
        self.begin(lsn, time_unix_us)
    }

    /// The end of [`begin_alone`](Self::begin_alone)'s transaction.
    pub fn end_alone(&mut self, lsn: Lsn) -> Result<(), FramingError> {
        self.commit(lsn, lsn)
    }

    /// With transactions: the open Kafka transaction holds `max_records`
    /// (`kafka.max_transaction_records`) and is committed now, even inside a source
    /// transaction (the change index keeps the skip exact).
    pub fn kafka_transaction_full(&self, max_records: u64) -> bool {
        self.transactional && self.kafka_txn_records >= max_records
    }
}
