//! Kafka side: topics, end-offset monitoring (catch-up) and the independent latency consumer.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};

use crate::pg::now_us;

pub const PARTITIONS: i32 = 3;
const COMMIT_TIME_HEADER: &str = "outbox-relay.commit-time-us";

fn admin(brokers: &str) -> Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?)
}

/// Creates `topics` with [`PARTITIONS`] partitions (RF 1); existing ones are fine.
pub async fn create_topics(brokers: &str, topics: &[String]) -> Result<()> {
    create_topics_with(brokers, topics, PARTITIONS).await
}

/// [`create_topics`] with `n` partitions each.
pub async fn create_topics_with(brokers: &str, topics: &[String], n: i32) -> Result<()> {
    let a = admin(brokers)?;
    // BENCH_TIMESTAMP_TYPE=LogAppendTime: records carry the broker's append time instead of
    // the producer's hand-off, which moves the stage cut (see [`Stages`]) to the broker.
    let ts_type = std::env::var("BENCH_TIMESTAMP_TYPE").ok();
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| {
            let topic = NewTopic::new(t, n, TopicReplication::Fixed(1));
            match &ts_type {
                Some(v) => topic.set("message.timestamp.type", v),
                None => topic,
            }
        })
        .collect();
    for r in a.create_topics(&new, &AdminOptions::new()).await? {
        match r {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => anyhow::bail!("create topic {t}: {e}"),
        }
    }
    // Wait until the partitions have leaders (metadata visible to clients).
    let c = plain_consumer(brokers)?;
    for t in topics {
        for _ in 0..100 {
            if partitions(&c, t).is_some_and(|p| p == n) {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

pub async fn delete_topics(brokers: &str, topics: &[String]) -> Result<()> {
    let a = admin(brokers)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let _ = a.delete_topics(&names, &AdminOptions::new()).await?;
    Ok(())
}

fn plain_consumer(brokers: &str) -> Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "bench-monitor")
        .set("enable.auto.commit", "false")
        .create()?)
}

fn partitions(c: &BaseConsumer, topic: &str) -> Option<i32> {
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(2)).ok()?;
    let t = md.topics().first()?;
    if t.error().is_some() {
        return None;
    }
    Some(t.partitions().len() as i32)
}

/// Sum of the high watermarks of `topic` (records appended so far).
pub struct EndOffsets {
    c: BaseConsumer,
    topic: String,
    /// The topic's partition count (from its metadata; [`PARTITIONS`] if it does not exist yet).
    partitions: i32,
}

impl EndOffsets {
    pub fn new(brokers: &str, topic: &str) -> Result<Self> {
        let c = plain_consumer(brokers)?;
        let partitions = partitions(&c, topic).unwrap_or(PARTITIONS);
        Ok(Self {
            c,
            topic: topic.to_string(),
            partitions,
        })
    }

    pub fn total(&self) -> Result<i64> {
        let mut sum = 0;
        for p in 0..self.partitions {
            let (_, high) = self
                .c
                .fetch_watermarks(&self.topic, p, Duration::from_secs(5))
                .with_context(|| format!("watermarks of {}/{p}", self.topic))?;
            sum += high;
        }
        Ok(sum)
    }
}

/// The first record of `topic`'s first non-empty partition, for the record: key, headers and
/// value (cut at 400 bytes), as text. `None` if nothing arrives within 10 s.
pub fn first_record(brokers: &str, topic: &str) -> Result<Option<String>> {
    let c = plain_consumer(brokers)?;
    let n = partitions(&c, topic).unwrap_or(PARTITIONS);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m?;
        let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
        let headers: Vec<String> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| format!("{}={}", h.key, text(h.value).unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let mut value = text(m.payload()).unwrap_or_else(|| "(null)".into());
        if value.len() > 400 {
            let mut cut = 400;
            while !value.is_char_boundary(cut) {
                cut -= 1;
            }
            value.truncate(cut);
            value.push('…');
        }
        return Ok(Some(format!(
            "key={} headers=[{}] value={value}",
            text(m.key()).unwrap_or_else(|| "(null)".into()),
            headers.join(", ")
        )));
    }
    Ok(None)
}

