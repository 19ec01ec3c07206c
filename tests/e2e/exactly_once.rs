//! Checkpoints and the skip after a start, against the real servers.
//!
//! A *rewind* is made deterministic with a copy of the slot: `pg_copy_logical_replication_slot`
//! taken before the events, put back in the slot's place after the relay published them. The
//! relay then finds the slot behind what Kafka holds, exactly as after a PostgreSQL crash that
//! lost the slot's in-memory position, and must skip what the checkpoint covers: no duplicate
//! for a read-committed consumer, nothing lost. The same copy with a changed `[[outbox]]`
//! mapping, and a restored copy of the whole data directory, are changed histories the relay
//! must refuse without publishing or confirming anything.

use std::time::Duration;

use outbox_relay::telemetry::events;

use crate::support::{TestDb, check, cluster::PgCluster, connect, kafka, relay::Relay, writer};

/// Own cluster of the restored-snapshot test (its data directory is copied and put back).
const SNAPSHOT_PG_PORT: u16 = 25475;

fn config(db: &TestDb, delivery: &str, extra: &str) -> String {
    let txn = if delivery == "exactly-once" && !extra.contains("transactional_id") {
        format!("transactional_id = \"outbox-relay-{}\"\n", db.name)
    } else {
        String::new()
    };
    // At-least-once is the default: left unsaid, the config also runs builds before checkpoints
    // (RELAY_TEST_BIN with RELAY_TEST_NO_CHECKPOINT_TOPIC=1), for comparison.
    let mode = if delivery == "at-least-once" {
        String::new()
    } else {
        format!("delivery = \"{delivery}\"\n")
    };
    let split = if delivery == "at-least-once" {
        ""
    } else {
        "max_transaction_records = 10\n"
    };
    db.relay_config(&format!(
        "{txn}{split}{extra}{}\n[relay]\n{mode}status_interval_ms = 200\nrestart_backoff_initial_ms = 100\n",
        db.outbox_section()
    ))
}

