//! Every metric of the relay and its help text, in one place (the applier's are in
//! `outbox_apply::telemetry::metrics`). Prometheus conventions: `outbox_relay_` prefix, base units in the
//! name, counters end in `_total`, bounded label values.
//!
//! Invariant: every name used anywhere (code, docs/operations.md, deploy/prometheus/alerts.yml,
//! deploy/grafana/outbox-relay.json) is listed in [`ALL`] or the applier's `ALL`; the tests
//! below check the files against both.
//! [`init`] gives every series whose label values are known a zero value at start, so a scrape
//! shows them before the first event (Prometheus cannot alert on a series that does not exist).

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

// The pipeline (replication stream → Kafka).
pub const EVENTS_PRODUCED: &str = "outbox_relay_events_produced_total";
pub const BYTES_PRODUCED: &str = "outbox_relay_produced_bytes_total";
pub const DELIVERY_ERRORS: &str = "outbox_relay_delivery_errors_total";
pub const DEAD_LETTERED: &str = "outbox_relay_dead_lettered_total";
pub const KAFKA_TRANSACTIONS: &str = "outbox_relay_kafka_transactions_total";
pub const CHECKPOINTS_WRITTEN: &str = "outbox_relay_checkpoints_written_total";
pub const CHECKPOINT_COMMIT_SECONDS: &str = "outbox_relay_checkpoint_commit_seconds";
pub const SKIPPED_CHANGES: &str = "outbox_relay_skipped_changes_total";
pub const LOGICAL_MESSAGES_IGNORED: &str = "outbox_relay_logical_messages_ignored_total";
pub const OUTBOX_CHANGES_IGNORED: &str = "outbox_relay_outbox_changes_ignored_total";
pub const OUTBOX_TABLES: &str = "outbox_relay_outbox_tables";
pub const MESSAGE_PREFIXES: &str = "outbox_relay_message_prefixes";
pub const INFLIGHT_EVENTS: &str = "outbox_relay_inflight_events";
pub const INFLIGHT_TRANSACTIONS: &str = "outbox_relay_inflight_transactions";
pub const INFLIGHT_BYTES: &str = "outbox_relay_inflight_bytes";
pub const LAST_CONFIRMATION: &str = "outbox_relay_last_confirmation_timestamp_seconds";
pub const RECEIVED_LSN: &str = "outbox_relay_received_lsn";
pub const CONFIRMED_LSN: &str = "outbox_relay_confirmed_lsn";
pub const COMMIT_TO_ACK_SECONDS: &str = "outbox_relay_commit_to_ack_seconds";
pub const TIME_LAG_SECONDS: &str = "outbox_relay_time_lag_seconds";
pub const RESTARTS: &str = "outbox_relay_restarts_total";
pub const STREAMING: &str = "outbox_relay_streaming";
pub const READY: &str = "outbox_relay_ready";
pub const SOURCE_STOPPED: &str = "outbox_relay_source_stopped";

