//! Every metric and its help text, in one place. Prometheus conventions: `outbox_relay_`
//! prefix, base units in the name, counters end in `_total`, bounded label values.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

pub const EVENTS_PRODUCED: &str = "outbox_relay_events_produced_total";
pub const BYTES_PRODUCED: &str = "outbox_relay_produced_bytes_total";
pub const DELIVERY_ERRORS: &str = "outbox_relay_delivery_errors_total";
pub const INFLIGHT_EVENTS: &str = "outbox_relay_inflight_events";
pub const INFLIGHT_TRANSACTIONS: &str = "outbox_relay_inflight_transactions";
pub const RECEIVED_LSN: &str = "outbox_relay_received_lsn";
pub const CONFIRMED_LSN: &str = "outbox_relay_confirmed_lsn";
pub const COMMIT_TO_ACK_SECONDS: &str = "outbox_relay_commit_to_ack_seconds";
pub const TIME_LAG_SECONDS: &str = "outbox_relay_time_lag_seconds";
pub const RESTARTS: &str = "outbox_relay_restarts_total";
pub const STREAMING: &str = "outbox_relay_streaming";

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
    describe_counter!(
        DELIVERY_ERRORS,
        "Records Kafka refused or failed to acknowledge."
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
        "Now minus the commit time of the oldest unconfirmed transaction; 0 when caught up."
    );
    describe_counter!(
        RESTARTS,
        "Pipeline restarts after a transient failure, by reason."
    );
    describe_gauge!(STREAMING, "1 while the replication stream is open, else 0.");
}
