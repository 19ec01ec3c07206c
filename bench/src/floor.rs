//! Kafka's own floor: a bare producer (acks=all, idempotent, the relay's compression) writing
//! the same records the outbox writers commit, at the same open-loop rate, to the same topic and
//! latency consumer. What the relay adds to latency is its p99 minus this one's, measured in the
//! same run (issue #15: at most 5 ms at 1k events/s, 10 ms at 10k). Transactional, it is
//! exactly-once's floor: the producer commits back to back (a transaction holds what was due
//! while the last one committed), which no relay commit schedule can beat.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rdkafka::{
    ClientConfig,
    error::{KafkaError, RDKafkaErrorCode},
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord, Producer},
};

use crate::pg::{self, LoadStats, now_us};

/// The floor producer's settings.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub linger_ms: u32,
    /// Commit Kafka transactions back to back.
    pub transactional: bool,
}

/// Produces `rate` records per second for `seconds`: value = a payload of the pool of size
/// `psize` with `ts` set just before the record is handed to the producer, key `o-<n>`, headers
/// `id` and `eventType` as the relay writes them.
pub async fn load(
    pg_port: u16,
    brokers: &str,
    topic: &str,
    rate: f64,
    seconds: f64,
    psize: i32,
    kind: Kind,
) -> Result<LoadStats> {
    let Kind {
        linger_ms,
        transactional,
    } = kind;
    let c = pg::connect(pg_port, pg::DB).await?;
    // The payloads as the relay sends them: jsonb's text, with `"ts": 0` where the writer's
    // clock goes (the latency consumer reads `"ts": <µs>`).
    let bodies: Vec<(String, String)> = c
        .query(
            "SELECT (body || jsonb_build_object('ts', 0))::text FROM public.bench_payloads \
             WHERE size = $1 ORDER BY i",
            &[&psize],
        )
        .await?
        .iter()
        .map(|r| {
            let text: String = r.get(0);
            let at = text.find("\"ts\": 0").context("payload without ts")?;
            Ok((
                text[..at].to_string(),
                text[at + "\"ts\": 0".len()..].to_string(),
            ))
        })
        .collect::<Result<_>>()?;
    anyhow::ensure!(!bodies.is_empty(), "no payloads of size {psize}");
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", linger_ms.to_string())
        .set("compression.type", "lz4")
        .set("client.id", "bench-floor");
    if transactional {
        config.set("transactional.id", format!("bench-floor-{topic}"));
    }
    let producer: FutureProducer = config.create().context("creating the floor producer")?;
    if transactional {
        let p = producer.clone();
        tokio::task::spawn_blocking(move || {
            p.init_transactions(Duration::from_secs(30))?;
            p.begin_transaction()
        })
        .await?
        .context("starting the floor's first transaction")?;
    }
    let mut open = 0u64;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let (mut sent, mut late, mut failed) = (0u64, 0u64, 0u64);
    let total = (rate * seconds).round() as u64;
    let mut deliveries = Vec::with_capacity(total as usize);
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while sent < total {
        tick.tick().await;
        let due = ((t0.elapsed().as_secs_f64() * rate) as u64).min(total);
        while sent < due {
            if t0.elapsed().as_secs_f64() - sent as f64 / rate > 0.010 {
                late += 1;
            }
            let (head, tail) = &bodies[rng.random_range(0..bodies.len())];
            let value = format!("{head}\"ts\": {}{tail}", now_us());
            let key = format!("o-{}", rng.random_range(0..100_000));
            let id = uuid::Uuid::new_v4().to_string();
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: "id",
                    value: Some(&id),
                })
                .insert(Header {
                    key: "eventType",
                    value: Some("OrderCreated"),
                });
            let mut record = FutureRecord::to(topic)
                .key(&key)
                .payload(&value)
                .headers(headers);
            loop {
                match producer.send_result(record) {
                    Ok(d) => {
                        deliveries.push(d);
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err((e, _)) => return Err(e).context("floor producer"),
                }
            }
            sent += 1;
            open += 1;
        }
        if transactional && open > 0 {
            let p = producer.clone();
            tokio::task::spawn_blocking(move || {
                // librdkafka's own flush first, as the relay's commit does: rdkafka's
                // commit_transaction flushes by polling in 100 ms steps.
                // SAFETY: the handle is `p`'s own and lives as long as `p`; rd_kafka_flush is
                // thread-safe.
                unsafe { rdkafka::bindings::rd_kafka_flush(p.client().native_ptr(), 30_000) };
                p.commit_transaction(Duration::from_secs(30))?;
                p.begin_transaction()
            })
            .await?
            .context("floor transaction")?;
            open = 0;
        }
    }
    for d in deliveries {
        if !matches!(d.await, Ok(Ok(_))) {
            failed += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(LoadStats {
        target_rate: rate,
        seconds: secs,
        sent,
        failed,
        late,
        achieved_rate: sent as f64 / secs,
    })
}