// The slot monitor (its own SQL connection; see monitor.rs).
pub const MONITOR_UP: &str = "outbox_relay_slot_monitor_up";
pub const MONITOR_ERRORS: &str = "outbox_relay_slot_monitor_errors_total";
pub const SLOT_PRESENT: &str = "outbox_relay_slot_present";
pub const SLOT_ACTIVE: &str = "outbox_relay_slot_active";
pub const SERVER_WAL_LSN: &str = "outbox_relay_server_wal_lsn";
pub const SLOT_CONFIRMED_FLUSH_LSN: &str = "outbox_relay_slot_confirmed_flush_lsn";
pub const SLOT_LAG_BYTES: &str = "outbox_relay_slot_lag_bytes";
pub const SLOT_RETAINED_WAL_BYTES: &str = "outbox_relay_slot_retained_wal_bytes";
pub const SLOT_LAG_SECONDS: &str = "outbox_relay_slot_lag_seconds";
pub const SLOT_WAL_STATUS: &str = "outbox_relay_slot_wal_status";
pub const SLOT_INVALIDATED: &str = "outbox_relay_slot_invalidated";
pub const SLOT_INACTIVE_SINCE: &str = "outbox_relay_slot_inactive_since_timestamp_seconds";
pub const SLOT_SAFE_WAL_SIZE_BYTES: &str = "outbox_relay_slot_safe_wal_size_bytes";
pub const MAX_SLOT_WAL_KEEP_SIZE_BYTES: &str = "outbox_relay_server_max_slot_wal_keep_size_bytes";
pub const SLOT_SPILLED_TRANSACTIONS: &str = "outbox_relay_slot_spilled_transactions_total";
pub const SLOT_SPILL_WRITES: &str = "outbox_relay_slot_spill_writes_total";
pub const SLOT_SPILLED_BYTES: &str = "outbox_relay_slot_spilled_bytes_total";
pub const SLOT_DECODED_TRANSACTIONS: &str = "outbox_relay_slot_decoded_transactions_total";
pub const SLOT_DECODED_BYTES: &str = "outbox_relay_slot_decoded_bytes_total";
pub const SLOT_LOSS_FORECAST_SECONDS: &str = "outbox_relay_slot_loss_forecast_seconds";

// Outbox table health (the monitor, every monitor.outbox_stats_interval_ms; outbox_health.rs).
pub const OUTBOX_PARTITIONS: &str = "outbox_relay_outbox_partitions";
pub const OUTBOX_LIVE_TUPLES: &str = "outbox_relay_outbox_live_tuples";
pub const OUTBOX_DEAD_TUPLES: &str = "outbox_relay_outbox_dead_tuples";
pub const OUTBOX_SIZE_BYTES: &str = "outbox_relay_outbox_size_bytes";
pub const OUTBOX_LAST_AUTOVACUUM: &str = "outbox_relay_outbox_last_autovacuum_timestamp_seconds";
pub const OUTBOX_LAST_AUTOANALYZE: &str = "outbox_relay_outbox_last_autoanalyze_timestamp_seconds";
pub const OUTBOX_OLDEST_ROW_AGE: &str = "outbox_relay_outbox_oldest_row_age_seconds";

// Alerts, notifications, heartbeat.
pub const ALERT_LEVEL: &str = "outbox_relay_alert_level";
pub const ALERTS_FIRED: &str = "outbox_relay_alerts_fired_total";
pub const WEBHOOK_NOTIFICATIONS: &str = "outbox_relay_webhook_notifications_total";
pub const HEARTBEATS: &str = "outbox_relay_heartbeats_total";
pub const HEARTBEAT_AGE_SECONDS: &str = "outbox_relay_heartbeat_age_seconds";

