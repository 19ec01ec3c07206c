//! The end-to-end tests' own Kafka consumer loop: reads whole topics from the beginning by
//! partition assignment (no consumer group), scans metadata for partitions that appear, and
//! keeps a trace of where a consume's time went.
//!
//! Invariant: between two metadata scans the loop polls for at least [`SCAN_INTERVAL`]. A scan
//! can wait behind the broker's long-polled fetch (up to `fetch.wait.max.ms`, 500 ms, once every
//! partition is read to its end), and when the next scan was timed from the last one's start it
//! came due at once, leaving one poll, so one record, per scan: issue 40 found a green run
//! reading its last partition at two records a second for 15 s (48 s in another), every record
//! already in Kafka and in librdkafka's queue, and a shorter timeout would have called them lost.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, Message, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};

use super::kafka::Rec;

/// The least time the loop polls between two metadata scans (see the invariant above).
const SCAN_INTERVAL: Duration = Duration::from_millis(500);

pub(super) fn config(brokers: &str, props: &[(&str, &str)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("group.id", "relay-tests-unused")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed");
    for (k, v) in props {
        c.set(*k, *v);
    }
    c
}

/// The consumer's own log: with `RELAY_TEST_CONSUMER_DEBUG` set (librdkafka's `debug`
/// contexts, e.g. `fetch,msg,protocol`), librdkafka's lines go to
/// `target/e2e/consumer-debug.log`, each with the consuming thread's name.
struct ConsumerLog {
    test: String,
}

impl rdkafka::ClientContext for ConsumerLog {
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        use std::io::Write;
        let path = super::repo_root().join("target/e2e/consumer-debug.log");
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(
                f,
                "{:?} {} {fac} {line}",
                std::time::SystemTime::now(),
                self.test
            );
        }
    }
}

impl rdkafka::consumer::ConsumerContext for ConsumerLog {}

/// Where a consume's time went: what the topics held when it began, and when records came.
pub(super) struct Trace {
    started: Instant,
    /// Offsets of the topics' partitions found by the first metadata scan, at that scan
    /// (records and, under transactions, their markers) and its time.
    offsets_at_first_scan: i64,
    first_scan_s: f64,
    /// Records received in each second of the consume.
    per_second: Vec<usize>,
    /// Metadata scans that took a second or more.
    slow_scans: usize,
    /// Per partition: the second of its first record, and its records.
    partitions: std::collections::BTreeMap<i32, (u64, usize)>,
}

impl std::fmt::Display for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds: Vec<String> = (self.per_second.iter().enumerate())
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{s}s:{n}"))
            .collect();
        let partitions: Vec<String> = (self.partitions.iter())
            .map(|(p, (first, n))| format!("p{p} from {first}s:{n}"))
            .collect();
        write!(
            f,
            "{} offsets in Kafka at {:.1} s; records by second {}; by partition {}; {} slow \
             metadata scans",
            self.offsets_at_first_scan,
            self.first_scan_s,
            seconds.join(" "),
            partitions.join(" "),
            self.slow_scans
        )
    }
}

