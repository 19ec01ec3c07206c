//! The PostgreSQL versions: the server under test is the one the version matrix asked for
//! (scripts/test-versions.sh runs the core subset on 14, 16, 17 and 18 with
//! `RELAY_TEST_PG_MAJOR`), and PostgreSQL 18's `idle_replication_slot_timeout` stops the relay
//! with a message that names the setting (a PostgreSQL 18 cluster of its own).

use std::time::Duration;

use crate::support::{
    TestDb,
    cluster::{PgCluster, pg_bin},
    connect, pg_base,
    relay::Relay,
};

async fn server_major(base: &str) -> i32 {
    let client = connect(&format!("{base} dbname=postgres")).await;
    let v: String = client
        .query_one("SELECT current_setting('server_version_num')", &[])
        .await
        .unwrap()
        .get(0);
    v.parse::<i32>().unwrap() / 10_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_is_the_version_under_test() {
    let major = server_major(&pg_base()).await;
    match std::env::var("RELAY_TEST_PG_MAJOR") {
        Ok(want) => assert_eq!(
            major.to_string(),
            want,
            "RELAY_TEST_PG points at PostgreSQL {major}, not the version under test"
        ),
        Err(_) => assert!(major >= 14, "the shared cluster runs PostgreSQL {major}"),
    }
    // The tests' own clusters run the same version (RELAY_TEST_PGBIN).
    let own = PgCluster::start(25480, "");
    assert_eq!(server_major(&own.base()).await, major);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_an_idle_timeout_invalidation_stops_the_relay_naming_the_setting() {
    let cluster = PgCluster::start_with(
        Some(pg_bin(18)),
        25481,
        "-c idle_replication_slot_timeout=1",
    );
    let db = TestDb::new_on(&cluster.base(), cluster.port, "idle18").await;
    let cfg = db.relay_config(&db.outbox_section());
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert_eq!(exit.code(), Some(0), "{log}");

    // Nothing uses the slot: past the timeout, the next checkpoint invalidates it.
    let mut reason = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        db.client.batch_execute("CHECKPOINT").await.unwrap();
        reason = db
            .client
            .query_one(
                "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1",
                &[&db.name],
            )
            .await
            .unwrap()
            .get::<_, Option<String>>(0);
        if reason.is_some() {
            break;
        }
    }
    assert_eq!(reason.as_deref(), Some("idle_timeout"));

    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &[]);
    let exit = relay
        .wait(Duration::from_secs(60))
        .expect("the relay stops on an invalidated slot");
    let log = relay.log_text();
    assert_eq!(exit.code(), Some(3), "a definite stop:\n{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("reason idle_timeout")
            && last.contains("idle_replication_slot_timeout")
            && last.contains("--recreate-slot")
            && !last.contains("removed WAL"),
        "the exit names the setting, not WAL removal: {last}"
    );

    let out = std::process::Command::new(crate::support::relay::binary())
        .args(["status", "--config"])
        .arg(&relay.config)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("invalidated      idle_timeout: ")
            && text.contains("CRITICAL wal_status")
            && text.contains("idle_replication_slot_timeout"),
        "{text}"
    );
    drop(cluster);
}

/// PostgreSQL 18, `idle_replication_slot_timeout = 4s`, and a Kafka outage of 15 s: the relay
/// releases its replication connection under back-pressure and cannot reconnect the pipeline
/// while Kafka is away, so the slot would go idle past the timeout and be invalidated at a
/// checkpoint (the test forces one every second). The slot keeper holds it; after the outage
/// every event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_the_relay_holds_its_slot_through_a_kafka_outage_longer_than_the_idle_timeout() {
    let cluster = PgCluster::start_with(
        Some(pg_bin(18)),
        25485,
        "-c idle_replication_slot_timeout=4",
    );
    let (_broker, kafka) = crate::support::broker::behind_proxy(27292, 27296).await;
    let db = TestDb::new_on(&cluster.base(), cluster.port, "idlehold").await;
    let cfg = db
        .relay_config(&format!(
            "{}\n[relay]\nmax_in_flight_records = 100\nbackpressure_release_ms = 1000\n\
             restart_backoff_max_ms = 2000\n",
            db.outbox_section()
        ))
        .replace(
            &format!("brokers = \"{}\"", crate::support::kafka_brokers()),
            "brokers = \"127.0.0.1:27296\"",
        )
        .replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 2000\n");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let log = relay.log_text();
    assert!(
        log.contains("slot_idle_timeout: idle_replication_slot_timeout is 4 s"),
        "run warns about the timeout:\n{log}"
    );
    let mut written = vec![
        crate::support::writer::insert_event(&db.client, "order", "k", 0)
            .await
            .unwrap(),
    ];
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;

    kafka.cut();
    for i in 0..300 {
        written.push(
            crate::support::writer::insert_event(&db.client, "order", &format!("k{}", i % 5), i)
                .await
                .unwrap(),
        );
    }
    let outage = std::time::Instant::now();
    while outage.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        db.client.batch_execute("CHECKPOINT").await.unwrap();
        let reason: Option<String> = db
            .client
            .query_one(
                "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1",
                &[&db.name],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            reason,
            None,
            "the slot was invalidated {:?} into the outage:\n{}",
            outage.elapsed(),
            relay.log_text()
        );
    }
    let log = relay.log_text();
    assert!(log.contains("backpressure_released"), "{log}");
    assert!(
        log.contains("slot_held_idle"),
        "the keeper held the idle slot:\n{log}"
    );

    kafka.heal();
    let topic = db.topic("order");
    let got = tokio::task::spawn_blocking(move || {
        crate::support::kafka::consume_until_from(
            "127.0.0.1:27296",
            &[topic],
            Duration::from_secs(90),
            |r| {
                r.iter()
                    .filter_map(|r| r.headers.get("id"))
                    .collect::<std::collections::HashSet<_>>()
                    .len()
                    >= 301
            },
        )
    })
    .await
    .unwrap();
    let f =
        crate::support::check::check("pg18_idle_timeout_outage", |t| db.topic(t), &written, &got);
    assert_eq!((f.lost, f.order_violations), (0, 0), "{f:?}");
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
    drop(cluster);
}
