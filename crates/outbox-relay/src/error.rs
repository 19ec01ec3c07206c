//! The relay's errors, split by what the operator (or the supervisor) should do.
//!
//! [`Transient`] errors restart the pipeline from the last confirmed LSN after a backoff: a
//! network drop, a broker that is down, a slot held by another instance. [`Definite`] errors
//! stop the process with a non-zero exit code: retrying cannot fix them (bad config, missing
//! table, invalidated slot, an event Kafka refuses). [`RelayError`] is one of the two, so the
//! kind is decided where the error is made, never re-derived from its text. Every message says
//! what to do; where a client error caused it (tokio-postgres, librdkafka, a decode or framing
//! error, the config) it stays reachable through `source()`.

use relay_core::{decode::DecodeError, watermark::FramingError};

use crate::config::ConfigError;

/// A client's error kept as the source of one of the relay's (librdkafka, pgwire-replication,
/// a joined blocking task).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A client's error shared between whoever reported it and the relay's error made of it (a
/// delivery report's failure, `sink::Failure`): it reads as the client's error and
/// passes on its `source()`. Boxed in an error it is a thin pointer, so that [`RelayError`]
/// stays as small as before.
#[derive(Debug, Clone)]
pub struct ClientError(std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>);

impl ClientError {
    pub(crate) fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(e))
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Builds a variant `{ detail, source }`: from a message alone, or from the error that caused it
/// (its text is the detail, the error itself the source).
macro_rules! caused_by {
    ($ty:ident :: $variant:ident, $text:ident, $by:ident, $with:ident) => {
        impl $ty {
            #[allow(dead_code)]
            pub(crate) fn $text(detail: impl Into<String>) -> Self {
                $ty::$variant {
                    detail: detail.into(),
                    source: None,
                }
            }

            #[allow(dead_code)]
            pub(crate) fn $by(source: impl std::error::Error + Send + Sync + 'static) -> Self {
                $ty::$variant {
                    detail: source.to_string(),
                    source: Some(Box::new(source)),
                }
            }

            #[allow(dead_code)]
            pub(crate) fn $with(
                detail: impl Into<String>,
                source: impl std::error::Error + Send + Sync + 'static,
            ) -> Self {
                $ty::$variant {
                    detail: detail.into(),
                    source: Some(Box::new(source)),
                }
            }
        }
    };
}

caused_by!(
    Transient::Replication,
    replication,
    replication_by,
    replication_with
);
caused_by!(Transient::ProducerFenced, fenced, fenced_by, fenced_with);
caused_by!(
    Transient::KafkaTransaction,
    kafka_transaction,
    kafka_transaction_by,
    kafka_transaction_with
);
caused_by!(
    Transient::Checkpoint,
    checkpoint,
    checkpoint_by,
    checkpoint_with
);
caused_by!(
    Definite::ReplicationRefused,
    replication_refused,
    replication_refused_by,
    replication_refused_with
);
caused_by!(
    Definite::KafkaSetup,
    kafka_setup,
    kafka_setup_by,
    kafka_setup_with
);

/// An error of the relay: either kind, with the message the operator reads.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Transient(#[from] Transient),
    #[error(transparent)]
    Definite(#[from] Definite),
}

/// Retrying after a backoff may succeed: the supervisor restarts the pipeline from the last
/// confirmed LSN (a network drop, a broker that is down, a slot another instance holds).
#[derive(Debug, thiserror::Error)]
pub enum Transient {
    #[error("cannot reach PostgreSQL at {target}: {detail}")]
    PostgresUnreachable {
        target: String,
        detail: String,
        #[source]
        source: tokio_postgres::Error,
    },

    #[error("PostgreSQL query failed ({context}): {detail}")]
    Postgres {
        context: &'static str,
        detail: String,
        #[source]
        source: tokio_postgres::Error,
    },

