//! Kafka Connect's offsets topic at the Kafka edge, and the one checkpoint the cutover writes.
//!
//! Connect (distributed mode, `KafkaOffsetBackingStore`) writes each offset as a record whose
//! key and value are the same JSON bytes the standalone worker keeps in its file; a key always
//! goes to the same partition, so reading every partition to its end, in order, gives the newest
//! value per key last. Read with `isolation.level=read_committed`: with
//! `exactly.once.source.support` Connect writes offsets inside its transactions.

use std::time::{Duration, Instant};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    producer::{FutureProducer, FutureRecord},
};
use relay_core::debezium_position::Entry;

use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
    sink::{client_config, read_back::read_back_config},
};

/// Every record of `topic`, partition by partition, up to the end it had when reading began.
pub(super) async fn read_all(cfg: &Config, topic: &str) -> Result<Vec<Entry>, RelayError> {
    let c = read_back_config(&cfg.kafka, "outbox-relay-cutover-reader")?;
    let topic = topic.to_string();
    let timeout = Duration::from_millis(cfg.kafka.connect_timeout_ms);
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = c.create().map_err(Definite::kafka_setup_by)?;
        read_blocking(&consumer, &topic, timeout)
    })
    .await
    .map_err(Transient::checkpoint_by)?
}

fn read_blocking(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<Entry>, RelayError> {
    let failed = |what: &str, e: KafkaError| {
        RelayError::from(Transient::checkpoint(format!(
            "{what} Connect's offsets topic {topic}: {e}"
        )))
    };
    let meta = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| failed("cannot describe", e))?;
    let partitions = meta
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map_or(0, |t| t.partitions().len() as i32);
    if partitions == 0 {
        return Err(Definite::Precondition(format!(
            "Connect's offsets topic {topic:?} does not exist on kafka.brokers: pass the \
             worker's offset.storage.topic (connect-offsets by default)"
        ))
        .into());
    }
    let mut entries = Vec::new();
    for p in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .map_err(|e| failed("cannot read the offsets of", e))?;
        if high <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(low))
            .and_then(|()| consumer.assign(&tpl))
            .map_err(|e| failed("cannot read", e))?;
        let deadline = Instant::now() + timeout + Duration::from_secs(60);
        let mut position = low;
        while position < high {
            if Instant::now() > deadline {
                return Err(Transient::checkpoint(format!(
                    "reading Connect's offsets topic {topic} stopped at offset {position} of \
                     {high} of partition {p}: a Kafka transaction there stays open"
                ))
                .into());
            }
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    position = m.offset() + 1;
                    if let Some(k) = m.key() {
                        entries.push((k.to_vec(), m.payload().map(<[u8]>::to_vec)));
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    // Transaction markers are never delivered: the position says how far it got.
                    if let Ok(pos) = consumer.position()
                        && let Some(Offset::Offset(o)) =
                            pos.find_partition(topic, p).map(|e| e.offset())
                    {
                        position = position.max(o);
                    }
                }
                Some(Err(e)) => return Err(failed("cannot read", e)),
                None => {}
            }
        }
    }
    Ok(entries)
}

/// Writes the cutover's checkpoint to `kafka.checkpoint_topic` and waits for the
/// acknowledgement (acks=all), outside any transaction.
pub(super) async fn write(cfg: &Config, key: &str, value: &[u8]) -> Result<(), RelayError> {
    let mut c = client_config(&cfg.kafka)?;
    c.set("acks", "all");
    let producer: FutureProducer = c.create().map_err(Definite::kafka_setup_by)?;
    let timeout = Duration::from_millis(cfg.kafka.connect_timeout_ms);
    producer
        .send(
            FutureRecord::to(&cfg.kafka.checkpoint_topic)
                .key(key)
                .payload(value),
            timeout,
        )
        .await
        .map_err(|(e, _)| {
            RelayError::from(Definite::CheckpointTopic {
                topic: cfg.kafka.checkpoint_topic.clone(),
                detail: format!("cannot write the cutover's checkpoint: {e}"),
            })
        })?;
    Ok(())
}
