//! The checkpoint topic at the Kafka edge: created or checked once per process, read to its end
//! after the slot is won and the producer fenced, written through the sink
//! ([`crate::sink::KafkaSink::send_checkpoint`]). The rules of what a checkpoint says and what
//! it lets the relay skip are in `relay_core::{checkpoint, skip}`.
//!
//! Invariant: the checkpoint read at a start is the newest *committed* one for this slot. It is
//! read with `isolation.level=read_committed` up to the high watermark taken after
//! `InitProducerId`, which has ended (aborted) the previous holder's open transaction, so no
//! checkpoint of an earlier instance can appear later.

mod topic;

use std::time::{Duration, Instant};

use rdkafka::{
    ClientConfig, ClientContext, Message, Offset, TopicPartitionList,
    config::RDKafkaLogLevel,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    error::{KafkaError, RDKafkaErrorCode},
};
use relay_core::checkpoint::{ChangeRef, Checkpoint, VERSION};

pub(crate) use topic::prepare_topic;

use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
    sink::client::Aside,
    sink::read_back::{read_back, read_back_config},
    telemetry::events::{CHECKPOINT_READ_END, KAFKA_CLIENT_ERROR},
};

/// The checkpoint reader's and the admin client's context: librdkafka's lines as the
/// producer's are.
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        outbox_service::kafka_log::log_librdkafka(level, fac, log_message);
    }

    /// The end of the partition is how the reader knows it read everything
    /// (`enable.partition.eof`), not an error: rdkafka's default logged it as one at every start.
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::debug!(
                reason,
                "{CHECKPOINT_READ_END}: the reader reached the end of the topic"
            );
        } else {
            tracing::warn!(error = %error, reason, "{KAFKA_CLIENT_ERROR}");
        }
    }
}

impl ConsumerContext for Quiet {}

/// Which key a slot's checkpoints go under. A standby and its primary share the system
/// identifier, so a slot made on a standby carries the standby's `primary_slot_name` in its key
/// (`relay_core::checkpoint::Checkpoint::standby`): a slot of the same name on the primary
/// keeps its own. A promoted standby keeps `primary_slot_name` in its settings, which is how
/// the relay finds the key its slot had before the promotion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A primary's slot: `<system id>/<database>/<slot>`.
    #[default]
    Primary,
    /// A slot on a standby whose `primary_slot_name` is this (empty: unset).
    Standby(String),
    /// A primary with `primary_slot_name` set (a promoted standby, usually): the slot's
    /// checkpoints are under the standby key if it was made before the promotion, else under
    /// the primary key.
    Promoted(String),
}

impl Scope {
    /// From `pg_is_in_recovery()` and `current_setting('primary_slot_name')`.
    pub(crate) fn of(in_recovery: bool, primary_slot_name: String) -> Self {
        match (in_recovery, primary_slot_name.is_empty()) {
            (true, _) => Self::Standby(primary_slot_name),
            (false, true) => Self::Primary,
            (false, false) => Self::Promoted(primary_slot_name),
        }
    }
}

/// Who writes checkpoints and under which key.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) system_id: String,
    pub(crate) database: String,
    pub(crate) slot: String,
    pub(crate) timeline: u32,
    pub(crate) tables: Vec<String>,
    /// The slot was made on a standby with this `primary_slot_name` ([`Scope`]).
    pub(crate) standby: Option<String>,
}

impl Identity {
    pub(crate) fn new(cfg: &Config, system_id: &str, timeline: u32) -> Self {
        Self {
            system_id: system_id.to_string(),
            database: cfg.postgres.database.clone(),
            slot: cfg.postgres.slot.clone(),
            timeline,
            tables: cfg
                .outbox
                .iter()
                .map(|t| {
                    let (s, n) = t.qualified_name();
                    format!("{s}.{n}")
                })
                // Routed messages are routed changes too: the skip verifies them.
                .chain(cfg.message.iter().map(|m| m.routed_name()))
                .collect(),
            standby: None,
        }
    }

    /// The identity of a slot made on a standby whose `primary_slot_name` is `name`.
    pub(crate) fn of_standby_slot(self, name: &str) -> Self {
        Self {
            standby: Some(name.to_string()),
            ..self
        }
    }

    pub(crate) fn key(&self) -> String {
        Checkpoint::key_for(
            &self.system_id,
            &self.database,
            &self.slot,
            self.standby.as_deref(),
        )
    }

