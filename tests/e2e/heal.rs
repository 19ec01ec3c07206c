//! `setup --recreate-slot --heal`: a slot lost during a Kafka outage (`max_slot_wal_keep_size`)
//! with writers running throughout, its gap published from the outbox table before `run`
//! streams from the new slot, in both delivery modes. Other causes: `heal_other_causes`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use crate::support::{
    TestDb, broker,
    check::{self, note},
    cluster::PgCluster,
    connect, kafka,
    relay::Relay,
    writer::{self, Written},
};

/// Writers committing three events of one aggregate per transaction (20 aggregates) until
/// `stop`, on their own connections; what committed. Writer 0 writes inside a savepoint, so
/// its rows carry a subtransaction's xid: the heal must file them under their top-level
/// transaction, the one the new slot names, or it would heal and stream them both.
fn writers(
    conninfo: String,
    n: usize,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Written>>> {
    (0..n)
        .map(|w| {
            let (conninfo, stop) = (conninfo.clone(), stop.clone());
            tokio::spawn(async move {
                let mut c = connect(&conninfo).await;
                let mut done = Vec::new();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let agg = format!("agg-{}", (i * 7 + w * 3) % 20);
                    i += 1;
                    let mut tx = c.transaction().await.unwrap();
                    let mut events = Vec::new();
                    if w == 0 {
                        let sub = tx.savepoint("sub").await.unwrap();
                        for _ in 0..3 {
                            events
                                .push(writer::insert_event(&sub, "order", &agg, w).await.unwrap());
                        }
                        sub.commit().await.unwrap();
                    } else {
                        for _ in 0..3 {
                            events.push(writer::insert_event(&tx, "order", &agg, w).await.unwrap());
                        }
                    }
                    tx.commit().await.unwrap();
                    done.extend(events);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                done
            })
        })
        .collect()
}

async fn joined(handles: Vec<tokio::task::JoinHandle<Vec<Written>>>) -> Vec<Written> {
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// The `key=value` field of the last `heal_done` line.
pub(crate) fn heal_field(log: &str, key: &str) -> u64 {
    event_field(log, events::HEAL_DONE, key)
}

/// `key=` of the last log line of `event`, as a number.
fn event_field(log: &str, event: &str, key: &str) -> u64 {
    log.lines()
        .rfind(|l| l.contains(event))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {event}:\n{log}"))
}

/// Prints, for each aggregate whose first deliveries are out of order, the records around the
/// first violation: seq, partition offset, commit-lsn header (0/0: healed), commit time.
fn explain_order(written: &[Written], got: &[kafka::Rec]) {
    let seq: std::collections::HashMap<&str, (&str, i32)> = written
        .iter()
        .map(|w| (w.id.as_str(), (w.aggregate.as_str(), w.seq)))
        .collect();
    let mut sorted: Vec<&kafka::Rec> = got.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut seen = std::collections::HashSet::new();
    let mut by_agg: std::collections::HashMap<&str, Vec<(i32, &kafka::Rec)>> = Default::default();
    for r in sorted {
        let Some((agg, s)) = seq.get(r.header("id")) else {
            continue;
        };
        if seen.insert(r.header("id").to_string()) {
            by_agg.entry(agg).or_default().push((*s, r));
        }
    }
    for (agg, recs) in by_agg {
        if let Some(i) = recs.windows(2).position(|w| w[1].0 != w[0].0 + 1) {
            let from = i.saturating_sub(3);
            for (s, r) in &recs[from..(i + 5).min(recs.len())] {
                eprintln!(
                    "order {agg}: seq {s} offset {} commit-lsn {} time {}",
                    r.offset,
                    r.header("outbox-relay.commit-lsn"),
                    r.header("outbox-relay.commit-time-us")
                );
            }
        }
    }
}

/// Writers run throughout; Kafka is cut; WAL passes a small `max_slot_wal_keep_size` and the
/// slot is lost; Kafka comes back; the heal publishes the gap; `run` streams on. Every event
/// arrives, per-key order intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_lost_while_kafka_was_down_is_healed_with_writers_running() {
    lost_slot_healed(false, 25601, 26600).await;
}

/// The same in exactly-once mode, read committed: no duplicate either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_slot_lost_while_kafka_was_down_is_healed_without_duplicates() {
    lost_slot_healed(true, 25603, 26610).await;
}

