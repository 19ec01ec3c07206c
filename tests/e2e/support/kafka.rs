//! An independent Kafka consumer: reads whole topics from the beginning by partition
//! assignment (no consumer group), so what it sees is exactly what the broker holds (the loop
//! itself is `support::consumer`); topics, watermarks and single records for the tests.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig,
    consumer::{BaseConsumer, Consumer},
};

use super::kafka_brokers;

#[derive(Debug, Clone)]
pub struct Rec {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<String>,
    /// The value as text (invalid UTF-8 replaced: see [`Rec::value_bytes`]).
    pub value: Option<String>,
    /// The value's bytes when they are not UTF-8 (`value` then holds them lossily).
    pub(super) raw_value: Option<Vec<u8>>,
    pub headers: HashMap<String, String>,
}

impl Rec {
    pub fn header(&self, k: &str) -> &str {
        self.headers
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("record has no header {k:?}: {self:?}"))
    }
    /// The `outbox-relay.commit-lsn` header (`X/Y`, hexadecimal halves) as a number; 0 for
    /// `0/0`, a re-published record's "unknown".
    pub fn commit_lsn(&self) -> u64 {
        let text = self.header("outbox-relay.commit-lsn");
        let (hi, lo) = text.split_once('/').expect("an LSN is X/Y");
        (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
    }
    /// The value's bytes exactly as the broker holds them.
    pub fn value_bytes(&self) -> Option<&[u8]> {
        self.raw_value
            .as_deref()
            .or(self.value.as_deref().map(str::as_bytes))
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.value.as_deref().expect("record has a value")).unwrap()
    }
}

fn consumer(brokers: &str, props: &[(&str, &str)]) -> BaseConsumer {
    super::consumer::config(brokers, props)
        .create()
        .expect("consumer")
}

/// Reads every record of `topics` until `done(records)` holds or `timeout` passes; returns
/// what was read either way (the caller asserts on it). Topics that do not exist yet are
/// waited for.
pub fn consume_until(
    topics: &[String],
    timeout: Duration,
    done: impl Fn(&[Rec]) -> bool,
) -> Vec<Rec> {
    consume_until_from(&kafka_brokers(), topics, timeout, done)
}

pub fn consume_until_from(
    brokers: &str,
    topics: &[String],
    timeout: Duration,
    done: impl Fn(&[Rec]) -> bool,
) -> Vec<Rec> {
    consume_until_with(brokers, &[], topics, timeout, done)
}

/// The same with extra client properties (e.g. `security.protocol`, `sasl.*`, `ssl.*`).
pub fn consume_until_with(
    brokers: &str,
    props: &[(&str, &str)],
    topics: &[String],
    timeout: Duration,
    done: impl Fn(&[Rec]) -> bool,
) -> Vec<Rec> {
    super::consumer::consume_traced(brokers, props, topics, timeout, Duration::ZERO, done).0
}

/// Async wrapper (the consumer blocks).
pub async fn consume(topics: Vec<String>, timeout: Duration, expect_ids: usize) -> Vec<Rec> {
    let at = Instant::now();
    let (recs, trace) = tokio::task::spawn_blocking(move || {
        super::consumer::consume_traced(
            &kafka_brokers(),
            &[],
            &topics,
            timeout,
            Duration::ZERO,
            |recs| {
                let ids: std::collections::HashSet<&str> = recs
                    .iter()
                    .filter_map(|r| r.headers.get("id").map(String::as_str))
                    .collect();
                ids.len() >= expect_ids
            },
        )
    })
    .await
    .unwrap();
    // A slow consume says whether the records were slow to reach Kafka or to reach the
    // consumer (issue 40: a green restart run spent 15 s here once).
    super::timing::waited(&format!("consume {expect_ids} ids ({trace})"), at.elapsed());
    recs
}

/// [`consume`], then again after 1.5 s: anything sent twice would come right behind.
pub async fn consume_settled(topics: Vec<String>, expect_ids: usize) -> Vec<Rec> {
    let got = consume(topics.clone(), Duration::from_secs(60), expect_ids).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = consume(topics, Duration::from_secs(5), expect_ids).await;
    if again.len() > got.len() { again } else { got }
}

