//! Graceful stop: read nothing more, wait (bounded by `relay.shutdown_timeout_ms`) for
//! in-flight acknowledgements, commit and confirm what Kafka holds.

use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::mpsc;

use super::{
    checkpoints::write_acknowledged,
    delivery::delivered,
    state::{State, confirm},
    txn::{commit, settle_running},
};
use crate::{
    config::Config,
    error::{RelayError, Transient},
    events::{SHUTDOWN_COMMIT_FAILED, SHUTDOWN_DRAINING, SHUTDOWN_TIMEOUT},
    sink::{Delivered, Sink},
    source::Session,
};

/// Graceful stop: read nothing more, wait (bounded) for in-flight acks, confirm, and make sure
/// the final status update left before closing.
pub(super) async fn drain(
    cfg: &Config,
    sink: &impl Sink,
    client: &mut impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    interval: Duration,
) -> Result<(), RelayError> {
    let deadline = Instant::now() + cfg.shutdown_timeout();
    tracing::info!(
        in_flight = st.progress.outstanding_records(),
        "{SHUTDOWN_DRAINING}"
    );
    while st.progress.outstanding_records() > 0 {
        tokio::select! {
            Some(d) = reports.recv() => delivered(sink, st, reports, d).await?,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(
                    in_flight = st.progress.outstanding_records(),
                    "{SHUTDOWN_TIMEOUT}: unacknowledged events stay unconfirmed and will be sent again"
                );
                break;
            }
        }
    }
    if st.progress.kafka_commit_pending() || st.progress.kafka_committing() {
        // Commit what was acknowledged, within the shutdown timeout; if that fails it stays
        // unconfirmed and is sent again. A commit still running is waited for first, the
        // last one too.
        let last = async {
            if st.progress.kafka_commit_pending() {
                commit(cfg, sink, client, st, reports).await?;
            }
            settle_running(sink, client, st, reports).await
        };
        let committed = tokio::time::timeout_at(deadline, last).await;
        if let Err(e) = committed
            .map_err(|_| RelayError::from(Transient::kafka_transaction("shutdown timeout")))
            .and_then(|r| r)
        {
            tracing::warn!(error = %e, "{SHUTDOWN_COMMIT_FAILED}: the last Kafka transaction's events stay unconfirmed and will be sent again");
        }
    }
    if !st.transactional && st.checkpoints.is_some() {
        // The acknowledged prefix, so that a PostgreSQL crash before the next start re-sends
        // nothing of it.
        write_acknowledged(cfg, sink, st).await;
        sink.reports_served(Duration::from_secs(2)).await;
    }
    confirm(client, st);
    let target = st.progress.confirmed().0;
    let wait_until = Instant::now() + interval * 2 + Duration::from_secs(1);
    while client.last_applied_lsn().0 < target && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