/// Every metric name, for the checks of docs, alert rules and dashboard.
pub const ALL: &[&str] = &[
    EVENTS_PRODUCED,
    BYTES_PRODUCED,
    DELIVERY_ERRORS,
    DEAD_LETTERED,
    KAFKA_TRANSACTIONS,
    CHECKPOINTS_WRITTEN,
    CHECKPOINT_COMMIT_SECONDS,
    SKIPPED_CHANGES,
    LOGICAL_MESSAGES_IGNORED,
    OUTBOX_CHANGES_IGNORED,
    OUTBOX_TABLES,
    MESSAGE_PREFIXES,
    INFLIGHT_EVENTS,
    INFLIGHT_TRANSACTIONS,
    INFLIGHT_BYTES,
    LAST_CONFIRMATION,
    RECEIVED_LSN,
    CONFIRMED_LSN,
    COMMIT_TO_ACK_SECONDS,
    TIME_LAG_SECONDS,
    RESTARTS,
    STREAMING,
    READY,
    SOURCE_STOPPED,
    MONITOR_UP,
    MONITOR_ERRORS,
    SLOT_PRESENT,
    SLOT_ACTIVE,
    SERVER_WAL_LSN,
    SLOT_CONFIRMED_FLUSH_LSN,
    SLOT_LAG_BYTES,
    SLOT_RETAINED_WAL_BYTES,
    SLOT_LAG_SECONDS,
    SLOT_WAL_STATUS,
    SLOT_INVALIDATED,
    SLOT_INACTIVE_SINCE,
    SLOT_SAFE_WAL_SIZE_BYTES,
    MAX_SLOT_WAL_KEEP_SIZE_BYTES,
    SLOT_SPILLED_TRANSACTIONS,
    SLOT_SPILL_WRITES,
    SLOT_SPILLED_BYTES,
    SLOT_DECODED_TRANSACTIONS,
    SLOT_DECODED_BYTES,
    SLOT_LOSS_FORECAST_SECONDS,
    OUTBOX_PARTITIONS,
    OUTBOX_LIVE_TUPLES,
    OUTBOX_DEAD_TUPLES,
    OUTBOX_SIZE_BYTES,
    OUTBOX_LAST_AUTOVACUUM,
    OUTBOX_LAST_AUTOANALYZE,
    OUTBOX_OLDEST_ROW_AGE,
    ALERT_LEVEL,
    ALERTS_FIRED,
    WEBHOOK_NOTIFICATIONS,
    HEARTBEATS,
    HEARTBEAT_AGE_SECONDS,
];

/// `op` label values of [`OUTBOX_CHANGES_IGNORED`].
pub const OUTBOX_CHANGE_OPS: &[&str] = &["update", "delete"];

/// `reason` label values of [`RESTARTS`]: the transient errors of `RelayError::reason`.
pub const RESTART_REASONS: &[&str] = &[
    "postgres_unreachable",
    "postgres_query",
    "slot_busy",
    "replication_stream",
    "kafka_unreachable",
    "kafka_delivery",
    "dead_letter_pending",
    "producer_fenced",
    "kafka_transaction",
    "checkpoint_read",
    "checkpoint_contradicted",
    "stalled",
];

/// `result` label values of [`KAFKA_TRANSACTIONS`].
pub const TRANSACTION_RESULTS: &[&str] = &["committed", "failed"];

/// `result` label values of [`CHECKPOINTS_WRITTEN`]: `written` (committed with its Kafka
/// transaction; without transactions, handed to the producer), `failed`.
pub const CHECKPOINT_RESULTS: &[&str] = &["written", "failed"];

/// `status` label values of [`SLOT_WAL_STATUS`] (PostgreSQL's `wal_status`).
pub const WAL_STATUSES: &[&str] = &["reserved", "extended", "unreserved", "lost"];

/// `reason` label values of [`SLOT_INVALIDATED`]: PostgreSQL's `invalidation_reason`, and
/// `unknown_on_standby` for a PostgreSQL 16 standby, which does not say (relay_core::invalidation).
pub const INVALIDATION_REASONS: &[&str] = &[
    "wal_removed",
    "idle_timeout",
    "rows_removed",
    "wal_level_insufficient",
    "unknown_on_standby",
];

/// Histogram buckets of [`COMMIT_TO_ACK_SECONDS`], in seconds.
const ACK_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Installs the global Prometheus recorder (no listener: `http.rs` serves it), describes every
/// metric and zeroes the known series. Call once, before any task records anything.
/// `alerts`: the label values of the alert series ([`AlertLabels`]).
pub fn install(alerts: AlertLabels) -> Result<PrometheusHandle, BuildError> {
    let handle = builder()?.install_recorder()?;
    describe();
    init(alerts);
    Ok(handle)
}

pub(crate) fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets_for_metric(Matcher::Full(COMMIT_TO_ACK_SECONDS.into()), ACK_BUCKETS)
}

/// The label values of [`ALERT_LEVEL`] and [`ALERTS_FIRED`]: the alert kinds and severities,
/// which the alert module defines (this module names metrics and imports nothing of the crate).
#[derive(Debug, Clone, Copy)]
pub struct AlertLabels {
    pub kinds: &'static [&'static str],
    pub severities: &'static [&'static str],
}