    #[error(
        "replication slot {slot:?} is in use by another connection ({detail}); another \
         outbox-relay instance is probably active: waiting to take over"
    )]
    SlotBusy { slot: String, detail: String },

    #[error("replication stream failed: {detail}")]
    Replication {
        detail: String,
        #[source]
        source: Option<BoxError>,
    },

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

    #[error(
        "Kafka did not accept an event for topic {topic:?} ({code}); nothing after it was \
         confirmed and the relay restarts from the last confirmed LSN"
    )]
    Delivery {
        topic: String,
        code: String,
        /// The client's error, when one caused it (a fatal producer error has only a code).
        #[source]
        source: Option<Box<ClientError>>,
    },

    /// `kafka.transactional_id`: another instance acquired the slot and fenced this producer.
    #[error(
        "another outbox-relay instance with the same kafka.transactional_id took over ({}): \
         it holds the slot now, so this instance writes nothing more to Kafka; its unfinished \
         Kafka transaction is aborted and nothing of it was confirmed. Waiting for the slot again",
        detail
    )]
    ProducerFenced {
        detail: String,
        #[source]
        source: Option<BoxError>,
    },

    /// `kafka.transactional_id`: a Kafka transaction could not be started or committed.
    #[error(
        "a Kafka transaction failed ({detail}); nothing of it was confirmed and the relay restarts \
         from the last confirmed LSN. If it repeats, check that the principal may WRITE and \
         DESCRIBE the transactional id and that the brokers' transaction state log is healthy"
    )]
    KafkaTransaction {
        detail: String,
        #[source]
        source: Option<BoxError>,
    },

    /// At-least-once mode: the stream does not continue what the checkpoint says; the relay
    /// starts again without skipping (never a loss; duplicates possible).
    #[error(
        "the checkpoint in Kafka does not match the stream ({0}); in at-least-once mode the \
         relay streams again from the slot without skipping anything: events may be sent \
         again, none is lost"
    )]
    CheckpointContradicted(#[source] relay_core::skip::HistoryChanged),

    /// The checkpoint topic could not be read to its end.
    #[error(
        "cannot read the checkpoint ({detail}); nothing was streamed yet and the relay retries. If it \
         repeats, check that the principal may READ and DESCRIBE kafka.checkpoint_topic \
         (docs/security.md)"
    )]
    Checkpoint {
        detail: String,
        #[source]
        source: Option<BoxError>,
    },

    /// The checkpoint topic is not ready yet: the broker is slow to create or show it, or another
    /// instance is creating it.
    #[error(
        "kafka.checkpoint_topic {topic:?} is not ready ({detail}); nothing was streamed yet and \
         the relay retries. If it repeats, check the brokers' health and that the topic has 1 \
         partition and cleanup.policy=compact"
    )]
    CheckpointTopicNotReady { topic: String, detail: String },

    /// The slot monitor found the stream up and nothing moving for `alerts.stalled_secs`.
    #[error(
        "the pipeline stalled: the replication stream was open and the server wrote WAL, but \
         for {secs} s nothing was received, acknowledged by Kafka or confirmed; restarting from \
         the last confirmed LSN (docs/operations.md#stalled)"
    )]
    Stalled { secs: u64 },
}

/// Retrying cannot fix it: the process stops with a non-zero exit code and the message says
/// what to do (bad config, an unmet precondition, an event Kafka refuses for good).
#[derive(Debug, thiserror::Error)]
pub enum Definite {
    #[error(transparent)]
    Config(ConfigError),

    /// A precondition in PostgreSQL is not met; the text is one actionable sentence.
    #[error("{0}")]
    Precondition(String),

    #[error("replication stream refused: {detail}")]
    ReplicationRefused {
        detail: String,
        #[source]
        source: Option<BoxError>,
    },

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

    /// Exactly-once mode: the stream does not continue what the newest checkpoint says Kafka
    /// holds.
    #[error(transparent)]
    HistoryChanged(relay_core::skip::HistoryChanged),

    /// The checkpoint topic is unusable (settings, permissions, foreign records).
    #[error("kafka.checkpoint_topic {topic:?}: {detail}")]
    CheckpointTopic { topic: String, detail: String },

    #[error("cannot decode the replication stream: {0}")]
    Decode(#[source] DecodeError),

    /// A row of an outbox table that cannot become a Kafka record, under `on_poison = "halt"`.
    #[error(
        "{reason}. The relay stops here and confirms nothing from this event on (policy \
         relay.on_poison = \"halt\"); fix the cause, or set relay.on_poison = \"dead-letter\" \
         to record such rows in the dead-letter topic and go on"
    )]
    Poison { table: String, reason: String },

    /// An UPDATE of an outbox row under `table.op.invalid.behavior = "fatal"`.
    #[error(
        "an UPDATE of a row of outbox table {table} (commit LSN {commit_lsn}): the outbox is \
         insert-only and [outbox.debezium] \"table.op.invalid.behavior\" = \"fatal\" stops here, \
         confirming nothing from it on. Stop the writer that updates outbox rows, then set the \
         option to \"warn\" (skip it) to go on, or publish INSERTs only (ALTER PUBLICATION ... \
         SET (publish = 'insert'))"
    )]
    OutboxUpdated {
        table: String,
        commit_lsn: relay_core::Lsn,
    },

    #[error("the replication stream broke transaction framing: {0}")]
    Framing(#[source] FramingError),

    /// `setup --recreate-slot --heal` published what it could of a lost slot's gap, and this
    /// part of it could not be covered (one line each).
    #[error(
        "the gap of the re-created slot was not healed completely ({healed} row(s) published); what \
         is not covered: {uncovered}"
    )]
    GapNotHealed { healed: u64, uncovered: String },

    #[error("cannot create the Kafka producer: {detail}")]
    KafkaSetup {
        detail: String,
        #[source]
        source: Option<BoxError>,
    },

    /// `kafka.transactional_id`: the brokers do not let the relay's principal use the id.
    #[error(
        "Kafka refused kafka.transactional_id {id:?} ({detail}): grant the relay's principal \
         WRITE and DESCRIBE on the transactional ids starting with it ({id:?} and \
         \"{id}.2\" with kafka.transaction_producers = 2, the default; a prefixed ACL covers \
         both: docs/security.md), or remove kafka.transactional_id"
    )]
    KafkaTransactionRefused { id: String, detail: String },

    #[error(
        "Kafka refused an event for topic {topic:?} for good ({code}): {hint}. {}Nothing after it \
         was confirmed; fix the cause and restart outbox-relay, the event will be sent again",
        change.as_ref().map(|c| format!("{c}. ")).unwrap_or_default()
    )]
    DeliveryRefused {
        topic: String,
        /// The change the refused record came from (`None` for a record of no change: a
        /// checkpoint).
        change: Option<RefusedChange>,
        code: String,
        hint: &'static str,
        #[source]
        source: Box<ClientError>,
    },
}

