//! Kafka transactions (`kafka.transactional_id`): fencing at start, commit-and-begin on
//! alternating producers, abort; librdkafka's blocking calls off the runtime's thread.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use rdkafka::{
    error::RDKafkaErrorCode,
    producer::{BaseProducer, Producer},
};

use super::{KafkaSink, SinkContext};
use crate::error::{Definite, RelayError, Transient};

impl KafkaSink {
    /// `kafka.transactional_id`, once the slot is ours: registers the id with the transaction
    /// coordinator, which fences every earlier producer with it and aborts its unfinished
    /// transaction, then opens the first transaction.
    pub(crate) async fn fence_and_begin(&self, timeout: Duration) -> Result<(), RelayError> {
        // Every id of the relay before anything is read or written: the checkpoint read
        // after this sees whatever an older instance committed with either of them.
        for i in 1..self.producers.len() {
            self.transaction_on(i, move |p| p.init_transactions(timeout))
                .await?;
        }
        self.active.store(0, Ordering::Relaxed);
        self.transaction(move |p| {
            p.init_transactions(timeout)?;
            p.begin_transaction()
        })
        .await
    }

    /// Commits the open transaction (after every record in it was acknowledged) and opens the
    /// next one. Returns how long the flush (every record acknowledged) took.
    pub(crate) async fn commit_and_begin(&self, timeout: Duration) -> Result<Duration, RelayError> {
        // rdkafka's commit_transaction first flushes, polling for reports in 100 ms steps; with
        // the producer's own thread serving them, every commit took 100 ms. Wait here for the
        // queue to drain (reports served), so that flush returns at once.
        let started = Instant::now();
        self.reports_served(timeout).await;
        let flushed = started.elapsed();
        if self.producers.len() == 1 {
            self.transaction(move |p| {
                p.commit_transaction(timeout)?;
                p.begin_transaction()
            })
            .await?;
            return Ok(flushed);
        }
        self.transaction(move |p| p.commit_transaction(timeout))
            .await?;
        // The next transaction on the other producer: its last one ended a transaction ago.
        self.active.fetch_add(1, Ordering::Relaxed);
        self.transaction(move |p| p.begin_transaction()).await?;
        Ok(flushed)
    }

    /// Commits run on while the next transaction fills ([`commit_start`](Self::commit_start)):
    /// there are two producers.
    pub(crate) fn pipelines_commits(&self) -> bool {
        self.producers.len() >= 2
    }

    /// With two producers: commits the open transaction without waiting for Kafka's answer.
    /// Flushes it (every record acknowledged), sends the commit from a blocking thread, and
    /// opens the next transaction on the other producer at once, so the stream keeps flowing
    /// while the coordinator answers. Order holds: every record of the committing transaction
    /// is acknowledged before the next one's first is sent, and the caller commits the next
    /// one only after [`commit_settled`](Self::commit_settled) said this one succeeded (else
    /// it aborts the next one). Returns the running commit and how long the flush took.
    pub(crate) async fn commit_start(
        &self,
        timeout: Duration,
    ) -> Result<(RunningCommit, Duration), RelayError> {
        debug_assert!(
            self.producers.len() >= 2,
            "a commit runs on its own producer"
        );
        let started = Instant::now();
        // Not all in (Kafka away longer than `timeout`): the next transaction must not start,
        // or its records could reach a partition before this one's still queued (seen as
        // reordered events when Kafka came back). Ending here aborts this transaction and
        // restarts from the last confirmed LSN, as a single producer's timed-out commit does.
        if !self.reports_served(timeout).await && self.unreported() > 0 {
            return Err(Transient::kafka_transaction(format!(
                "{} records of the transaction were not acknowledged within {} ms",
                self.unreported(),
                timeout.as_millis()
            ))
            .into());
        }
        let flushed = started.elapsed();
        let producer =
            self.producers[self.active.load(Ordering::Relaxed) % self.producers.len()].clone();
        let id = self.transactional_id.clone();
        let handle = crate::telemetry::source_scope::spawn(async move {
            let joined =
                tokio::task::spawn_blocking(move || producer.commit_transaction(timeout)).await;
            transaction_outcome(id.as_deref(), joined)
        });
        self.active.fetch_add(1, Ordering::Relaxed);
        self.transaction(move |p| p.begin_transaction()).await?;
        Ok((RunningCommit::new(handle), flushed))
    }

