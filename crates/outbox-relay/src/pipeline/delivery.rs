//! Delivery reports, received and attributed in one place ([`super::reports::Reports`]) and
//! handled in one ([`Pipeline::on_report`]): an acknowledgement advances the tracker; a failure freezes it
//! and, under the dead-letter policy, marks a record Kafka refused for good as a suspect to be
//! sent alone after the restart.

use std::time::Duration;

use super::state::{Pipeline, now_unix_us};
use crate::{
    config::PoisonPolicy,
    error::{Definite, RefusedChange, RelayError, Transient},
    postgres::session::Session,
    sink::{Delivered, Sink},
    telemetry::metrics as m,
};

/// How long a stopping pipeline waits for the reports that may explain why (a purged
/// transaction's refused record, the record behind a fatal producer error).
const OWED_REPORTS_WAIT: Duration = Duration::from_secs(2);

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// One delivery report. With transactions a failed transaction purges every record it
    /// held: their reports all say "purged", and the one that explains the failure (a record of
    /// the topic the coordinator refused) may come later. It is looked for among the rest
    /// before the pipeline stops, so that the poison policy acts on the record at fault.
    pub(super) async fn on_report(&mut self, d: Delivered) -> Result<(), RelayError> {
        if !(self.transactional && d.is_purged()) {
            return self.on_delivery(d);
        }
        let consequence = self.on_delivery(d);
        let deadline = tokio::time::Instant::now() + OWED_REPORTS_WAIT;
        while let Some(d) = self.next_owed(deadline).await {
            if !d.is_purged() {
                self.on_delivery(d)?;
            }
        }
        consequence
    }

    /// The next report librdkafka still owes (a record handed over and not reported yet), if
    /// it comes before `deadline`.
    async fn next_owed(&mut self, deadline: tokio::time::Instant) -> Option<Delivered> {
        if self.sink.in_flight() == 0 && self.reports.is_empty() {
            return None;
        }
        tokio::time::timeout_at(deadline, self.reports.next(self.sink))
            .await
            .ok()
            .flatten()
    }

    /// librdkafka raised `fatal` (under `enable.gapless.guarantee`, a refused batch does):
    /// the reports it still owes are handled first, for up to 2 s, so that a record the
    /// broker refused stops the relay with that record named and the poison policy applied,
    /// as when its report comes before the loop's tick, rather than as a producer failure
    /// that a restart would only run into again. The first report that fails wins.
    pub(super) async fn after_fatal(&mut self, fatal: RelayError) -> RelayError {
        let deadline = tokio::time::Instant::now() + OWED_REPORTS_WAIT;
        while let Some(d) = self.next_owed(deadline).await {
            if let Err(e) = self.on_report(d).await {
                return e;
            }
        }
        fatal
    }

    /// Every report that is ready now.
    pub(super) async fn on_reports_ready(&mut self) -> Result<(), RelayError> {
        while let Some(d) = self.reports.ready(self.sink) {
            self.on_report(d).await?;
        }
        Ok(())
    }

    /// Waits for the next report and handles it.
    pub(super) async fn on_next_report(&mut self) -> Result<(), RelayError> {
        let d = self
            .reports
            .next(self.sink)
            .await
            .ok_or_else(producer_gone)?;
        self.on_report(d).await
    }

    pub(super) fn on_delivery(&mut self, d: Delivered) -> Result<(), RelayError> {
        self.head_reported(&d);
        match d.outcome {
            Ok(()) => {
                self.progress.ack(d.origin.tx, d.bytes)?;
                let lag_us = now_unix_us() - d.origin.commit_time_unix_us;
                self.acks.acked(&d.topic, d.bytes, lag_us);
                Ok(())
            }
            Err(e) => {
                self.progress.fail();
                metrics::counter!(m::DELIVERY_ERRORS).increment(1);
                let err = e.error(&d.topic);
                let relay = &self.cfg.relay;
                if relay.on_poison == PoisonPolicy::DeadLetter
                    && e.is_refused()
                    && *d.topic != *relay.dead_letter_topic
                {
                    // Restart from the confirmed LSN. The broker refuses whole batches, so this
                    // event is only a suspect: when it comes round again it is sent alone, and
                    // dead-lettered in its place only if refused again.
                    let reason = e.to_string();
                    self.carry
                        .refusals
                        .suspect(d.origin.commit_lsn, d.origin.seq, reason.clone());
                    return Err(RelayError::from(Transient::DeadLetterPending {
                        commit_lsn: d.origin.commit_lsn,
                        seq: d.origin.seq,
                        reason,
                    }));
                }
                // The report carries the change's position; its source is known here only when
                // the relay publishes one table or prefix (nothing is kept per record for it).
                Err(err.refusing(RefusedChange {
                    routed: self.only_source.clone(),
                    commit_lsn: d.origin.commit_lsn,
                    seq: d.origin.seq,
                    in_batch: true,
                }))
            }
        }
    }
}

pub(super) fn producer_gone() -> RelayError {
    RelayError::from(Definite::kafka_setup(
        "the producer's delivery reports stopped",
    ))
}