/// The change whose record Kafka refused for good: where the operator finds it in the source.
/// Filled in only once a refusal happened, from what the refusing call or the delivery report
/// has at hand (nothing is kept per record for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedChange {
    /// The `[[outbox]]` table (`schema.table`) or `message:<prefix>` the record came from;
    /// `None` when a delivery report names the change and the relay publishes several sources.
    pub(crate) routed: Option<String>,
    pub(crate) commit_lsn: relay_core::Lsn,
    /// The record's position in its transaction (header `outbox-relay.seq`).
    pub(crate) seq: u64,
    /// Named by a delivery report: the first record of a batch the broker refused as a whole,
    /// so when a record's size is the cause it may be a later record of the batch.
    pub(crate) in_batch: bool,
}

impl std::fmt::Display for RefusedChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.routed.as_deref() {
            Some(routed) => match relay_core::route::routed_prefix(routed) {
                Some(prefix) => format!("the logical message with prefix {prefix:?}"),
                None => format!("a row of outbox table {routed}"),
            },
            None => "the change".to_string(),
        };
        let (lsn, seq) = (self.commit_lsn, self.seq);
        if self.in_batch {
            write!(
                f,
                "The first record refused is {what} committed at {lsn} (position {seq}); the \
                 broker refuses a batch as a whole, so when the cause is a record's size it may \
                 be a later record of that batch"
            )
        } else {
            write!(f, "It is {what} committed at {lsn} (position {seq})")
        }
    }
}

impl From<ConfigError> for RelayError {
    fn from(e: ConfigError) -> Self {
        Definite::Config(e).into()
    }
}

impl From<DecodeError> for RelayError {
    fn from(e: DecodeError) -> Self {
        Definite::Decode(e).into()
    }
}

impl From<FramingError> for RelayError {
    fn from(e: FramingError) -> Self {
        Definite::Framing(e).into()
    }
}

impl RelayError {
    /// A refusal for good ([`Definite::DeliveryRefused`]) names `change`; any other error is
    /// returned unchanged.
    pub(crate) fn refusing(mut self, change: RefusedChange) -> Self {
        if let RelayError::Definite(Definite::DeliveryRefused { change: c, .. }) = &mut self {
            *c = Some(change);
        }
        self
    }

    /// True when restarting the pipeline after a backoff may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, RelayError::Transient(_))
    }

    /// A short, bounded label for logs and the reconnect metric.
    pub fn reason(&self) -> &'static str {
        match self {
            RelayError::Transient(t) => t.reason(),
            RelayError::Definite(d) => d.reason(),
        }
    }
}

impl Transient {
    fn reason(&self) -> &'static str {
        match self {
            Transient::PostgresUnreachable { .. } => "postgres_unreachable",
            Transient::Postgres { .. } => "postgres_query",
            Transient::SlotBusy { .. } => "slot_busy",
            Transient::Replication { .. } => "replication_stream",
            Transient::DeadLetterPending { .. } => "dead_letter_pending",
            Transient::BackpressureReleased { .. } => "backpressure_released",
            Transient::KafkaUnreachable { .. } => "kafka_unreachable",
            Transient::Delivery { .. } => "kafka_delivery",
            Transient::ProducerFenced { .. } => "producer_fenced",
            Transient::KafkaTransaction { .. } => "kafka_transaction",
            Transient::Checkpoint { .. } => "checkpoint_read",
            Transient::CheckpointTopicNotReady { .. } => "checkpoint_topic_not_ready",
            Transient::CheckpointContradicted { .. } => "checkpoint_contradicted",
            Transient::Stalled { .. } => "stalled",
        }
    }
}

