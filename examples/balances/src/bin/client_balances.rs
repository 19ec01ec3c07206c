//! The client-balances service: consumes `BalanceChanged` and keeps per-client totals in its own
//! database. Each record is one transaction: claim the event id in the inbox (outbox-inbox's
//! `process_once`), apply the delta only if the claim is new, commit; then commit the offset.
//! A crash between the database commit and the offset commit redelivers the record, and the
//! inbox absorbs it; so does a replay of the topic by a new consumer group.
//!
//! Environment: the `PG*` connection, `BROKERS`, `TOPIC`, `GROUP`, `CONSUMER` (inbox name,
//! default `client-balances`), `IDLE_MS` (exit after no record
//! for this long once partitions are assigned; default 3000, 0 = never). SIGTERM or SIGINT
//! stops it. Fault injection for the tests: `CRASH_AFTER_COMMITS=N` exits (code 42) right after
//! the N-th database commit, before that record's offset commit. On exit one line on stdout:
//! `{"records":N,"applied":A,"duplicates":D,"offset_commit_failures":F}`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use balances::{BalanceChanged, connect_pg, env, env_or};
use outbox_inbox::Inbox;
use rdkafka::{
    ClientConfig, Message,
    consumer::{CommitMode, Consumer, StreamConsumer},
    message::{BorrowedMessage, Headers},
};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Default)]
struct Figures {
    records: u64,
    applied: u64,
    duplicates: u64,
    offset_commit_failures: u64,
}

impl Figures {
    fn print(&self) {
        println!(
            "{{\"records\":{},\"applied\":{},\"duplicates\":{},\"offset_commit_failures\":{}}}",
            self.records, self.applied, self.duplicates, self.offset_commit_failures
        );
    }
}

fn parse(m: &BorrowedMessage<'_>) -> Result<(String, BalanceChanged)> {
    let at = format!("{}[{}]@{}", m.topic(), m.partition(), m.offset());
    let Some(id) = m
        .headers()
        .and_then(|h| h.iter().find(|h| h.key == "id"))
        .and_then(|h| h.value)
    else {
        bail!("record {at} has no `id` header: it cannot be de-duplicated; stopping (not skipped)");
    };
    let change: BalanceChanged = serde_json::from_slice(m.payload().unwrap_or_default())
        .with_context(|| format!("record {at} is not a BalanceChanged payload"))?;
    Ok((String::from_utf8(id.to_vec())?, change))
}

async fn apply(
    pg: &mut tokio_postgres::Client,
    inbox: &Inbox,
    consumer: &str,
    event_id: &str,
    change: &BalanceChanged,
) -> Result<bool> {
    let tx = pg.transaction().await?;
    let fresh = inbox.process_once(&tx, consumer, event_id).await?;
    if fresh {
        tx.execute(
            "INSERT INTO client_totals (client_id, total, events) VALUES ($1, $2, 1) \
             ON CONFLICT (client_id) DO UPDATE SET total = client_totals.total + EXCLUDED.total, \
             events = client_totals.events + 1",
            &[&change.client, &change.delta],
        )
        .await
        .context("updating client_totals (examples/balances/client_balances.sql)")?;
    }
    tx.commit().await.context("COMMIT")?;
    Ok(fresh)
}

async fn run(figures: &mut Figures) -> Result<()> {
    let consumer_name = env("CONSUMER").unwrap_or_else(|_| "client-balances".into());
    let idle = Duration::from_millis(env_or("IDLE_MS", 3000)?);
    let crash_after: Option<u64> = std::env::var("CRASH_AFTER_COMMITS")
        .ok()
        .map(|v| v.parse().context("CRASH_AFTER_COMMITS is not a number"))
        .transpose()?;
    let mut pg = connect_pg().await?;
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", env("BROKERS")?)
        .set("group.id", env("GROUP")?)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        // A crashed instance's partitions move to the others after this long (the broker's
        // minimum by default).
        .set("session.timeout.ms", "6000");
    let kafka: StreamConsumer = cfg.create().context("creating the Kafka consumer")?;
    kafka.subscribe(&[&env("TOPIC")?]).context("subscribing")?;
    let inbox = Inbox::new();
    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    let mut last = None::<Instant>;
    let mut commits = 0u64;
    loop {
        let m = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            next = tokio::time::timeout(Duration::from_millis(200), kafka.recv()) => match next {
                Ok(Ok(m)) => m,
                Ok(Err(e @ rdkafka::error::KafkaError::MessageConsumptionFatal(_))) => {
                    return Err(e).context("the Kafka consumer failed for good");
                }
                Ok(Err(e)) => {
                    // The broker away (restarting): the client reconnects by itself.
                    eprintln!("client-balances: kafka: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(_) => {
                    let assigned = kafka.assignment().is_ok_and(|a| a.count() > 0);
                    match last {
                        None if assigned => last = Some(Instant::now()),
                        Some(t) if !idle.is_zero() && t.elapsed() >= idle => return Ok(()),
                        _ => {}
                    }
                    continue;
                }
            },
        };
        let (event_id, change) = parse(&m)?;
        figures.records += 1;
        if apply(&mut pg, &inbox, &consumer_name, &event_id, &change).await? {
            figures.applied += 1;
        } else {
            figures.duplicates += 1;
        }
        commits += 1;
        if crash_after == Some(commits) {
            figures.print();
            eprintln!(
                "client-balances: CRASH_AFTER_COMMITS={commits}: exiting before the offset commit"
            );
            std::process::exit(42);
        }
        if let Err(e) = kafka.commit_message(&m, CommitMode::Async) {
            // Applied and committed in PostgreSQL; a redelivery is absorbed by the inbox.
            eprintln!("client-balances: offset commit failed ({e}); the record may come again");
            figures.offset_commit_failures += 1;
        }
        last = Some(Instant::now());
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut figures = Figures::default();
    let result = run(&mut figures).await;
    figures.print();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("client-balances: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
