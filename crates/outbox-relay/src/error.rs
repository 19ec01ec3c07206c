//! The relay's errors, split by what the operator (or the supervisor) should do.
//!
//! *Transient* errors restart the pipeline from the last confirmed LSN after a backoff: a network
//! drop, a broker that is down, a slot held by another instance. *Definite* errors stop the
//! process with a non-zero exit code: retrying cannot fix them (bad config, missing table,
//! invalidated slot, an event Kafka refuses). Every message says what to do.

use relay_core::{decode::DecodeError, watermark::FramingError};

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// A precondition in PostgreSQL is not met; the text is one actionable sentence.
    #[error("{0}")]
    Precondition(String),

    #[error("cannot reach PostgreSQL at {target}: {detail}")]
    PostgresUnreachable { target: String, detail: String },

    #[error("PostgreSQL query failed ({context}): {detail}")]
    Postgres {
        context: &'static str,
        detail: String,
    },

    #[error(
        "replication slot {slot:?} is in use by another connection ({detail}); another \
         outbox-relay instance is probably active: waiting to take over"
    )]
    SlotBusy { slot: String, detail: String },

    #[error("replication stream failed: {0}")]
    Replication(String),

    #[error("replication stream refused: {0}")]
    ReplicationDefinite(String),

    /// After a failover: the server at `target` does not have what this relay published.
    #[error(
        "refusing to stream from {target}: {divergence}. Find the events of the lost \
         transactions in Kafka (header outbox-relay.commit-lsn at or after the fork point) and \
         reconcile their consumers; then delete relay.state_file if set and restart \
         outbox-relay, which streams from the slot on this server (docs/operations.md, \
         \"Failover\")"
    )]
    HistoryDiverged {
        target: String,
        divergence: relay_core::timeline::Divergence,
    },

    #[error("cannot decode the replication stream: {0}")]
    Decode(#[from] DecodeError),

    /// A row of an outbox table that cannot become a Kafka record, under `on_poison = "halt"`.
    #[error(
        "{reason}. The relay stops here and confirms nothing from this event on (policy \
         relay.on_poison = \"halt\"); fix the cause, or set relay.on_poison = \"dead-letter\" \
         to record such rows in the dead-letter topic and go on"
    )]
    Poison { table: String, reason: String },

    /// Under `on_poison = "dead-letter"`: Kafka refused an event for good after it was sent;
    /// the pipeline restarts and sends it to the dead-letter topic in its place.
    #[error(
        "Kafka refused the event at commit LSN {commit_lsn}, position {seq} for good \
         ({reason}); restarting from the last confirmed LSN to send it to the dead-letter topic"
    )]
    DeadLetterPending {
        commit_lsn: relay_core::Lsn,
        seq: u64,
        reason: String,
    },

    #[error("the replication stream broke transaction framing: {0}")]
    Framing(#[from] FramingError),

    /// The pipeline waited for Kafka with the stream paused and let the replication connection
    /// go, so that PostgreSQL's checkpointer never waits for a blocked walsender.
    #[error(
        "released the replication connection after waiting {waited_ms} ms for Kafka to take \
         records{}; the slot keeps its position and the relay reconnects once Kafka answers",
        if *wal_at_risk { " (the slot's wal_status left reserved/extended)" } else { "" }
    )]
    BackpressureReleased { waited_ms: u64, wal_at_risk: bool },

    #[error("cannot reach Kafka at {brokers}: {detail}")]
    KafkaUnreachable { brokers: String, detail: String },

    #[error("cannot create the Kafka producer: {0}")]
    KafkaSetup(String),

    #[error(
        "Kafka did not accept an event for topic {topic:?} ({code}); nothing after it was \
         confirmed and the relay restarts from the last confirmed LSN"
    )]
    DeliveryTransient { topic: String, code: String },

    /// `kafka.transactional_id`: another instance acquired the slot and fenced this producer.
    #[error(
        "another outbox-relay instance with the same kafka.transactional_id took over ({0}): \
         it holds the slot now, so this instance writes nothing more to Kafka; its unfinished \
         Kafka transaction is aborted and nothing of it was confirmed. Waiting for the slot again"
    )]
    ProducerFenced(String),

    /// `kafka.transactional_id`: the brokers do not let the relay's principal use the id.
    #[error(
        "Kafka refused kafka.transactional_id {id:?} ({detail}): grant the relay's principal \
         WRITE and DESCRIBE on that transactional id (docs/security.md), or remove \
         kafka.transactional_id"
    )]
    KafkaTransactionRefused { id: String, detail: String },

    /// `kafka.transactional_id`: a Kafka transaction could not be started or committed.
    #[error(
        "a Kafka transaction failed ({0}); nothing of it was confirmed and the relay restarts \
         from the last confirmed LSN. If it repeats, check that the principal may WRITE and \
         DESCRIBE the transactional id and that the brokers' transaction state log is healthy"
    )]
    KafkaTransaction(String),

    #[error(
        "Kafka refused an event for topic {topic:?} for good ({code}): {hint}. Nothing after it \
         was confirmed; fix the cause and restart outbox-relay, the event will be sent again"
    )]
    DeliveryDefinite {
        topic: String,
        code: String,
        hint: &'static str,
    },
}

impl RelayError {
    /// True when restarting the pipeline after a backoff may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RelayError::PostgresUnreachable { .. }
                | RelayError::Postgres { .. }
                | RelayError::SlotBusy { .. }
                | RelayError::Replication(_)
                | RelayError::KafkaUnreachable { .. }
                | RelayError::DeliveryTransient { .. }
                | RelayError::DeadLetterPending { .. }
                | RelayError::ProducerFenced(_)
                | RelayError::KafkaTransaction(_)
                | RelayError::BackpressureReleased { .. }
        )
    }

    /// A short, bounded label for logs and the reconnect metric.
    pub fn reason(&self) -> &'static str {
        match self {
            RelayError::Config(_) => "config",
            RelayError::Precondition(_) => "precondition",
            RelayError::PostgresUnreachable { .. } => "postgres_unreachable",
            RelayError::Postgres { .. } => "postgres_query",
            RelayError::SlotBusy { .. } => "slot_busy",
            RelayError::Replication(_) => "replication_stream",
            RelayError::ReplicationDefinite(_) => "replication_refused",
            RelayError::HistoryDiverged { .. } => "history_diverged",
            RelayError::Decode(_) => "decode",
            RelayError::Poison { .. } => "poison_event",
            RelayError::DeadLetterPending { .. } => "dead_letter_pending",
            RelayError::Framing(_) => "framing",
            RelayError::BackpressureReleased { .. } => "backpressure_released",
            RelayError::KafkaUnreachable { .. } => "kafka_unreachable",
            RelayError::KafkaSetup(_) => "kafka_setup",
            RelayError::DeliveryTransient { .. } => "kafka_delivery",
            RelayError::ProducerFenced(_) => "producer_fenced",
            RelayError::KafkaTransaction(_) => "kafka_transaction",
            RelayError::KafkaTransactionRefused { .. } => "kafka_transaction_refused",
            RelayError::DeliveryDefinite { .. } => "kafka_delivery_refused",
        }
    }
}