/// Every record of `topic` (read committed, from the beginning, until nothing more arrives for
/// 3 s), as its event id ([`event_id`]; `None` where none could be read).
pub fn event_ids(brokers: &str, topic: &str) -> Result<Vec<Option<String>>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "bench-event-ids")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let n = partitions(&c, topic).unwrap_or(PARTITIONS);
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let mut ids = Vec::new();
    let (start, mut last) = (Instant::now(), Instant::now());
    while last.elapsed() < Duration::from_secs(3) && start.elapsed() < Duration::from_secs(300) {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                ids.push(event_id(m.headers(), m.payload()));
                last = Instant::now();
            }
            Some(Err(e)) => eprintln!("[bench] consumer error: {e}"),
            None => {}
        }
    }
    Ok(ids)
}

/// A record's event id, as each system writes it: the `id` header (outbox-relay, Debezium's
/// router, go-pq-cdc-kafka, the polling relay; a JSON-quoted string is unquoted), else the first
/// `"id":"…"` of the value (outboxx's envelope carries the row's columns in `data`).
pub fn event_id(
    headers: Option<&rdkafka::message::BorrowedHeaders>,
    value: Option<&[u8]>,
) -> Option<String> {
    if let Some(v) = headers.and_then(|h| h.iter().find(|h| h.key == "id").and_then(|h| h.value)) {
        let v = std::str::from_utf8(v).ok()?;
        return Some(v.trim_matches('"').to_string());
    }
    id_in_json(value?)
}

/// The string value of the first `"id"` key in JSON text (`"id":"x"` or `"id": "x"`).
fn id_in_json(v: &[u8]) -> Option<String> {
    let at = v.windows(4).position(|w| w == b"\"id\"")?;
    let mut i = at + 4;
    while matches!(v.get(i), Some(b' ' | b':')) {
        i += 1;
    }
    if v.get(i) != Some(&b'"') {
        return None;
    }
    let rest = &v[i + 1..];
    let end = rest.iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&rest[..end]).ok().map(str::to_string)
}

/// Latencies collected by the consumer, in microseconds.
#[derive(Debug, Default)]
pub struct Collected {
    /// Records read (all, including warm-up).
    pub received: u64,
    /// Records whose payload `ts` was inside the measurement window.
    pub measured: u64,
    /// now − payload `ts` (writer clock before the INSERT), measured records only.
    pub payload_lat_us: Vec<u32>,
    /// now − `outbox-relay.commit-time-us` header (PostgreSQL commit time), when present.
    pub commit_lat_us: Vec<u32>,
    /// Where each measured record's time went, when it carries the commit-time header.
    pub stages: Vec<Stages>,
    /// Per second of the run (by receive time, from `t0`): records received.
    pub per_sec_received: Vec<u64>,
    /// Per second of the run: payload latencies of records received in that second.
    pub per_sec_lat: Vec<Vec<u32>>,
}

/// One record's writer-to-consumer latency cut at PostgreSQL's commit and at the producer's
/// hand-off, in µs. The hand-off is the record's Kafka timestamp: librdkafka stamps a record
/// with its wall clock (ms) when `produce` is called unless the producer sets one, and the
/// relay sets none outside the Debezium envelope, so a stage can be off by up to 1 ms. With
/// `BENCH_TIMESTAMP_TYPE=LogAppendTime` the cut is the broker's append instead
/// ([`Stages::at_broker`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stages {
    /// The middle cut is the broker's append time, not the producer's hand-off.
    pub at_broker: bool,
    /// Writer's timestamp → PostgreSQL's commit (the writer's INSERT and COMMIT).
    pub to_commit_us: i64,
    /// Commit → hand-off to the producer (walsender decoding and sending, the relay reading,
    /// routing and any hold before `produce`).
    pub to_produce_us: i64,
    /// Hand-off → consumer (librdkafka's batching, the broker, a transaction's commit, the
    /// consumer's fetch).
    pub to_consumer_us: i64,
}