    /// How a commit sent by [`commit_start`](Self::commit_start) ended
    /// ([`RunningCommit::ended`]).
    pub(crate) fn commit_settled(&self, ended: CommitEnded) -> Result<(), RelayError> {
        ended.into_result()
    }

    /// Aborts the open transaction: its records are purged and never visible to
    /// read-committed consumers.
    pub(crate) async fn abort(&self, timeout: Duration) -> Result<(), RelayError> {
        let aborting = self.context().aborting.clone();
        aborting.store(true, Ordering::Release);
        let aborted = self
            .transaction(move |p| p.abort_transaction(timeout))
            .await;
        aborting.store(false, Ordering::Release);
        aborted
    }

    /// Runs a blocking transaction call off the runtime's thread.
    async fn transaction(
        &self,
        call: impl FnOnce(&BaseProducer<SinkContext>) -> rdkafka::error::KafkaResult<()>
        + Send
        + 'static,
    ) -> Result<(), RelayError> {
        let active = self.active.load(Ordering::Relaxed);
        self.transaction_on(active, call).await
    }

    /// Runs a blocking transaction call on producer `index` off the runtime's thread.
    pub(super) async fn transaction_on(
        &self,
        index: usize,
        call: impl FnOnce(&BaseProducer<SinkContext>) -> rdkafka::error::KafkaResult<()>
        + Send
        + 'static,
    ) -> Result<(), RelayError> {
        let producer = self.producers[index % self.producers.len()].clone();
        let joined = tokio::task::spawn_blocking(move || call(&producer)).await;
        transaction_outcome(self.transactional_id.as_deref(), joined)
    }
}

/// A transaction call's outcome as the relay's error: fenced, refused for good, or transient
/// (outcome unknown: the pipeline restarts with new producers). `id`: the transactional id, for
/// the refusal's message.
fn transaction_outcome(
    id: Option<&str>,
    joined: Result<rdkafka::error::KafkaResult<()>, tokio::task::JoinError>,
) -> Result<(), RelayError> {
    joined
        .map_err(Transient::kafka_transaction_by)?
        .map_err(|e| match e.rdkafka_error_code() {
            Some(c) if is_fenced(c) => Transient::fenced_by(e).into(),
            Some(
                RDKafkaErrorCode::TransactionalIdAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed,
            ) => Definite::KafkaTransactionRefused {
                id: id.unwrap_or_default().to_string(),
                detail: e.to_string(),
            }
            .into(),
            _ => RelayError::from(Transient::kafka_transaction_by(e)),
        })
}

/// A Kafka commit running on while the next transaction fills ([`KafkaSink::commit_start`]).
pub(crate) struct RunningCommit {
    handle: tokio::task::JoinHandle<Result<(), RelayError>>,
}

/// How a [`RunningCommit`] ended, for [`KafkaSink::commit_settled`].
pub(crate) struct CommitEnded(Result<(), RelayError>);

impl CommitEnded {
    /// The commit's outcome.
    pub(crate) fn into_result(self) -> Result<(), RelayError> {
        self.0
    }
}

impl RunningCommit {
    /// A commit whose outcome `handle` yields.
    pub(crate) fn new(handle: tokio::task::JoinHandle<Result<(), RelayError>>) -> Self {
        Self { handle }
    }

    /// Waits until the commit ended. Cancel-safe: dropped before that, it can be waited for
    /// again; once it returned, the commit must not be waited for again.
    pub(crate) async fn ended(&mut self) -> CommitEnded {
        CommitEnded(
            (&mut self.handle)
                .await
                .unwrap_or_else(|e| Err(Transient::kafka_transaction_by(e).into())),
        )
    }
}

/// The codes with which Kafka tells a producer that a newer one with its transactional id
/// exists.
pub(super) fn is_fenced(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
    )
}
