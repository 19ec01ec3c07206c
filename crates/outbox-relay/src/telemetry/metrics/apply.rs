//! The applier's series (`outbox-relay apply`): their help texts, and the recorder it installs.
//! The names are in the parent module with every other one.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{BuildError, PrometheusHandle};

use super::*;

/// [`install`] for the applier (`outbox-relay apply`): only its own series are zeroed, so its
/// scrape does not show the relay's (a relay's `outbox_relay_streaming 0` there would mislead).
pub fn install_apply() -> Result<PrometheusHandle, BuildError> {
    let handle = builder()?.install_recorder()?;
    super::describe();
    for result in ["committed", "retried", "conflicted"] {
        metrics::counter!(APPLY_TRANSACTIONS, "result" => result).increment(0);
    }
    metrics::counter!(APPLY_INBOX_DELETED).increment(0);
    metrics::gauge!(APPLY_TAKING_TURNS).set(0.0);
    metrics::gauge!(APPLY_INBOX_RETENTION_SECONDS).set(0.0);
    metrics::gauge!(APPLY_INBOX_RETENTION_REFUSED).set(0.0);
    Ok(handle)
}

/// The applier's help texts (part of [`super::describe`]).
pub(super) fn describe() {
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