/// The run's clock: `t0_us` is its start (wall clock, µs); records whose payload `ts` is in
/// `[from_us, to_us)` are measured.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub t0_us: i64,
    pub from_us: i64,
    pub to_us: i64,
}

impl Collected {
    /// One record received at `now` (µs) carrying the writer's timestamp `ts`, if any: counted
    /// in its second of the run, and measured when `ts` is inside the window (returns whether).
    pub fn record(&mut self, now: i64, ts: Option<i64>, w: Window) -> bool {
        self.received += 1;
        let sec = ((now - w.t0_us).max(0) / 1_000_000) as usize;
        if self.per_sec_received.len() <= sec {
            self.per_sec_received.resize(sec + 1, 0);
            self.per_sec_lat.resize(sec + 1, Vec::new());
        }
        self.per_sec_received[sec] += 1;
        let Some(ts) = ts else { return false };
        let lat = (now - ts).clamp(0, u32::MAX as i64) as u32;
        self.per_sec_lat[sec].push(lat);
        if ts < w.from_us || ts >= w.to_us {
            return false;
        }
        self.measured += 1;
        self.payload_lat_us.push(lat);
        true
    }
}

/// A thread collecting latencies, and how many records it has counted so far.
pub struct Collector {
    received: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<Result<Collected>>>,
}

impl Collector {
    /// Runs `collect` on a thread of its own; it publishes its count in the counter it is given.
    pub fn spawn(collect: impl FnOnce(&AtomicU64) -> Result<Collected> + Send + 'static) -> Self {
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        let handle = thread::spawn(move || {
            let collected = collect(&counter)?;
            counter.store(collected.received, Ordering::Relaxed);
            Ok(collected)
        });
        Self {
            received,
            handle: Some(handle),
        }
    }

    /// Records counted so far (as often as the collecting thread publishes them).
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Waits for the thread (it must be ending) and returns what it collected.
    pub fn join(mut self) -> Result<Collected> {
        let h = self.handle.take().expect("joined once");
        h.join()
            .map_err(|_| anyhow::anyhow!("latency collector thread panicked"))?
    }
}

/// An independent consumer (no group; assigns every partition from the beginning) that records
/// commit-to-consumer latency for each record as it arrives.
pub struct LatencyConsumer {
    stop: Arc<AtomicBool>,
    collector: Collector,
}

impl LatencyConsumer {
    pub fn start(brokers: &str, topic: &str, window: Window) -> Result<Self> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", "bench-latency")
            .set("enable.auto.commit", "false")
            // BENCH_FETCH_WAIT_MS: how long the broker may hold a fetch with nothing new
            // (a read-committed fetch waits for transaction commits this way).
            .set(
                "fetch.wait.max.ms",
                std::env::var("BENCH_FETCH_WAIT_MS").unwrap_or_else(|_| "100".into()),
            )
            .set("fetch.min.bytes", "1")
            // librdkafka's default, spelled out: the transactional systems are measured as a
            // consumer of their guarantees sees them, when the Kafka transaction commits.
            .set("isolation.level", "read_committed")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        }
        c.assign(&tpl)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let collector = Collector::spawn(move |r2| {
            let mut local = Collected::default();
            let mut last_publish = Instant::now();
            loop {
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                let Some(m) = c.poll(Duration::from_millis(50)) else {
                    r2.store(local.received, Ordering::Relaxed);
                    continue;
                };
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        eprintln!("[bench] consumer error: {e}");
                        continue;
                    }
                };
                let now = now_us();
                let ts = m.payload().and_then(payload_ts);
                if local.record(now, ts, window)
                    && let Some(ct) = m.headers().and_then(|h| {
                        h.iter()
                            .find(|h| h.key == COMMIT_TIME_HEADER)
                            .and_then(|h| h.value)
                            .and_then(|v| std::str::from_utf8(v).ok())
                            .and_then(|v| v.parse::<i64>().ok())
                    })
                {
                    local
                        .commit_lat_us
                        .push((now - ct).clamp(0, u32::MAX as i64) as u32);
                    if let (Some(ts), Some(produced_ms)) = (ts, m.timestamp().to_millis()) {
                        let produced = produced_ms * 1000;
                        local.stages.push(Stages {
                            at_broker: matches!(
                                m.timestamp(),
                                rdkafka::Timestamp::LogAppendTime(_)
                            ),
                            to_commit_us: ct - ts,
                            to_produce_us: produced - ct,
                            to_consumer_us: now - produced,
                        });
                    }
                }
                if last_publish.elapsed() > Duration::from_millis(200) {
                    r2.store(local.received, Ordering::Relaxed);
                    last_publish = Instant::now();
                }
            }
            Ok(local)
        });
        Ok(Self { stop, collector })
    }

    /// Records received so far (updated every 200 ms).
    pub fn received(&self) -> u64 {
        self.collector.received()
    }

    pub fn finish(self) -> Result<Collected> {
        self.stop.store(true, Ordering::Relaxed);
        self.collector.join()
    }
}