/// Single-event transactions, then one transaction of 25 events interleaved with rows of
/// another table (split across Kafka transactions of 10), then `tail` single-event ones.
async fn write_events(db: &TestDb, tag: &str, tail: usize) -> Vec<writer::Written> {
    let mut c = connect(&db.conninfo()).await;
    let mut out = Vec::new();
    for i in 0..4 {
        let tx = c.transaction().await.unwrap();
        out.push(
            writer::insert_event(&tx, "order", &format!("{tag}-s{i}"), 0)
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    let tx = c.transaction().await.unwrap();
    for i in 0..25 {
        out.push(
            writer::insert_event(&tx, "order", &format!("{tag}-big{}", i % 3), 0)
                .await
                .unwrap(),
        );
        tx.execute("INSERT INTO business(note) VALUES ('x')", &[])
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    for i in 0..tail {
        let tx = c.transaction().await.unwrap();
        out.push(
            writer::insert_event(&tx, "order", &format!("{tag}-t{i}"), 0)
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    out
}

/// Publishes, rewinds the slot to before everything, restarts: returns the figures.
async fn rewound(delivery: &str, test: &str) -> check::Figures {
    let db = TestDb::new(test).await;
    let cfg = config(&db, delivery, "");
    let copy = format!("{}_copy", db.name);
    // The relay creates the slot; the copy keeps its position from before any event.
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    relay.terminate(Duration::from_secs(30));
    db.copy_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let mut written = write_events(&db, "a", 3).await;
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(end, Duration::from_secs(60)).await;
    let status = relay.terminate(Duration::from_secs(30));
    assert!(status.success(), "{}", relay.log_text());

    db.rewind_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    written.extend(write_events(&db, "b", 2).await);
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check(test, |t| db.topic(t), &written, &got);
    let log = relay.log_text();
    assert!(log.contains(events::CHECKPOINT_FOUND), "{log}");
    assert!(log.contains(events::CHECKPOINT_SKIP_DONE), "{log}");
    relay.terminate(Duration::from_secs(30));
    db.drop_slot(&copy).await;
    db.cleanup().await;
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_rewound_slot_is_skipped_exactly() {
    let f = rewound("exactly-once", "eos_rewind").await;
    f.assert_nothing_lost_or_reordered("after a rewind");
    assert_eq!(
        f.duplicated, 0,
        "exactly-once re-sent events after a rewind: {f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_skips_what_the_checkpoint_covers_after_a_rewind() {
    // Without checkpoints every one of the 32 events before the rewind is sent again.
    let f = rewound("at-least-once", "alo_rewind").await;
    f.assert_nothing_lost_or_reordered("after a rewind");
    assert_eq!(
        f.duplicated, 0,
        "at-least-once re-sent acknowledged events: {f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_mapping_below_the_checkpoint_is_refused() {
    let db = TestDb::new("eos_shifted").await;
    let cfg = config(&db, "exactly-once", "");
    let copy = format!("{}_copy", db.name);
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    relay.terminate(Duration::from_secs(30));
    db.copy_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let written = write_events(&db, "a", 1).await;
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    relay.terminate(Duration::from_secs(30));
    db.rewind_slot(&copy).await;
    let before = db.confirmed_flush().await.unwrap();

    // The event id now comes from another column: the checkpoint's change no longer matches.
    let shifted = cfg.replace(
        &db.outbox_section(),
        &format!(
            "{}headers = {{ id = \"aggregateid\", eventType = \"type\" }}\n",
            db.outbox_section()
        ),
    );
    assert_ne!(shifted, cfg);
    let mut relay = Relay::start(&db.name, &shifted);
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("history changed"), "{log}");
    assert!(
        log.contains("id:a-"),
        "names the fingerprint it found: {log}"
    );
    assert_eq!(
        db.confirmed_flush().await.unwrap(),
        before,
        "nothing confirmed"
    );
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(10), usize::MAX).await;
    assert_eq!(got.len(), written.len(), "nothing published again");

    // At-least-once never stops on a checkpoint: it streams again from the slot and re-sends.
    let alo = shifted.replace(
        "delivery = \"exactly-once\"",
        "delivery = \"at-least-once\"",
    );
    let mut relay = Relay::streaming(&db.name, &alo).await;
    relay
        .wait_log(events::CHECKPOINT_IGNORED, Duration::from_secs(30))
        .await;
    let (topics, n) = (vec![db.topic("order")], 2 * written.len());
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&topics, Duration::from_secs(60), |r| r.len() >= n)
    })
    .await
    .unwrap();
    assert_eq!(
        got.len(),
        2 * written.len(),
        "every event sent again, none lost"
    );
    relay.terminate(Duration::from_secs(30));
    db.drop_slot(&copy).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_snapshot_is_refused() {
    let cluster = PgCluster::start(SNAPSHOT_PG_PORT, "");
    let db = TestDb::new_on(&cluster.base(), SNAPSHOT_PG_PORT, "eos_snapshot").await;
    let cfg = config(&db, "exactly-once", "");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let mut written = write_events(&db, "a", 0).await;
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    relay.terminate(Duration::from_secs(30));
    cluster.stop("fast");
    cluster.snapshot();
    cluster.restart();

    // History B: published, then lost by restoring the snapshot.
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let db = db.reconnect().await;
    written.extend(write_events(&db, "b", 2).await);
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    relay.terminate(Duration::from_secs(30));
    cluster.stop("fast");
    cluster.restore();
    cluster.restart();

    // History C at the same LSNs: the relay must stop before publishing any of it.
    let db = db.reconnect().await;
    let before = db.confirmed_flush().await.unwrap();
    let mut relay = Relay::start(&db.name, &cfg);
    let mut c_events = 0;
    let status = loop {
        if let Some(status) = relay.wait(Duration::from_millis(300)) {
            break status;
        }
        assert!(c_events < 200, "still running:\n{}", relay.log_text());
        write_events(&db, &format!("c{c_events}"), 0).await;
        c_events += 1;
    };
    let log = relay.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("history changed"), "{log}");
    assert_eq!(
        db.confirmed_flush().await.unwrap(),
        before,
        "nothing confirmed"
    );
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(10), usize::MAX).await;
    let f = check::check("eos_restored_snapshot", |t| db.topic(t), &written, &got);
    assert_eq!(
        f.unexpected, 0,
        "no event of history C was published: {f:?}"
    );
    assert_eq!(f.lost, 0);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_topic_with_other_settings_is_refused_in_exactly_once_mode() {
    let db = TestDb::new("eos_topic").await;
    let topic = format!("{}.checkpoints", db.name);
    kafka::create_topic(&topic, 3).await;
    let cfg = config(&db, "exactly-once", "");
    let mut relay = Relay::start(&db.name, &cfg);
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("3 partitions"), "{log}");
    assert!(log.contains(&topic), "{log}");

    // At-least-once goes on without checkpoints and says so.
    let cfg = config(&db, "at-least-once", "");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let log = relay.log_text();
    assert!(log.contains(events::CHECKPOINT_TOPIC_UNUSABLE), "{log}");
    let mut c = connect(&db.conninfo()).await;
    let tx = c.transaction().await.unwrap();
    let w = writer::insert_event(&tx, "order", "k", 0).await.unwrap();
    tx.commit().await.unwrap();
    db.check_order_topic("alo_unusable_checkpoints", &[w], Duration::from_secs(30))
        .await
        .assert_nothing_lost_or_reordered("");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_writes_checkpoints_while_streaming() {
    let db = TestDb::new("alo_ckpt").await;
    let cfg = config(&db, "at-least-once", "");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let written = write_events(&db, "a", 3).await;
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(end, Duration::from_secs(60)).await;
    // The relay keeps running: the checkpoint follows the acknowledgements, not the stop.
    let topic = format!("{}.checkpoints", db.name);
    // Read the whole topic until its newest checkpoint covers the events: an earlier one
    // (written while the events were in flight) comes first and covers less.
    let covers = move |r: &kafka::Rec| {
        let c = relay_core::checkpoint::Checkpoint::from_json(
            r.value
                .as_deref()
                .expect("a checkpoint has a value")
                .as_bytes(),
        )
        .unwrap();
        (c.covered_lsn >= end).then_some(c)
    };
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&[topic], Duration::from_secs(20), |r| {
            r.last().and_then(covers).is_some()
        })
    })
    .await
    .unwrap();
    let covered = got
        .last()
        .and_then(covers)
        .unwrap_or_else(|| panic!("no checkpoint past {end} within 20 s: {} read", got.len()));
    let last = covered.last.expect("names the last event");
    assert_eq!(
        last.fingerprint,
        format!("id:{}", written.last().unwrap().id)
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

/// Own cluster of the PostgreSQL-crash test.
const CRASH_PG_PORT: u16 = 25479;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_after_postgres_crashes_resends_only_what_no_checkpoint_covers() {
    let cluster = PgCluster::start(CRASH_PG_PORT, "");
    let mut db = TestDb::new_on(&cluster.base(), CRASH_PG_PORT, "alo_crash").await;
    let cfg = config(&db, "at-least-once", "");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let mut written = Vec::new();
    for round in 0..3 {
        written.extend(write_events(&db, &format!("r{round}"), 3).await);
        let end = db.current_wal_lsn().await;
        db.wait_confirmed(end, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // A crash: the slot's position in memory is lost.
        cluster.stop("immediate");
        cluster.restart();
        db = db.reconnect().await;
    }
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check("alo_postgres_crashes", |t| db.topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered("");
    let log = relay.log_text();
    assert_eq!(f.duplicated, 0, "{f:?}\n{log}");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
