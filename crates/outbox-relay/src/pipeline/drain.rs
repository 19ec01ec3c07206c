//! Graceful stop: read nothing more, wait (bounded by `relay.shutdown_timeout_ms`) for
//! in-flight acknowledgements, commit and confirm what Kafka holds.

use std::time::Duration;

use tokio::time::Instant;

use super::state::Pipeline;
use crate::{
    error::{RelayError, Transient},
    postgres::session::Session,
    sink::Sink,
    telemetry::events::{SHUTDOWN_COMMIT_FAILED, SHUTDOWN_DRAINING, SHUTDOWN_TIMEOUT},
};

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// Graceful stop: read nothing more, wait (bounded) for in-flight acks, confirm, and make
    /// sure the final status update (sent every `interval`) left before closing.
    pub(super) async fn drain(&mut self, interval: Duration) -> Result<(), RelayError> {
        let deadline = Instant::now() + self.cfg.shutdown_timeout();
        tracing::info!(
            in_flight = self.progress.outstanding_records(),
            "{SHUTDOWN_DRAINING}"
        );
        while self.progress.outstanding_records() > 0 {
            // Biased, like every select of the pipeline: a report and the deadline ready at
            // once take the report, and the simulation replays from its seed alone.
            tokio::select! {
                biased;
                Some(d) = self.reports.next(self.sink) => self.on_report(d).await?,
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(
                        in_flight = self.progress.outstanding_records(),
                        "{SHUTDOWN_TIMEOUT}: unacknowledged events stay unconfirmed and will be sent again"
                    );
                    break;
                }
            }
        }
        if self.progress.kafka_commit_pending() || self.progress.kafka_committing() {
            // Commit what was acknowledged, within the shutdown timeout; if that fails it stays
            // unconfirmed and is sent again. A commit still running is waited for first, the
            // last one too.
            let last = async {
                if self.progress.kafka_commit_pending() {
                    self.commit().await?;
                }
                self.settle_running().await
            };
            let committed = tokio::time::timeout_at(deadline, last).await;
            if let Err(e) = committed
                .map_err(|_| RelayError::from(Transient::kafka_transaction("shutdown timeout")))
                .and_then(|r| r)
            {
                tracing::warn!(error = %e, "{SHUTDOWN_COMMIT_FAILED}: the last Kafka transaction's events stay unconfirmed and will be sent again");
            }
        }
        if !self.transactional && self.ledger.writes_checkpoints() {
            // The acknowledged prefix, so that a PostgreSQL crash before the next start re-sends
            // nothing of it.
            self.write_acknowledged().await;
            self.sink.reports_served(Duration::from_secs(2)).await;
        }
        self.confirm();
        // The session sends a status update once per `interval`: wait for the one that carries
        // the last confirmation. Nothing confirmed on this connection, nothing to wait for (the
        // slot already holds where it started; waiting there took 2 intervals + 1 s per stop).
        let Some(target) = self.told else {
            return Ok(());
        };
        let wait_until = Instant::now() + interval * 2 + Duration::from_secs(1);
        while self.client.last_applied_lsn() < target && Instant::now() < wait_until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}