/// Gives every series with known labels a value, so it is scraped before it first changes.
pub fn init(alerts: AlertLabels) {
    // Produced events and bytes are labelled by topic: their series appear with the first event.
    for c in [
        DELIVERY_ERRORS,
        DEAD_LETTERED,
        MONITOR_ERRORS,
        SKIPPED_CHANGES,
        LOGICAL_MESSAGES_IGNORED,
    ] {
        metrics::counter!(c).increment(0);
    }
    for g in [
        INFLIGHT_EVENTS,
        INFLIGHT_TRANSACTIONS,
        INFLIGHT_BYTES,
        LAST_CONFIRMATION,
        STREAMING,
        READY,
        MONITOR_UP,
        TIME_LAG_SECONDS,
    ] {
        metrics::gauge!(g).set(0.0);
    }
    for r in RESTART_REASONS {
        metrics::counter!(RESTARTS, "reason" => *r).increment(0);
    }
    for r in TRANSACTION_RESULTS {
        metrics::counter!(KAFKA_TRANSACTIONS, "result" => *r).increment(0);
    }
    for r in CHECKPOINT_RESULTS {
        metrics::counter!(CHECKPOINTS_WRITTEN, "result" => *r).increment(0);
    }
    for op in OUTBOX_CHANGE_OPS {
        metrics::counter!(OUTBOX_CHANGES_IGNORED, "op" => *op).increment(0);
    }
    for alert in alerts.kinds {
        metrics::gauge!(ALERT_LEVEL, "alert" => *alert).set(0.0);
        for severity in alerts.severities {
            metrics::counter!(ALERTS_FIRED, "alert" => *alert, "severity" => *severity)
                .increment(0);
        }
    }
    for result in ["ok", "error"] {
        metrics::counter!(WEBHOOK_NOTIFICATIONS, "result" => result).increment(0);
        metrics::counter!(HEARTBEATS, "result" => result).increment(0);
    }
}