/// PostgreSQL on `pg_port`, a broker on `broker_port` (+1, +2) behind a proxy on `+4`.
async fn lost_slot_healed(exactly_once: bool, pg_port: u16, broker_port: u16) {
    let cluster = PgCluster::start(
        pg_port,
        "-c track_commit_timestamp=on -c max_slot_wal_keep_size=32MB",
    );
    let (_broker, kafka_proxy) = broker::behind_proxy(broker_port, broker_port + 4).await;
    let direct = format!("127.0.0.1:{}", broker_port + 2);
    let db = TestDb::new_on(&cluster.base(), cluster.port, "heal").await;
    // The heal reads the commit LSNs of whatever the WAL still holds of the gap (issue 44).
    db.client
        .batch_execute("CREATE EXTENSION pg_walinspect")
        .await
        .expect("pg_walinspect (PostgreSQL 15+ contrib)");
    let (txn, mode) = if exactly_once {
        (
            format!("transactional_id = \"outbox-relay-{}\"\n", db.name),
            "delivery = \"exactly-once\"\n",
        )
    } else {
        (String::new(), "")
    };
    let test = if exactly_once {
        "heal::exactly_once_a_slot_lost_while_kafka_was_down_is_healed_without_duplicates"
    } else {
        "heal::a_slot_lost_while_kafka_was_down_is_healed_with_writers_running"
    };
    let cfg = db
        .relay_config(&format!(
            "{txn}{}\n[relay]\n{mode}restart_backoff_max_ms = 2000\n\n[monitor]\npoll_interval_ms = 500\n",
            db.outbox_section()
        ))
        .replace(
            &format!("brokers = \"{}\"", crate::support::kafka_brokers()),
            &format!("brokers = \"127.0.0.1:{}\"", broker_port + 4),
        )
        .replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 2000\n");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let stop = Arc::new(AtomicBool::new(false));
    let handles = writers(db.conninfo(), 4, stop.clone());
    // Streaming for a while: checkpoints are written.
    tokio::time::sleep(Duration::from_secs(4)).await;
    kafka_proxy.cut();
    let cut_at = Instant::now();
    // Thousands of events while Kafka is away.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        db.write_wal_until_slot_lost(60).await,
        "the slot never reached wal_status = lost"
    );
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("wal_status = lost"), "{log}");
    kafka_proxy.heal();
    let (exit, heal_log) =
        Relay::once(&db.name, &cfg, &["setup", "--recreate-slot", "--heal"], &[]);
    assert_eq!(exit.code(), Some(0), "{heal_log}");
    assert!(heal_log.contains(events::SLOT_RECREATED), "{heal_log}");
    let (healed, doubtful, streamed, in_kafka, by_sub) = (
        heal_field(&heal_log, "healed"),
        heal_field(&heal_log, "doubtful"),
        heal_field(&heal_log, "streamed"),
        heal_field(&heal_log, "in_kafka"),
        heal_field(&heal_log, "streamed_by_subtransactions"),
    );
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let written = joined(handles).await;
    let topic = db.topic("order");
    let expect = written.len();
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until_from(&direct, &[topic], Duration::from_secs(90), |r| {
            r.iter()
                .map(|r| r.header("id"))
                .collect::<std::collections::HashSet<_>>()
                .len()
                >= expect
        })
    })
    .await
    .unwrap();
    relay.terminate(Duration::from_secs(30));
    let f = check::check(test, |t| db.topic(t), &written, &got);
    let republished = got
        .iter()
        .filter(|r| r.header("outbox-relay.commit-lsn") == "0/0")
        .count();
    // What the heal said of the commit LSNs: read from pg_wal for `known` of its `rows`; the
    // others' commit records went with the lost WAL, and only those may carry 0/0.
    let (rows, known) = (
        event_field(&heal_log, events::COMMIT_LSNS_READ, "rows"),
        event_field(&heal_log, events::COMMIT_LSNS_READ, "known"),
    );
    note(&format!(
        "heal ({}): {} events written by 4 writers throughout, Kafka cut for {} s, slot lost; \
         healed {healed} rows from the table ({doubtful} within the margin), {in_kafka} found in \
         Kafka and left out, {streamed} rows left to the new slot ({by_sub} of them written by \
         subtransactions); delivered {}, lost {}, \
         duplicates {}, order violations {}; commit LSNs read from pg_wal for {known} of the \
         {rows} rows the heal read, {republished} records with commit-lsn 0/0",
        if exactly_once {
            "exactly-once"
        } else {
            "at-least-once"
        },
        f.written,
        cut_at.elapsed().as_secs(),
        f.delivered,
        f.lost,
        f.duplicated,
        f.order_violations
    ));
    if f.order_violations > 0 {
        explain_order(&written, &got);
    }
    if exactly_once {
        f.assert_exactly_once("heal after a lost slot, exactly-once");
    } else {
        f.assert_nothing_lost_or_reordered("heal after a lost slot");
    }
    assert!(healed > 0, "the gap had rows: {heal_log}");
    // The window the subtransactions test: rows of writer 0 the new slot streams, committed
    // after its start and before the heal's snapshot (48 and 123 in the first runs).
    assert!(
        by_sub > 0,
        "no row written by a subtransaction fell to the new slot: {heal_log}"
    );
    // The heal read LSNs for every row it considered, the ones it then found in Kafka too.
    let unknown = rows - known;
    assert!(
        (unknown.saturating_sub(in_kafka)..=unknown).contains(&(republished as u64)),
        "{republished} records with commit-lsn 0/0, but the heal knew no commit LSN for \
         {unknown} rows, {in_kafka} of which it found in Kafka"
    );
    assert!(
        known > 0,
        "the end of the gap is still in pg_wal: {heal_log}"
    );
    db.cleanup().await;
}