/// Sum of the high watermarks of `topic`'s partitions (0 while it does not exist).
pub fn high_watermark_sum(c: &BaseConsumer, topic: &str) -> i64 {
    let Ok(md) = c.fetch_metadata(Some(topic), Duration::from_secs(1)) else {
        return 0;
    };
    let Some(t) = md.topics().first() else {
        return 0;
    };
    t.partitions()
        .iter()
        .filter_map(|p| {
            c.fetch_watermarks(topic, p.id(), Duration::from_secs(1))
                .ok()
        })
        .map(|(_, high)| high)
        .sum()
}

/// A consumer for watermark queries.
pub fn watermark_client() -> BaseConsumer {
    consumer(&kafka_brokers(), &[])
}

/// [`watermark_client`] for another broker.
pub fn watermark_client_on(brokers: &str) -> BaseConsumer {
    consumer(brokers, &[])
}

/// Creates `topic` with `partitions` partitions.
pub async fn create_topic(topic: &str, partitions: i32) {
    create(rdkafka::admin::NewTopic::new(
        topic,
        partitions,
        rdkafka::admin::TopicReplication::Fixed(1),
    ))
    .await
}

/// Creates `topic` with one partition and the broker-side `max.message.bytes` limit.
pub async fn create_topic_with_max_bytes(topic: &str, max_message_bytes: u32) {
    use rdkafka::admin::{NewTopic, TopicReplication};
    let limit = max_message_bytes.to_string();
    create(NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", &limit))
        .await
}

/// Creates `topic` (one partition) with the topic configs `configs`.
pub async fn create_topic_with_configs(topic: &str, configs: &[(&str, &str)]) {
    use rdkafka::admin::{NewTopic, TopicReplication};
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    create(new).await
}

/// Creates `topic` with `partitions` partitions on another broker (a test's own).
pub async fn create_topic_on(brokers: &str, topic: &str, partitions: i32) {
    create_with(
        brokers,
        rdkafka::admin::NewTopic::new(
            topic,
            partitions,
            rdkafka::admin::TopicReplication::Fixed(1),
        ),
    )
    .await
}

async fn create(new: rdkafka::admin::NewTopic<'_>) {
    create_with(&kafka_brokers(), new).await
}

async fn create_with(brokers: &str, new: rdkafka::admin::NewTopic<'_>) {
    use rdkafka::{
        admin::{AdminClient, AdminOptions},
        client::DefaultClientContext,
    };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let res = admin
        .create_topics(&[new], &AdminOptions::new())
        .await
        .expect("create topic");
    for r in res {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

/// Sets one topic config. Not incremental: AlterConfigs replaces the topic's whole dynamic
/// config, so every other setting made before returns to the broker default; set them together
/// at creation instead when more than one matters.
pub async fn set_topic_config(topic: &str, key: &str, value: &str) {
    use rdkafka::{
        admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier},
        client::DefaultClientContext,
    };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin client");
    let change = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
    let res = admin
        .alter_configs(&[change], &AdminOptions::new())
        .await
        .expect("alter topic config");
    for r in res {
        r.unwrap_or_else(|(t, e)| panic!("cannot alter topic {t:?}: {e}"));
    }
}

/// Produces one record (key, value, header `id`) with a plain idempotent producer and waits
/// for its acknowledgement.
pub async fn produce_one(topic: &str, key: &str, value: &str, id: &str) {
    produce(topic, key, value, Some(id)).await
}

/// [`produce_one`], with no headers at all when `id` is `None`.
pub async fn produce(topic: &str, key: &str, value: &str, id: Option<&str>) {
    use rdkafka::{
        message::{Header, OwnedHeaders},
        producer::{FutureProducer, FutureRecord},
    };
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let mut record = FutureRecord::to(topic).key(key).payload(value);
    if let Some(id) = id {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(id),
        }));
    }
    p.send(record, Duration::from_secs(30))
        .await
        .unwrap_or_else(|(e, _)| panic!("cannot produce to {topic}: {e}"));
}
