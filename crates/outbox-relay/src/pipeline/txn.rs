//! Kafka transactions (`kafka.transactional_id`): commit, then confirm what they covered;
//! abort the open one when the pipeline ends on an error.

use std::time::Duration;

use tokio::time::Instant;

use relay_core::progress::CheckpointAt;

use super::{
    ledger::{CommitTiming, Committing},
    state::Pipeline,
};
use crate::{
    config::Config,
    error::{RelayError, Transient},
    postgres::session::Session,
    sink::{CommitEnded, Sink},
    telemetry::events::{
        KAFKA_TRANSACTION_ABORT_FAILED, KAFKA_TRANSACTION_ABORTED, KAFKA_TRANSACTION_ENDED,
    },
    telemetry::metrics as m,
};

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// With `kafka.transactional_id`: commits the open Kafka transaction, after which its
    /// records' LSNs may be confirmed. With two producers the commit runs on (the loop settles
    /// it with [`settle`](Self::settle)) while the next transaction fills; a commit still
    /// running is settled first: one commit at a time, in order.
    pub(super) async fn commit(&mut self) -> Result<(), RelayError> {
        if !super::deliberate::on(super::deliberate::Bug::CommitBeforeSettled) {
            self.settle_running().await?;
        }
        let started = Instant::now();
        // The checkpoint that ends the transaction covers every source transaction closed so
        // far, written before their records are acknowledged: the commit makes all of them
        // visible with it, or none (relay_core::progress). Its records and the checkpoint then
        // go out together, in the commit's one flush.
        let mut covered = None;
        if self.ledger.writes_checkpoints() {
            self.on_reports_ready().await?;
            if let Some(position) = self
                .progress
                .checkpoint_to_write(self.ledger.skip_status(), CheckpointAt::KafkaCommit)
            {
                covered = self.write_checkpoint(position).await?;
            }
        }
        let mut timing = CommitTiming {
            covered,
            started,
            handed: started.elapsed(),
            flushed: Duration::ZERO,
        };
        let timeout = transaction_timeout(self.cfg);
        if self.sink.pipelines_commits() {
            return match self.sink.commit_start(timeout).await {
                Ok((commit, flushed)) => {
                    self.progress.kafka_commit_started();
                    timing.flushed = flushed;
                    self.ledger.commit_sent(Committing { commit, timing });
                    Ok(())
                }
                Err(e) => self.ended(Err(e), timing).await,
            };
        }
        let result = self.sink.commit_and_begin(timeout).await;
        timing.flushed = result.as_ref().map_or(Duration::ZERO, |f| *f);
        self.progress.kafka_commit_started();
        self.ended(result.map(|_| ()), timing).await
    }

    /// Waits for the running commit, if any, and settles it.
    pub(super) async fn settle_running(&mut self) -> Result<(), RelayError> {
        // Cancel-safe (a stop or the release of the connection may cancel this wait): the
        // running commit is taken only once its end is known, and `ended` records that end
        // before it awaits anything, so the progress rule and the ledger never disagree.
        let Some(running) = self.ledger.running_commit() else {
            return Ok(());
        };
        let ended_as = running.commit.ended().await;
        let running = self.ledger.commit_ended().expect("awaited just now");
        self.settle(running, ended_as).await
    }

    /// The running commit ended (`ended_as`, from [`crate::sink::RunningCommit::ended`]): on success its
    /// records may be confirmed; on failure the pipeline ends (and aborts the transaction that
    /// filled meanwhile).
    pub(super) async fn settle(
        &mut self,
        running: Committing,
        ended_as: CommitEnded,
    ) -> Result<(), RelayError> {
        let result = self.sink.commit_settled(ended_as);
        self.ended(result, running.timing).await
    }

    /// A commit's end, either way: logged and counted; on success what it covered is
    /// confirmed.
    async fn ended(
        &mut self,
        result: Result<(), RelayError>,
        timing: CommitTiming,
    ) -> Result<(), RelayError> {
        let CommitTiming {
            covered,
            started,
            handed,
            flushed,
        } = timing;
        tracing::debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            checkpoint_us = handed.as_micros() as u64,
            flush_us = flushed.as_micros() as u64,
            ok = result.is_ok(),
            "{KAFKA_TRANSACTION_ENDED}"
        );
        let outcome = if result.is_ok() {
            "committed"
        } else {
            "failed"
        };
        metrics::counter!(m::KAFKA_TRANSACTIONS, "result" => outcome).increment(1);
        // Settled before anything is awaited (see settle_running).
        if result.is_ok() {
            self.progress.kafka_commit_settled();
            if let Some(c) = covered {
                self.progress.checkpoint_committed(c);
                self.ledger.checkpoint_committed(c);
                metrics::histogram!(m::CHECKPOINT_COMMIT_SECONDS)
                    .record(started.elapsed().as_secs_f64());
            }
        }
        // The reports of the transaction's records first: a record Kafka refused is why a
        // commit fails, and it decides what happens next (the poison policy, a fenced
        // producer).
        self.on_reports_ready().await?;
        if covered.is_some() {
            let r = if result.is_ok() { "written" } else { "failed" };
            metrics::counter!(m::CHECKPOINTS_WRITTEN, "result" => r).increment(1);
        }
        result?;
        self.confirm();
        Ok(())
    }
}

/// How long a transaction call may block: Kafka's own transaction timeout (60 s by default)
/// bounds how long an open transaction can live anyway.
pub(super) fn transaction_timeout(cfg: &Config) -> Duration {
    Duration::from_millis(cfg.kafka.connect_timeout_ms.max(30_000))
}

/// With `kafka.transactional_id`, when the pipeline ends on an error: aborts the open Kafka
/// transaction, so read-committed consumers do not wait behind it for up to
/// `transaction.timeout.ms` (after a definite error nobody else would end it). Its records
/// were not confirmed and are sent again after a restart. A fenced producer has nothing to
/// abort: the instance that fenced it did.
pub(super) async fn abort_open_transaction(cfg: &Config, sink: &impl Sink, cause: &RelayError) {
    if matches!(
        cause,
        RelayError::Transient(Transient::ProducerFenced { .. })
    ) {
        return;
    }
    let limit = cfg.shutdown_timeout().min(Duration::from_secs(10));
    match tokio::time::timeout(limit, sink.abort(limit)).await {
        Ok(Ok(())) => tracing::info!(
            "{KAFKA_TRANSACTION_ABORTED}: its records stay unconfirmed and are sent again"
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "{KAFKA_TRANSACTION_ABORT_FAILED}: Kafka ends it after transaction.timeout.ms")
        }
        Err(_) => tracing::warn!(
            "{KAFKA_TRANSACTION_ABORT_FAILED}: Kafka did not answer; it ends the transaction after transaction.timeout.ms"
        ),
    }
}
