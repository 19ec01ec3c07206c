//! The classic polling outbox relay of the seed articles, as a baseline:
//!
//! ```text
//! loop: BEGIN; SELECT … WHERE published_at IS NULL ORDER BY created_at, id LIMIT 100
//!       FOR UPDATE SKIP LOCKED; produce all (acks=all) and wait for every ack;
//!       UPDATE … SET published_at = now() WHERE id = ANY(…); COMMIT
//!       (sleep `idle` after an empty poll)
//! ```
//!
//! At-least-once: any error rolls the transaction back and the rows are claimed again. Records as
//! Debezium's Outbox Event Router makes them: topic `<prefix>.<aggregatetype>`, key `aggregateid`,
//! value the payload text, headers `id` and `eventType`.

use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::{
    ClientConfig,
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};
use tokio::sync::watch;

const CLAIM: &str = "SELECT id::text, aggregatetype, aggregateid, type, payload::text \
       FROM public.outbox \
      WHERE published_at IS NULL \
      ORDER BY created_at, id \
      LIMIT $1 \
        FOR UPDATE SKIP LOCKED";

const MARK: &str =
    "UPDATE public.outbox SET published_at = now() WHERE id = ANY($1::text[]::uuid[])";

#[derive(Debug, Clone, clap::Args)]
pub struct PollArgs {
    /// PostgreSQL port (127.0.0.1, user postgres, database bench).
    #[arg(long, default_value_t = 16432)]
    pub pg_port: u16,
    #[arg(long, default_value = "127.0.0.1:29192")]
    pub brokers: String,
    /// Topic = `<prefix>.<aggregatetype>`.
    #[arg(long, default_value = "outbox.event")]
    pub topic_prefix: String,
    /// Rows claimed per poll.
    #[arg(long, default_value_t = 100)]
    pub batch: i64,
    /// Sleep after an empty poll, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub idle_ms: u64,
    /// Producer linger.ms (Kafka 4 Java client default: 5).
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
}

pub async fn run(args: PollArgs) -> Result<()> {
    let (tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        let _ = tx.send(true);
    });
    let mut client = crate::pg::connect(args.pg_port, crate::pg::DB).await?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", args.linger_ms.to_string())
        .set("client.id", "bench-polling-relay")
        .create()
        .context("creating the producer")?;
    let claim = client.prepare(CLAIM).await?;
    let mark = client.prepare(MARK).await?;
    let idle = Duration::from_millis(args.idle_ms);
    let mut published: u64 = 0;
    while !*stop.borrow() {
        match poll_once(&mut client, &claim, &mark, &producer, &args).await {
            Ok(0) => {
                tokio::select! {
                    _ = tokio::time::sleep(idle) => {}
                    _ = stop.changed() => {}
                }
            }
            Ok(n) => published += n as u64,
            Err(e) => {
                eprintln!("[polling-relay] batch rolled back: {e:#}");
                tokio::time::sleep(idle).await;
            }
        }
    }
    eprintln!("[polling-relay] stopped after {published} events");
    Ok(())
}

async fn poll_once(
    client: &mut tokio_postgres::Client,
    claim: &tokio_postgres::Statement,
    mark: &tokio_postgres::Statement,
    producer: &FutureProducer,
    args: &PollArgs,
) -> Result<usize> {
    let tx = client.transaction().await?;
    let rows = tx.query(claim, &[&args.batch]).await?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    let mut ids: Vec<String> = Vec::with_capacity(rows.len());
    let mut acks = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: String = r.get(0);
        let atype: &str = r.get(1);
        let key: &str = r.get(2);
        let etype: &str = r.get(3);
        let payload: Option<&str> = r.get(4);
        let topic = format!("{}.{atype}", args.topic_prefix);
        let headers = OwnedHeaders::new_with_capacity(2)
            .insert(Header {
                key: "id",
                value: Some(id.as_str()),
            })
            .insert(Header {
                key: "eventType",
                value: Some(etype),
            });
        let mut rec = FutureRecord::to(&topic).key(key).headers(headers);
        if let Some(p) = payload {
            rec = rec.payload(p);
        }
        // Enqueue every record first, then wait for all acks (one produce round trip per batch).
        let mut rec = rec;
        let fut = loop {
            match producer.send_result(rec) {
                Ok(f) => break f,
                Err((e, r)) => {
                    if e.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::QueueFull) {
                        anyhow::bail!("produce: {e}");
                    }
                    rec = r;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        acks.push(fut);
        ids.push(id);
    }
    for f in acks {
        match f.await {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => anyhow::bail!("delivery failed: {e}"),
            Err(_) => anyhow::bail!("delivery future cancelled"),
        }
    }
    tx.execute(mark, &[&ids]).await?;
    tx.commit().await?;
    Ok(rows.len())
}