    /// The checkpoint saying Kafka holds everything up to `covered`, `last` being the last change
    /// with a record.
    pub(crate) fn at(&self, covered: relay_core::Lsn, last: Option<ChangeRef>) -> Checkpoint {
        Checkpoint {
            version: VERSION,
            system_id: self.system_id.clone(),
            database: self.database.clone(),
            slot: self.slot.clone(),
            timeline: self.timeline,
            covered_lsn: covered,
            last,
            tables: self.tables.clone(),
            standby: self.standby.clone(),
        }
    }
}

/// The newest committed checkpoint under `key`, read to the end of the topic.
pub(crate) async fn read_latest(
    cfg: &Config,
    key: String,
) -> Result<Option<Checkpoint>, RelayError> {
    let topic = cfg.kafka.checkpoint_topic.clone();
    let mut c = read_back_config(&cfg.kafka, "outbox-relay-checkpoint-reader")?;
    // A failed lookup of the first offset must be an error, never a silent jump to the end
    // (librdkafka's default), which would read as "no checkpoint".
    c.set("auto.offset.reset", "error");
    read_back(&cfg.kafka, c, move |c, limit| {
        read_blocking(c, &topic, &key, limit)
    })
    .await
}

/// The broker does not know the (new) topic or its partition yet, or has no leader for it yet.
/// NotLeaderForPartition too: read ~100 ms after the relay created the topic, a KRaft broker
/// answered it (CI of a13719d: the at-least-once relay then went on without checkpoints, and
/// the heal that needed one could not place the gap).
fn not_known_yet(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::NotLeaderForPartition
        )
    )
}

fn read_blocking(
    c: ClientConfig,
    topic: &str,
    key: &str,
    limit: Duration,
) -> Result<Option<Checkpoint>, RelayError> {
    // The principal's rights are the operator's to change: definite, so that an at-least-once
    // relay goes on without checkpoints and an exactly-once one stops (exit 3). Anything else
    // is retried.
    let failed = |what: &str, e: KafkaError| match e.rdkafka_error_code() {
        Some(code) if topic::is_definite(code) => topic::unusable(
            topic,
            format!("{what} it: {e}; grant READ and DESCRIBE on it (docs/security.md)"),
        ),
        _ => RelayError::from(Transient::checkpoint_with(
            format!("{what} {topic}: {e}"),
            e,
        )),
    };
    let consumer: Aside<BaseConsumer<Quiet>> = Aside::new(
        c.create_with_context(Quiet)
            .map_err(Definite::kafka_setup_by)?,
    );
    // Right after the relay created the topic its partition may not be in the broker's metadata
    // yet (seen in CI under load: UnknownPartition): wait for it, briefly.
    let started = Instant::now();
    let (low, high) = loop {
        match consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)) {
            Err(e) if not_known_yet(&e) && started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(200));
            }
            r => break r.map_err(|e| failed("cannot read the offsets of", e))?,
        }
    };
    if high <= low {
        return Ok(None);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .and_then(|()| consumer.assign(&tpl))
        .map_err(|e| failed("cannot read", e))?;
    let deadline = Instant::now() + limit;
    let mut latest: Option<Option<Vec<u8>>> = None;
    let mut position = low;
    while position < high {
        if Instant::now() > deadline {
            return Err(Transient::checkpoint(format!(
                "reading {topic} stopped at offset {position} of {high} for {limit:?}: a Kafka \
                 transaction there stays open"
            ))
            .into());
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                position = m.offset() + 1;
                if m.key() == Some(key.as_bytes()) {
                    latest = Some(m.payload().map(<[u8]>::to_vec));
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // Control records (transaction markers) are never delivered: the position says
                // how far the reader got.
                if let Ok(p) = consumer.position()
                    && let Some(Offset::Offset(o)) = p.find_partition(topic, 0).map(|e| e.offset())
                {
                    position = position.max(o);
                }
            }
            Some(Err(e)) => return Err(failed("cannot read", e)),
            None => {}
        }
    }
    match latest.flatten() {
        None => Ok(None),
        Some(bytes) => Checkpoint::from_json(&bytes)
            .map(Some)
            .map_err(|e| topic::unusable(topic, e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::not_known_yet;

    #[test]
    fn a_topic_just_created_without_a_leader_is_waited_for_and_a_refusal_is_not() {
        for code in [
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::LeaderNotAvailable,
            RDKafkaErrorCode::UnknownTopicOrPartition,
        ] {
            assert!(not_known_yet(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
        let refused = KafkaError::MetadataFetch(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert!(!not_known_yet(&refused));
    }
}