/// Registers help text for every metric. Call once after installing a recorder.
pub fn describe() {
    describe_counter!(
        EVENTS_PRODUCED,
        "Outbox events acknowledged by Kafka, per topic."
    );
    describe_counter!(
        BYTES_PRODUCED,
        Unit::Bytes,
        "Key and value bytes acknowledged by Kafka, per topic."
    );
    describe_gauge!(
        SOURCE_STOPPED,
        "1 while a source of a multi-source relay is stopped on a definite error (the others go on)."
    );
    describe_counter!(
        DELIVERY_ERRORS,
        "Records Kafka refused or failed to acknowledge."
    );
    describe_counter!(
        DEAD_LETTERED,
        "Events published to the dead-letter topic instead of their own (on_poison = dead-letter)."
    );
    describe_counter!(
        KAFKA_TRANSACTIONS,
        "Kafka transactions ended with kafka.transactional_id set, by result (committed, failed)."
    );
    describe_counter!(
        CHECKPOINTS_WRITTEN,
        "Checkpoints written to kafka.checkpoint_topic, by result (written, failed)."
    );
    describe_histogram!(
        CHECKPOINT_COMMIT_SECONDS,
        Unit::Seconds,
        "Time to write a checkpoint and commit the Kafka transaction it ends."
    );
    describe_counter!(
        OUTBOX_CHANGES_IGNORED,
        "UPDATEs and DELETEs of outbox rows read and not published (op: update, delete)."
    );
    describe_counter!(
        SKIPPED_CHANGES,
        "Changes skipped after a start because a checkpoint says Kafka holds them."
    );
    describe_gauge!(
        INFLIGHT_EVENTS,
        "Records handed to Kafka and not yet acknowledged."
    );
    describe_gauge!(
        INFLIGHT_TRANSACTIONS,
        "Source transactions received and not yet confirmed."
    );
    describe_gauge!(
        INFLIGHT_BYTES,
        Unit::Bytes,
        "Payload bytes handed to Kafka and not yet acknowledged."
    );
    describe_gauge!(
        LAST_CONFIRMATION,
        Unit::Seconds,
        "When the relay last confirmed a position to the slot (Unix time); 0 before the first."
    );
    describe_gauge!(
        RECEIVED_LSN,
        "Highest WAL position received from PostgreSQL, as a number."
    );
    describe_gauge!(
        CONFIRMED_LSN,
        "WAL position last confirmed to PostgreSQL, as a number."
    );
    describe_histogram!(
        COMMIT_TO_ACK_SECONDS,
        Unit::Seconds,
        "Time from the source commit to Kafka's acknowledgement of the event."
    );
    describe_gauge!(
        TIME_LAG_SECONDS,
        Unit::Seconds,
        "Now minus the commit time of the oldest unconfirmed transaction; 0 when caught up \
         (measured by the stream, so it only moves while streaming)."
    );
    describe_counter!(
        RESTARTS,
        "Pipeline restarts (reconnects) after a transient failure, by reason."
    );
    describe_gauge!(STREAMING, "1 while the replication stream is open, else 0.");
    describe_gauge!(
        READY,
        "1 when /readyz answers 200: streaming and no critical alert."
    );
    describe_gauge!(
        MONITOR_UP,
        "1 when the slot monitor's last query succeeded, else 0."
    );
    describe_counter!(
        MONITOR_ERRORS,
        "Failed slot monitor connections or queries."
    );
    describe_gauge!(SLOT_PRESENT, "1 when the replication slot exists, else 0.");
    describe_gauge!(
        SLOT_ACTIVE,
        "1 when a connection streams from the slot (pg_replication_slots.active)."
    );
    describe_gauge!(
        SERVER_WAL_LSN,
        "pg_current_wal_lsn() (pg_last_wal_replay_lsn() on a standby), as a number."
    );
    describe_gauge!(
        SLOT_CONFIRMED_FLUSH_LSN,
        "The slot's confirmed_flush_lsn, as a number."
    );
    describe_gauge!(
        SLOT_LAG_BYTES,
        Unit::Bytes,
        "Relay lag: server WAL position minus the slot's confirmed_flush_lsn."
    );
    describe_gauge!(
        SLOT_RETAINED_WAL_BYTES,
        Unit::Bytes,
        "WAL the slot keeps on the server's disk: server WAL position minus restart_lsn."
    );
    describe_gauge!(
        SLOT_LAG_SECONDS,
        Unit::Seconds,
        "Age of the oldest WAL the slot has not confirmed, from the monitor's samples of the \
         server WAL position; 0 when caught up. Works while the stream is down."
    );
    describe_gauge!(
        SLOT_WAL_STATUS,
        "1 for the slot's current wal_status (reserved, extended, unreserved, lost), else 0."
    );
    describe_gauge!(
        SLOT_INVALIDATED,
        "1 for the reason the slot was invalidated (label reason: wal_removed, idle_timeout, \
         rows_removed, wal_level_insufficient, unknown_on_standby), else 0."
    );
    describe_gauge!(
        SLOT_INACTIVE_SINCE,
        Unit::Seconds,
        "Since when no connection has used the slot (inactive_since, PostgreSQL 17+), as a Unix \
         timestamp; -1 while it is in use or unknown. PostgreSQL 18's \
         idle_replication_slot_timeout counts from it."
    );
    describe_gauge!(
        SLOT_SAFE_WAL_SIZE_BYTES,
        Unit::Bytes,
        "WAL that can still be written before the slot is in danger of being lost \
         (safe_wal_size); -1 when unlimited or unknown."
    );
    describe_gauge!(
        MAX_SLOT_WAL_KEEP_SIZE_BYTES,
        Unit::Bytes,
        "The server's max_slot_wal_keep_size; -1 when unlimited."
    );
    describe_counter!(
        SLOT_SPILLED_TRANSACTIONS,
        "Transactions PostgreSQL spilled to disk while decoding for the slot \
         (pg_stat_replication_slots.spill_txns)."
    );
    describe_counter!(
        SLOT_SPILL_WRITES,
        "Times decoding for the slot spilled to disk (pg_stat_replication_slots.spill_count)."
    );
    describe_counter!(
        SLOT_SPILLED_BYTES,
        Unit::Bytes,
        "Bytes spilled to disk while decoding for the slot (spill_bytes)."
    );
    describe_counter!(
        SLOT_DECODED_TRANSACTIONS,
        "Transactions decoded for the slot (pg_stat_replication_slots.total_txns)."
    );
    describe_counter!(
        SLOT_DECODED_BYTES,
        Unit::Bytes,
        "Bytes decoded for the slot (pg_stat_replication_slots.total_bytes)."
    );
    describe_gauge!(
        SLOT_LOSS_FORECAST_SECONDS,
        Unit::Seconds,
        "Seconds until the slot's headroom (safe_wal_size, or the WAL left until \
         alerts.retained_wal_critical_bytes when max_slot_wal_keep_size is unlimited) is gone at \
         the rate it shrank over alerts.slot_forecast_window_secs; -1 while it does not shrink."
    );
    describe_gauge!(
        OUTBOX_PARTITIONS,
        "Leaf partitions of each outbox table (1 when it is not partitioned)."
    );
    describe_gauge!(
        OUTBOX_LIVE_TUPLES,
        "Live tuples of each outbox table, all partitions (pg_stat_user_tables.n_live_tup)."
    );
    describe_gauge!(
        OUTBOX_DEAD_TUPLES,
        "Dead tuples vacuum has not removed yet, per outbox table (n_dead_tup)."
    );
    describe_gauge!(
        OUTBOX_SIZE_BYTES,
        Unit::Bytes,
        "Total size of each outbox table with indexes and TOAST (pg_total_relation_size)."
    );
    describe_gauge!(
        OUTBOX_LAST_AUTOVACUUM,
        Unit::Seconds,
        "Unix time of the most recent autovacuum of any partition of each outbox table; 0 = never."
    );
    describe_gauge!(
        OUTBOX_LAST_AUTOANALYZE,
        Unit::Seconds,
        "Unix time of the most recent autoanalyze of each outbox table; 0 = never."
    );
    describe_gauge!(
        OUTBOX_OLDEST_ROW_AGE,
        Unit::Seconds,
        "Age of the oldest row by [[outbox]] created_at_column (where set); 0 when empty."
    );
    describe_gauge!(
        ALERT_LEVEL,
        "Current level of each built-in alert: 0 ok, 1 warning, 2 critical."
    );
    describe_counter!(
        ALERTS_FIRED,
        "Alerts that fired (or escalated), by alert and severity."
    );
    describe_counter!(
        WEBHOOK_NOTIFICATIONS,
        "Webhook notifications sent, by result (ok, error)."
    );
    describe_counter!(
        HEARTBEATS,
        "Heartbeat messages written with pg_logical_emit_message, by result (ok, error)."
    );
    describe_counter!(
        LOGICAL_MESSAGES_IGNORED,
        "Transactional or not, logical messages whose prefix no [[message]] section configures \
         (the heartbeat's own are not counted): read and not published."
    );
    describe_gauge!(
        OUTBOX_TABLES,
        "Configured [[outbox]] tables; 0 means a table-less outbox ([[message]] sections only)."
    );
    describe_gauge!(
        MESSAGE_PREFIXES,
        "Configured [[message]] prefixes (logical messages published like outbox rows)."
    );
    describe_gauge!(
        HEARTBEAT_AGE_SECONDS,
        Unit::Seconds,
        "Time since the newest heartbeat that the slot has confirmed was written (since start \
         until the first one is confirmed): end-to-end proof of progress."
    );
}

#[cfg(test)]
mod tests;
