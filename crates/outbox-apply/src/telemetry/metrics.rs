//! Every metric of the applier (`outbox-relay apply`) and its help text, in one place, and the
//! recorder it installs. Prometheus conventions as the relay's (`outbox_relay::telemetry::
//! metrics`): `outbox_relay_apply_` prefix, base units in the name, counters end in `_total`,
//! bounded label values.
//!
//! Invariant: every name the applier records is listed in [`ALL`]; the relay's metrics tests
//! check docs/operations.md and deploy/ against its names and these.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

pub const APPLY_RECORDS: &str = "outbox_relay_apply_records_total";
pub const APPLY_TRANSACTIONS: &str = "outbox_relay_apply_transactions_total";
pub const APPLY_HANDLER_SECONDS: &str = "outbox_relay_apply_handler_seconds";
pub const APPLY_LAG_RECORDS: &str = "outbox_relay_apply_lag_records";
pub const APPLY_PARTITION_HALTED: &str = "outbox_relay_apply_partition_halted";
pub const APPLY_TAKING_TURNS: &str = "outbox_relay_apply_taking_turns";
pub const APPLY_INBOX_DELETED: &str = "outbox_relay_apply_inbox_deleted_total";
pub const APPLY_INBOX_RETENTION_SECONDS: &str = "outbox_relay_apply_inbox_retention_seconds";
pub const APPLY_INBOX_RETENTION_REFUSED: &str = "outbox_relay_apply_inbox_retention_refused";

/// Every metric name of the applier, for the checks of docs, alert rules and dashboard.
pub const ALL: &[&str] = &[
    APPLY_RECORDS,
    APPLY_TRANSACTIONS,
    APPLY_HANDLER_SECONDS,
    APPLY_LAG_RECORDS,
    APPLY_PARTITION_HALTED,
    APPLY_TAKING_TURNS,
    APPLY_INBOX_DELETED,
    APPLY_INBOX_RETENTION_SECONDS,
    APPLY_INBOX_RETENTION_REFUSED,
];

/// `result` label values of [`APPLY_RECORDS`].
pub const APPLY_RECORD_RESULTS: &[&str] = &["applied", "duplicate", "ignored", "dead_lettered"];

/// Histogram buckets of [`APPLY_HANDLER_SECONDS`], in seconds.
const HANDLER_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets_for_metric(Matcher::Full(APPLY_HANDLER_SECONDS.into()), HANDLER_BUCKETS)
}

/// Installs the applier's global Prometheus recorder (no listener: `outbox_service::http`
/// serves it), describes its metrics and zeroes its known series. Only the applier's series
/// are zeroed, so its scrape does not show the relay's (a relay's `outbox_relay_streaming 0`
/// there would mislead).
pub fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = builder()?.install_recorder()?;
    describe();
    for result in ["committed", "retried", "conflicted"] {
        metrics::counter!(APPLY_TRANSACTIONS, "result" => result).increment(0);
    }
    metrics::counter!(APPLY_INBOX_DELETED).increment(0);
    metrics::gauge!(APPLY_TAKING_TURNS).set(0.0);
    metrics::gauge!(APPLY_INBOX_RETENTION_SECONDS).set(0.0);
    metrics::gauge!(APPLY_INBOX_RETENTION_REFUSED).set(0.0);
    Ok(handle)
}

/// Registers the applier's help texts. Call once after installing a recorder.
fn describe() {
    describe_counter!(
        APPLY_RECORDS,
        "Applier: records by topic and result (applied, duplicate: absorbed by its claim, \
         ignored: apply.ignore_types, dead_lettered)."
    );
    describe_counter!(
        APPLY_TRANSACTIONS,
        "Applier: database transactions by result (committed; retried after a transient error; \
         conflicted: rolled back by a deadlock or serialization failure, retried at once)."
    );
    describe_gauge!(
        APPLY_TAKING_TURNS,
        "Applier: 1 while its transactions of more than one record run one at a time (after a \
         deadlock or serialization failure between its transactions)."
    );
    describe_histogram!(
        APPLY_HANDLER_SECONDS,
        Unit::Seconds,
        "Applier: time of one handler statement, by event type."
    );
    describe_gauge!(
        APPLY_LAG_RECORDS,
        "Applier: records in the partition's log not applied yet (log end - next position)."
    );
    describe_counter!(
        APPLY_INBOX_DELETED,
        "Applier: inbox claims of this consumer deleted by the cleanup (retention)."
    );
    describe_gauge!(
        APPLY_INBOX_RETENTION_SECONDS,
        Unit::Seconds,
        "Applier: the inbox retention in force (0: claims are kept)."
    );
    describe_gauge!(
        APPLY_INBOX_RETENTION_REFUSED,
        "Applier: 1 while the configured inbox retention is shorter than a topic can replay \
         (the cleanup stopped)."
    );
    describe_gauge!(
        APPLY_PARTITION_HALTED,
        "Applier: 1 while the partition is halted (a record it cannot apply, or a position \
         outside the log)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names' form and rendering are checked with the relay's (its metrics tests); here,
    /// what only this recorder does: the handler histogram's buckets.
    #[test]
    fn the_handler_histogram_has_its_buckets() {
        assert!(ALL.iter().all(|n| n.starts_with("outbox_relay_apply_")));
        let recorder = builder().unwrap().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe();
            metrics::histogram!(APPLY_HANDLER_SECONDS).record(0.002);
        });
        let text = handle.render();
        assert!(text.contains(&format!("# TYPE {APPLY_HANDLER_SECONDS} histogram")));
        assert!(text.contains(&format!(
            "{APPLY_HANDLER_SECONDS}_bucket{{le=\"0.0025\"}} 1"
        )));
    }
}
