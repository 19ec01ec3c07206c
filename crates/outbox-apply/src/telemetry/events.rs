//! Every log event name of the applier (`outbox-relay apply`), in one place; the relay's are in
//! `outbox_relay::telemetry::events`, which says what a name is and why it is stable. A log
//! line of the applier starts its message with one of these, alone or before a colon and a
//! sentence; the relay's events test reads this crate's sources and checks every line against
//! this list.

/// The applier joined its consumer group and waits for partitions.
pub const APPLY_STARTED: &str = "apply_started";
/// The applier stopped on an error (the message says what to do; the exit code says which kind).
pub const APPLY_FAILED: &str = "apply_failed";
/// The applier stopped as asked (its open transactions finished or rolled back).
pub const APPLY_STOPPED: &str = "apply_stopped";
/// `apply setup` created or checked the tables and prepared every handler.
pub const APPLY_SETUP_DONE: &str = "apply_setup_done";
/// Partitions assigned to this instance, at their stored positions.
pub const APPLY_PARTITIONS_ASSIGNED: &str = "apply_partitions_assigned";
/// Partitions taken away (a rebalance or the stop); their tasks finished.
pub const APPLY_PARTITIONS_REVOKED: &str = "apply_partitions_revoked";
/// The Kafka consumer reported an error (it reconnects by itself).
pub const APPLY_KAFKA_ERROR: &str = "apply_kafka_error";
/// The brokers cannot be reached: once when they go, then a reminder every minute.
pub const APPLY_KAFKA_UNREACHABLE: &str = "apply_kafka_unreachable";
/// The brokers are reachable again after an outage (its length and the errors it counted).
pub const APPLY_KAFKA_REACHABLE: &str = "apply_kafka_reachable";
/// A stored position is below the log start or beyond its end: the partition is not applied.
pub const APPLY_POSITION_OUT_OF_LOG: &str = "apply_position_out_of_log";
/// A partition stopped on a record it cannot apply (`apply.on_failure = "halt"`).
pub const APPLY_PARTITION_HALTED: &str = "apply_partition_halted";
/// A record went to the dead-letter table (`apply.on_failure = "dead-letter"`).
pub const APPLY_RECORD_DEAD_LETTERED: &str = "apply_record_dead_lettered";
/// A transaction rolled back on a transient error; the same records are retried.
pub const APPLY_TRANSACTION_RETRY: &str = "apply_transaction_retry";
/// A transaction rolled back by a deadlock or serialization failure with another transaction;
/// retried at once, with fewer records.
pub const APPLY_TRANSACTION_CONFLICT: &str = "apply_transaction_conflict";
/// After a conflict, the applier's transactions of more than one record run one at a time.
pub const APPLY_TAKING_TURNS: &str = "apply_taking_turns";
/// The inbox cleanup ran (rows deleted, the retention in force).
pub const APPLY_INBOX_CLEANED: &str = "apply_inbox_cleaned";
/// The inbox retention is refused by the rule (or could not be checked): no cleanup.
pub const APPLY_INBOX_RETENTION_REFUSED: &str = "apply_inbox_retention_refused";
/// The consumer's database cannot be reached; retrying with backoff. Said when it goes and
/// every minute while it stays away, not at every retry.
pub const APPLY_DATABASE_UNREACHABLE: &str = "apply_database_unreachable";
/// The consumer's database is reachable again after an outage.
pub const APPLY_DATABASE_REACHABLE: &str = "apply_database_reachable";

/// Every event name of the applier.
pub const ALL: &[&str] = &[
    APPLY_STARTED,
    APPLY_FAILED,
    APPLY_STOPPED,
    APPLY_SETUP_DONE,
    APPLY_PARTITIONS_ASSIGNED,
    APPLY_PARTITIONS_REVOKED,
    APPLY_KAFKA_ERROR,
    APPLY_KAFKA_UNREACHABLE,
    APPLY_KAFKA_REACHABLE,
    APPLY_POSITION_OUT_OF_LOG,
    APPLY_PARTITION_HALTED,
    APPLY_RECORD_DEAD_LETTERED,
    APPLY_TRANSACTION_RETRY,
    APPLY_TRANSACTION_CONFLICT,
    APPLY_TAKING_TURNS,
    APPLY_INBOX_CLEANED,
    APPLY_INBOX_RETENTION_REFUSED,
    APPLY_DATABASE_UNREACHABLE,
    APPLY_DATABASE_REACHABLE,
];
