//! Delivery reports, read in one place: an acknowledgement advances the tracker; a failure
//! freezes it and, under the dead-letter policy, marks a record Kafka refused for good as a
//! suspect to be sent alone after the restart.

use std::time::Duration;

use tokio::sync::mpsc;

use super::state::{State, now_unix_us};
use crate::{
    config::PoisonPolicy,
    error::{Definite, RefusedChange, RelayError, Transient},
    metrics as m,
    sink::{Delivered, Sink, delivery_error},
};

/// One delivery report. With transactions a failed transaction purges every record it held:
/// their reports all say "purged", and the one that explains the failure (a record of the topic
/// the coordinator refused) may come later. It is looked for among the rest before the
/// pipeline stops, so that the poison policy acts on the record at fault.
pub(super) async fn delivered(
    sink: &impl Sink,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    d: Delivered,
) -> Result<(), RelayError> {
    let d = sink.attribute(d);
    if !(st.transactional && d.is_purged()) {
        return on_delivery(st, d);
    }
    let consequence = on_delivery(st, d);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while sink.in_flight() > 0 || !reports.is_empty() {
        match tokio::time::timeout_at(deadline, reports.recv()).await {
            Ok(Some(d)) => {
                let d = sink.attribute(d);
                if !d.is_purged() {
                    on_delivery(st, d)?;
                }
            }
            _ => break,
        }
    }
    consequence
}

pub(super) fn on_delivery(st: &mut State<'_>, d: Delivered) -> Result<(), RelayError> {
    match d.outcome {
        Ok(()) => {
            st.progress.ack(d.origin.tx, d.bytes)?;
            let lag_us = now_unix_us() - d.origin.commit_time_unix_us;
            st.acks.acked(&d.topic, d.bytes, lag_us);
            Ok(())
        }
        Err(e) => {
            st.progress.fail();
            metrics::counter!(m::DELIVERY_ERRORS).increment(1);
            let err = delivery_error(&e, &d.topic);
            if st.policy == PoisonPolicy::DeadLetter
                && matches!(err, RelayError::Definite(Definite::DeliveryRefused { .. }))
                && *d.topic != *st.dead_letter_topic
            {
                // Restart from the confirmed LSN. The broker refuses whole batches, so this
                // event is only a suspect: when it comes round again it is sent alone, and
                // dead-lettered in its place only if refused again.
                let reason = e.to_string();
                st.refusals
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
                routed: st.only_source.clone(),
                commit_lsn: d.origin.commit_lsn,
                seq: d.origin.seq,
                in_batch: true,
            }))
        }
    }
}

pub(super) fn producer_gone() -> RelayError {
    RelayError::from(Definite::kafka_setup(
        "the producer's delivery reports stopped",
    ))
}
