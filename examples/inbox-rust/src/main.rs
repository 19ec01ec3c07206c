//! The inbox recipe in Rust, following examples/recipes/README.md: consume outbox-relay's
//! records (key = aggregate id, value = `{"amount": …}`, header `id` = event id) and apply each
//! event at most once to `recipe_totals`, with the inbox row in the same transaction
//! (outbox-inbox's `process_once`). The Kafka offset is committed only after the database
//! commit: a crash in between redelivers the record, and the inbox absorbs it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use outbox_inbox::Inbox;
use rdkafka::{
    ClientConfig, Message,
    consumer::{CommitMode, Consumer, StreamConsumer},
    message::{BorrowedMessage, Headers},
};

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("set {name} (see examples/recipes/README.md)"))
}

#[derive(Default)]
struct Figures {
    records: u64,
    applied: u64,
    duplicates: u64,
}

/// What one record asks for; a record without an `id` header is refused, never skipped.
struct Delivery {
    event_id: String,
    aggregate_id: String,
    amount: String,
}

fn parse(m: &BorrowedMessage<'_>) -> Result<Delivery> {
    let at = format!("{}[{}]@{}", m.topic(), m.partition(), m.offset());
    let header = m
        .headers()
        .and_then(|h| h.iter().find(|h| h.key == "id"))
        .and_then(|h| h.value);
    let Some(id) = header else {
        bail!(
            "record {at} has no `id` header: the inbox cannot de-duplicate it, so it is not \
             applied and its offset is not committed; publish it with outbox-relay's default \
             headers (id = the event id)"
        );
    };
    let key = m
        .key()
        .with_context(|| format!("record {at} has no key (the aggregate id)"))?;
    let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap_or_default())
        .with_context(|| format!("record {at}: the value is not JSON"))?;
    let amount = value
        .get("amount")
        .filter(|a| a.is_number())
        .with_context(|| format!("record {at}: the value has no numeric `amount`: {value}"))?;
    Ok(Delivery {
        event_id: String::from_utf8(id.to_vec()).context("the `id` header is not UTF-8")?,
        aggregate_id: String::from_utf8(key.to_vec()).context("the key is not UTF-8")?,
        amount: amount.to_string(),
    })
}

/// One transaction: claim the event in the inbox; apply the effect only if it is new.
async fn apply(
    pg: &mut tokio_postgres::Client,
    inbox: &Inbox,
    consumer: &str,
    d: &Delivery,
) -> Result<bool> {
    let tx = pg.transaction().await?;
    let fresh = inbox.process_once(&tx, consumer, &d.event_id).await?;
    if fresh {
        tx.execute(
            "INSERT INTO recipe_totals (aggregate_id, events, amount) \
             VALUES ($1, 1, $2::text::numeric) \
             ON CONFLICT (aggregate_id) DO UPDATE SET events = recipe_totals.events + 1, \
             amount = recipe_totals.amount + EXCLUDED.amount",
            &[&d.aggregate_id, &d.amount],
        )
        .await
        .context("updating recipe_totals (examples/recipes/schema.sql)")?;
    }
    tx.commit().await.context("COMMIT")?;
    Ok(fresh)
}

async fn connect_pg() -> Result<tokio_postgres::Client> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(env("PGHOST")?)
        .port(env("PGPORT")?.parse().context("PGPORT is not a port")?)
        .user(env("PGUSER")?)
        .dbname(env("PGDATABASE")?);
    if let Ok(pw) = std::env::var("PGPASSWORD") {
        cfg.password(pw);
    }
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .context("connecting to the consumer's database")?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("postgres connection: {e}");
        }
    });
    Ok(client)
}

async fn run(figures: &mut Figures) -> Result<()> {
    let (topic, consumer_name) = (env("TOPIC")?, env("CONSUMER")?);
    let idle = Duration::from_millis(
        std::env::var("IDLE_MS")
            .ok()
            .map(|s| s.parse().context("IDLE_MS is not a number"))
            .transpose()?
            .unwrap_or(3000),
    );
    let mut pg = connect_pg().await?;
    let kafka: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", env("BROKERS")?)
        .set("group.id", env("GROUP")?)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .context("creating the Kafka consumer")?;
    kafka.subscribe(&[&topic]).context("subscribing")?;
    let inbox = Inbox::new();
    // The idle clock starts once partitions are assigned (joining the group takes a moment).
    let mut last = None::<Instant>;
    let started = Instant::now();
    loop {
        let next = tokio::time::timeout(Duration::from_millis(200), kafka.recv()).await;
        let m = match next {
            Ok(m) => m.context("reading from Kafka")?,
            Err(_) => {
                let assigned = kafka.assignment().is_ok_and(|a| a.count() > 0);
                match last {
                    None if assigned => last = Some(Instant::now()),
                    Some(t) if t.elapsed() >= idle => return Ok(()),
                    None if started.elapsed() > Duration::from_secs(30) => bail!(
                        "no partition of {topic:?} assigned after 30 s: check that the topic \
                         exists and that BROKERS is right"
                    ),
                    _ => {}
                }
                continue;
            }
        };
        let d = parse(&m)?;
        figures.records += 1;
        if apply(&mut pg, &inbox, &consumer_name, &d).await? {
            figures.applied += 1;
        } else {
            figures.duplicates += 1;
        }
        kafka
            .commit_message(&m, CommitMode::Sync)
            .context("committing the offset (the event is applied; a redelivery is absorbed)")?;
        last = Some(Instant::now());
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut figures = Figures::default();
    let result = run(&mut figures).await;
    println!(
        "{{\"records\":{},\"applied\":{},\"duplicates\":{}}}",
        figures.records, figures.applied, figures.duplicates
    );
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inbox-rust: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