pub(super) fn consume_traced(
    brokers: &str,
    props: &[(&str, &str)],
    topics: &[String],
    timeout: Duration,
    scan_pause: Duration,
    done: impl Fn(&[Rec]) -> bool,
) -> (Vec<Rec>, Trace) {
    let mut trace = Trace {
        started: Instant::now(),
        offsets_at_first_scan: 0,
        first_scan_s: 0.0,
        per_second: Vec::new(),
        slow_scans: 0,
        partitions: Default::default(),
    };
    let mut first_scan = true;
    let deadline = Instant::now() + timeout;
    let mut cfg = config(brokers, props);
    if let Ok(contexts) = std::env::var("RELAY_TEST_CONSUMER_DEBUG") {
        cfg.set("debug", contexts)
            .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let c: BaseConsumer<ConsumerLog> = cfg
        .create_with_context(ConsumerLog { test })
        .expect("consumer");
    // (topic, partition) pairs assigned so far. Metadata is read again every half second, so
    // partitions that were not visible yet (a topic being auto-created) are picked up, and new
    // ones are added incrementally: partitions already assigned keep their position.
    let mut assigned: std::collections::HashSet<(String, i32)> = Default::default();
    let mut next_scan = Instant::now();
    let mut out = Vec::new();
    loop {
        if Instant::now() >= next_scan {
            let mut tpl = TopicPartitionList::new();
            let scan = Instant::now();
            for t in topics {
                if let Ok(md) = c.fetch_metadata(Some(t), Duration::from_secs(2))
                    && let Some(mt) = md.topics().first()
                    && mt.error().is_none()
                {
                    for p in mt.partitions() {
                        if assigned.insert((t.clone(), p.id())) {
                            tpl.add_partition_offset(t, p.id(), rdkafka::Offset::Beginning)
                                .unwrap();
                            if first_scan
                                && let Ok((_, high)) =
                                    c.fetch_watermarks(t, p.id(), Duration::from_secs(1))
                            {
                                trace.offsets_at_first_scan += high;
                            }
                        }
                    }
                }
            }
            // `scan_pause`: a test's stand-in for a scan waiting behind the broker's fetch.
            std::thread::sleep(scan_pause);
            if first_scan {
                trace.first_scan_s = trace.started.elapsed().as_secs_f64();
                first_scan = false;
            }
            if scan.elapsed() >= Duration::from_secs(1) {
                trace.slow_scans += 1;
            }
            // From the scan's end (the module's invariant).
            next_scan = Instant::now() + SCAN_INTERVAL;
            if tpl.count() > 0 {
                c.incremental_assign(&tpl).unwrap();
            }
        }
        let all_topics_seen = topics.iter().all(|t| assigned.iter().any(|(a, _)| a == t));
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.expect("consumer error");
            let mut headers = HashMap::new();
            if let Some(h) = m.headers() {
                for i in 0..h.count() {
                    let hd = h.get(i);
                    headers.insert(
                        hd.key.to_string(),
                        hd.value
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                            .unwrap_or_default(),
                    );
                }
            }
            let second = trace.started.elapsed().as_secs() as usize;
            if trace.per_second.len() <= second {
                trace.per_second.resize(second + 1, 0);
            }
            trace.per_second[second] += 1;
            (trace.partitions.entry(m.partition()))
                .or_insert((second as u64, 0))
                .1 += 1;
            out.push(Rec {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
                timestamp_ms: m.timestamp().to_millis().unwrap_or(0),
                key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                value: m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
                raw_value: m
                    .payload()
                    .filter(|v| std::str::from_utf8(v).is_err())
                    .map(<[u8]>::to_vec),
                headers,
            });
            // While records keep coming the loop polls on, but not past the deadline: a
            // consume is bounded by its timeout however its records trickle in (the ~8 minute
            // green run of issue 40 was a 120 s consume reading two records a second).
            if Instant::now() <= deadline {
                continue;
            }
        }
        if (all_topics_seen && done(&out)) || Instant::now() > deadline {
            return (out, trace);
        }
    }
}

/// The invariant, with every metadata scan made to last 700 ms (longer than [`SCAN_INTERVAL`],
/// as a scan behind a long-polled fetch can): 1,500 records already in Kafka are read within
/// seconds. With the next scan timed from the last one's start, as before, the loop read one
/// record per scan: about 28 by the 20 s deadline it now keeps (before, it read on past it, for
/// as long as records came).
#[tokio::test]
async fn slow_metadata_scans_leave_the_loop_time_to_poll() {
    use rdkafka::{
        message::{Header, OwnedHeaders},
        producer::{FutureProducer, FutureRecord},
    };
    const RECORDS: usize = 1500;
    let topic = format!("t_consumerscan_{:08x}", rand::random::<u32>());
    super::kafka::create_topic(&topic, 3).await;
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", super::kafka_brokers())
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let ids: Vec<(String, String)> = (0..RECORDS)
        .map(|i| (format!("scan-{i}"), format!("k{}", i % 7)))
        .collect();
    let sends = ids.iter().map(|(id, key)| {
        let record = FutureRecord::to(&topic)
            .key(key.as_str())
            .payload("{}")
            .headers(OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_str()),
            }));
        let p = &p;
        async move { p.send(record, Duration::from_secs(30)).await.is_ok() }
    });
    let sent = futures::future::join_all(sends).await;
    assert!(sent.iter().all(|ok| *ok), "every record produced");

    let t = topic.clone();
    let (recs, trace) = tokio::task::spawn_blocking(move || {
        consume_traced(
            &super::kafka_brokers(),
            &[],
            &[t],
            Duration::from_secs(20),
            Duration::from_millis(700),
            |r| r.len() >= RECORDS,
        )
    })
    .await
    .unwrap();
    let took = trace.started.elapsed();
    assert_eq!(recs.len(), RECORDS, "{trace}");
    assert!(took < Duration::from_secs(8), "{took:?}: {trace}");
}
