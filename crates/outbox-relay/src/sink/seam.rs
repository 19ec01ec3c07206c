//! What the pipeline needs from Kafka: the seam between the loop and the producer. The relay
//! runs the rdkafka sink ([`KafkaSink`]); the loop tests also run over an in-memory one, on
//! tokio's paused clock.
//!
//! Contract the progress rule relies on (correctness notes K1-K6): records keep the order of
//! the `send` calls per partition; every record handed over gets exactly one report on the
//! pipeline's report channel ([`Delivered`](super::Delivered)); a commit covers every record
//! and checkpoint handed since the previous one, or none of them; [`Sink::commit_start`] starts
//! the next transaction only once every report of the committing one was served.
//!
//! A report's failure is the seam's own ([`Failure`](super::Failure): refused for good,
//! fenced, purged, not acknowledged, or transient, with the client's text): a sink maps its
//! client's errors into it where it receives them, so nothing on this side of the seam names
//! the Kafka client's types.

use std::time::Duration;

use relay_core::route::Record;

use super::{CommitEnded, Delivered, KafkaSink, Origin, RunningCommit};
use crate::error::RelayError;

pub(crate) trait Sink {
    /// Hands one record to Kafka, in order; waits while the local queue is full.
    async fn send(&self, rec: &Record, origin: Origin) -> Result<(), RelayError>;
    /// The partition `rec` lands on: its own, else its key's under Kafka's default
    /// partitioner. `None`: the topic's partition count cannot be read (librdkafka chooses).
    async fn partition_of(&self, rec: &Record) -> Option<i32>;
    /// Hands a checkpoint record to Kafka (`wait`: for room in a full queue).
    async fn send_checkpoint(
        &self,
        topic: &str,
        key: &str,
        value: &[u8],
        wait: bool,
    ) -> Result<(), RelayError>;
    /// The error of a checkpoint Kafka did not take since the last call (no transactions).
    fn checkpoint_failure(&self) -> Option<String>;
    /// Sends what is queued now rather than after `linger.ms`.
    fn kick(&self);
    /// The kick held back by records in flight, once they are reported.
    fn try_kick(&self);
    /// Waits (at most `timeout`) until every record's report was served; `false` if not.
    async fn reports_served(&self, timeout: Duration) -> bool;
    /// A report with the cause the sink knows of (a purged record of a refused topic).
    fn attribute(&self, d: Delivered) -> Delivered;
    /// Records handed over whose reports were not served yet.
    fn in_flight(&self) -> i32;
    /// An error that ended the producer for good (it must be rebuilt).
    fn fatal_error(&self) -> Option<RelayError>;
    /// With transactions: fences earlier producers and opens the first transaction.
    async fn fence_and_begin(&self, timeout: Duration) -> Result<(), RelayError>;
    /// A commit may run while the next transaction fills ([`commit_start`](Self::commit_start)).
    fn pipelines_commits(&self) -> bool;
    /// Commits the open transaction and opens the next one; how long the flush took.
    async fn commit_and_begin(&self, timeout: Duration) -> Result<Duration, RelayError>;
    /// Sends the commit and opens the next transaction without waiting for the answer.
    async fn commit_start(
        &self,
        timeout: Duration,
    ) -> Result<(RunningCommit, Duration), RelayError>;
    /// How a commit sent by [`commit_start`](Self::commit_start) ended.
    fn commit_settled(&self, ended: CommitEnded) -> Result<(), RelayError>;
    /// Aborts the open transaction: its records are never visible to read-committed readers.
    async fn abort(&self, timeout: Duration) -> Result<(), RelayError>;
}

impl Sink for KafkaSink {
    async fn send(&self, rec: &Record, origin: Origin) -> Result<(), RelayError> {
        KafkaSink::send(self, rec, origin).await
    }
    async fn partition_of(&self, rec: &Record) -> Option<i32> {
        KafkaSink::partition_of(self, rec).await
    }
    async fn send_checkpoint(
        &self,
        topic: &str,
        key: &str,
        value: &[u8],
        wait: bool,
    ) -> Result<(), RelayError> {
        KafkaSink::send_checkpoint(self, topic, key, value, wait).await
    }
    fn checkpoint_failure(&self) -> Option<String> {
        KafkaSink::checkpoint_failure(self)
    }
    fn kick(&self) {
        KafkaSink::kick(self)
    }
    fn try_kick(&self) {
        KafkaSink::try_kick(self)
    }
    async fn reports_served(&self, timeout: Duration) -> bool {
        KafkaSink::reports_served(self, timeout).await
    }
    fn attribute(&self, d: Delivered) -> Delivered {
        KafkaSink::attribute(self, d)
    }
    fn in_flight(&self) -> i32 {
        KafkaSink::in_flight(self)
    }
    fn fatal_error(&self) -> Option<RelayError> {
        KafkaSink::fatal_error(self)
    }
    async fn fence_and_begin(&self, timeout: Duration) -> Result<(), RelayError> {
        KafkaSink::fence_and_begin(self, timeout).await
    }
    fn pipelines_commits(&self) -> bool {
        KafkaSink::pipelines_commits(self)
    }
    async fn commit_and_begin(&self, timeout: Duration) -> Result<Duration, RelayError> {
        KafkaSink::commit_and_begin(self, timeout).await
    }
    async fn commit_start(
        &self,
        timeout: Duration,
    ) -> Result<(RunningCommit, Duration), RelayError> {
        KafkaSink::commit_start(self, timeout).await
    }
    fn commit_settled(&self, ended: CommitEnded) -> Result<(), RelayError> {
        KafkaSink::commit_settled(self, ended)
    }
    async fn abort(&self, timeout: Duration) -> Result<(), RelayError> {
        KafkaSink::abort(self, timeout).await
    }
}
