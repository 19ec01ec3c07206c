//! Which of the heal's rows Kafka already holds: the event ids of the committed records in the
//! partitions the heal would write to, from a little before the gap's start to their end.
//!
//! Invariant: leaving a row out because its id was found can never lose it (the id is in
//! Kafka, read committed); an id not found is published, so anything this reader misses (a
//! record timestamp set by `[outbox.debezium]` before the window, a partition it could not
//! read) costs a duplicate, never an event. The relay writes a partition in commit order, so a
//! key's events found here are a prefix of its events in the gap, and leaving them out keeps
//! the key's order.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::Headers,
};

use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
    sink::read_back::{read_back, read_back_config},
};

/// Records are stamped by the producer after the commit; this covers clocks that disagree.
const CLOCK_SLACK_MS: i64 = 60_000;

/// The `id` header values of the committed records of `partitions` stamped at or after
/// `since_ms` (less [`CLOCK_SLACK_MS`]).
pub(crate) async fn ids(
    cfg: &Config,
    partitions: Vec<(String, i32)>,
    since_ms: i64,
) -> Result<HashSet<Vec<u8>>, RelayError> {
    if partitions.is_empty() {
        return Ok(HashSet::new());
    }
    let mut c = read_back_config(&cfg.kafka, "outbox-relay-heal")?;
    c.set("auto.offset.reset", "earliest");
    let from = since_ms - CLOCK_SLACK_MS;
    read_back(&cfg.kafka, c, move |c, limit| {
        read(c, &partitions, from, limit)
    })
    .await
}

fn read(
    c: rdkafka::ClientConfig,
    partitions: &[(String, i32)],
    from_ms: i64,
    limit: Duration,
) -> Result<HashSet<Vec<u8>>, RelayError> {
    let failed = |e: KafkaError| {
        RelayError::from(Transient::checkpoint_with(
            format!("cannot read the gap's partitions to find what Kafka holds: {e}"),
            e,
        ))
    };
    let consumer: BaseConsumer = c.create().map_err(Definite::kafka_setup_by)?;
    let mut times = TopicPartitionList::new();
    for (t, p) in partitions {
        times
            .add_partition_offset(t, *p, Offset::Offset(from_ms))
            .map_err(failed)?;
    }
    let starts = consumer
        .offsets_for_times(times, Duration::from_secs(10))
        .map_err(failed)?;
    let mut assign = TopicPartitionList::new();
    let mut ends = Vec::new();
    for e in starts.elements() {
        let (low, high) = consumer
            .fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(10))
            .map_err(failed)?;
        let start = match e.offset() {
            Offset::Offset(o) => o,
            // No record stamped that late: nothing to read.
            _ => high,
        };
        if start.max(low) < high {
            assign
                .add_partition_offset(e.topic(), e.partition(), Offset::Offset(start.max(low)))
                .map_err(failed)?;
            ends.push((e.topic().to_string(), e.partition(), high));
        }
    }
    let mut found = HashSet::new();
    if ends.is_empty() {
        return Ok(found);
    }
    consumer.assign(&assign).map_err(failed)?;
    let deadline = Instant::now() + limit;
    let done = |consumer: &BaseConsumer| {
        let Ok(pos) = consumer.position() else {
            return false;
        };
        ends.iter().all(|(t, p, high)| {
            matches!(pos.find_partition(t, *p).map(|e| e.offset()), Some(Offset::Offset(o)) if o >= *high)
        })
    };
    while !done(&consumer) {
        if Instant::now() > deadline {
            return Err(Transient::checkpoint(format!(
                "reading the gap's partitions did not reach their end within {limit:?} (a \
                 Kafka transaction there stays open?)"
            ))
            .into());
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if let Some(h) = m.headers() {
                    for i in 0..h.count() {
                        let hd = h.get(i);
                        if hd.key == "id"
                            && let Some(v) = hd.value
                        {
                            found.insert(v.to_vec());
                        }
                    }
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(failed(e)),
        }
    }
    Ok(found)
}