impl Definite {
    fn reason(&self) -> &'static str {
        match self {
            Definite::Config { .. } => "config",
            Definite::Precondition { .. } => "precondition",
            Definite::ReplicationRefused { .. } => "replication_refused",
            Definite::HistoryDiverged { .. } => "history_diverged",
            Definite::HistoryChanged { .. } => "history_changed",
            Definite::CheckpointTopic { .. } => "checkpoint_topic",
            Definite::Decode { .. } => "decode",
            Definite::Poison { .. } => "poison_event",
            Definite::OutboxUpdated { .. } => "outbox_updated",
            Definite::Framing { .. } => "framing",
            Definite::KafkaSetup { .. } => "kafka_setup",
            Definite::GapNotHealed { .. } => "gap_not_healed",
            Definite::KafkaTransactionRefused { .. } => "kafka_transaction_refused",
            Definite::DeliveryRefused { .. } => "kafka_delivery_refused",
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::*;

    #[test]
    fn the_kind_decides_retry_and_the_source_chain_is_kept() {
        let kafka = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let refused: RelayError = Definite::DeliveryRefused {
            topic: "t".into(),
            change: None,
            code: kafka.to_string(),
            hint: "shrink it",
            source: Box::new(ClientError::new(kafka.clone())),
        }
        .into();
        assert!(!refused.is_transient());
        assert_eq!(refused.reason(), "kafka_delivery_refused");
        let source = std::error::Error::source(&refused).expect("the Kafka error is the source");
        assert_eq!(source.to_string(), kafka.to_string());

        let dropped: RelayError = Transient::Delivery {
            topic: "t".into(),
            code: "broker down".into(),
            source: None,
        }
        .into();
        assert!(dropped.is_transient());
        assert!(std::error::Error::source(&dropped).is_none());
        assert!(RelayError::from(Definite::Precondition("x".into())).reason() == "precondition");
    }

    fn refused(change: RefusedChange) -> String {
        let kafka = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        RelayError::from(Definite::DeliveryRefused {
            topic: "t".into(),
            change: None,
            code: kafka.to_string(),
            hint: "shrink it",
            source: Box::new(ClientError::new(kafka)),
        })
        .refusing(change)
        .to_string()
    }

    #[test]
    fn a_refusal_names_the_source_and_position_of_its_change() {
        let change = |routed: Option<&str>, in_batch| RefusedChange {
            routed: routed.map(str::to_string),
            commit_lsn: relay_core::Lsn(0x1_0000_00A0),
            seq: 4,
            in_batch,
        };
        let msg = refused(change(Some("message:outbox"), false));
        assert!(
            msg.contains(
                "shrink it. It is the logical message with prefix \"outbox\" committed at \
                 1/A0 (position 4). Nothing after it"
            ),
            "{msg}"
        );
        let msg = refused(change(Some("public.outbox"), false));
        assert!(
            msg.contains("It is a row of outbox table public.outbox committed at 1/A0"),
            "{msg}"
        );
        let msg = refused(change(None, true));
        assert!(
            msg.contains("The first record refused is the change committed at 1/A0 (position 4)"),
            "{msg}"
        );
        // Another error is left as it is.
        let other =
            RelayError::from(Definite::Precondition("x".into())).refusing(change(None, false));
        assert_eq!(other.to_string(), "x");
    }

    /// The client's error that caused one of the relay's stays reachable through `source()`,
    /// and the message reads as before (its text is the detail).
    #[test]
    fn errors_built_from_a_client_error_keep_it_as_their_source() {
        use rdkafka::error::{KafkaError, RDKafkaErrorCode};
        use std::error::Error as _;

        let kafka = KafkaError::MessageProduction(RDKafkaErrorCode::OperationTimedOut);
        let text = kafka.to_string();
        let e = RelayError::from(Transient::kafka_transaction_by(kafka));
        assert!(
            e.to_string()
                .starts_with(&format!("a Kafka transaction failed ({text});"))
        );
        let source = e.source().expect("a source");
        assert!(source.downcast_ref::<KafkaError>().is_some(), "{source:?}");

        let setup = RelayError::from(Definite::kafka_setup_by(KafkaError::ClientCreation(
            "bad".into(),
        )));
        assert!(
            setup
                .source()
                .unwrap()
                .downcast_ref::<KafkaError>()
                .is_some()
        );
        // A message alone has no source.
        assert!(
            RelayError::from(Transient::replication("closed"))
                .source()
                .is_none()
        );
    }
}