/// The `"ts": <digits>` field of a payload, as each system writes it: jsonb's text (`"ts": 1`,
/// the shortest key first), re-marshalled by Go (`"ts":1`), or inside an envelope that carries
/// the payload as an escaped JSON string (outboxx: `\"ts\": 1`).
pub fn payload_ts(v: &[u8]) -> Option<i64> {
    let mut from = 0;
    while let Some(p) = v[from..].windows(2).position(|w| w == b"ts") {
        let at = from + p;
        from = at + 2;
        if at == 0 || v[at - 1] != b'"' {
            continue;
        }
        let mut i = at + 2;
        if v.get(i) == Some(&b'\\') {
            i += 1;
        }
        if v.get(i) != Some(&b'"') || v.get(i + 1) != Some(&b':') {
            continue;
        }
        i += 2;
        while v.get(i) == Some(&b' ') {
            i += 1;
        }
        let digits = v[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            continue;
        }
        return std::str::from_utf8(&v[i..i + digits]).ok()?.parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{id_in_json, payload_ts};

    #[test]
    fn finds_the_event_id_in_an_envelope() {
        let outboxx = br#"{"op":"INSERT","data":{"id":"0b6f2c2e-1f6e-4c36-9d0e-2a9c3b7a1d11","aggregateid":"o-1"}}"#;
        assert_eq!(
            id_in_json(outboxx).as_deref(),
            Some("0b6f2c2e-1f6e-4c36-9d0e-2a9c3b7a1d11")
        );
        assert_eq!(id_in_json(br#"{"id": "a"}"#).as_deref(), Some("a"));
        // An aggregate id or a number is not the event id.
        assert_eq!(id_in_json(br#"{"aggregateid":"x"}"#), None);
        assert_eq!(id_in_json(br#"{"id": 7}"#), None);
    }

    #[test]
    fn finds_the_writer_timestamp_in_jsonb_text() {
        let v = br#"{"ts": 1796043566512618, "items": [{"qty": 8}], "currency": "EUR"}"#;
        assert_eq!(payload_ts(v), Some(1796043566512618));
        assert_eq!(payload_ts(br#"{"n": 1}"#), None);
        // go-pq-cdc-kafka's re-marshalled payload; outboxx's envelope (the payload escaped).
        assert_eq!(payload_ts(br#"{"currency":"EUR","ts":17960}"#), Some(17960));
        let envelope =
            br#"{"op":"INSERT","data":{"payload":"{\"ts\": 17961, \"n\": 1}","tsx":"a"}}"#;
        assert_eq!(payload_ts(envelope), Some(17961));
        assert_eq!(payload_ts(br#"{"posts": 3, "ts": "x"}"#), None);
    }
}
