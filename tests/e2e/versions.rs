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
    assert_eq!(db.wait_invalidated().await.as_deref(), Some("idle_timeout"));

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

    let out = relay.status();
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
        assert_eq!(
            db.invalidation_reason().await,
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

/// PostgreSQL 18's stored generated columns. A mapping without an `id` header identifies rows
/// in its checkpoints by a hash of their values; turning `publish_generated_columns = stored`
/// on and then rewinding the slot must not read as a changed history (exactly-once: every
/// event once). A stored generated column can then be mapped (here the key); a publication
/// that does not carry it is refused with the ALTER PUBLICATION that fixes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_generated_columns_are_mapped_and_their_publication_option_is_no_changed_history() {
    let cluster = PgCluster::start_with(Some(pg_bin(18)), 25486, "");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "gencols18").await;
    db.client
        .batch_execute(
            "ALTER TABLE outbox ADD COLUMN agg_key text \
               GENERATED ALWAYS AS (lower(aggregateid)) STORED",
        )
        .await
        .unwrap();
    let config = |key: &str| {
        db.relay_config(&format!(
            "transactional_id = \"outbox-relay-{db}\"\nmax_transaction_records = 10\n\n\
             [[outbox]]\ntable = \"public.outbox\"\ntopic = \"{db}.{{aggregatetype}}\"\n\
             key_column = \"{key}\"\nheaders = {{ event_id = \"id\" }}\n\n\
             [relay]\ndelivery = \"exactly-once\"\nstatus_interval_ms = 200\n\
             restart_backoff_initial_ms = 100\n",
            db = db.name
        ))
    };
    let cfg = config("aggregateid");
    let copy = format!("{}_copy", db.name);
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    relay.terminate(Duration::from_secs(30));
    db.copy_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let w =
            crate::support::writer::insert_event(&db.client, "order", &format!("A-{}", i % 4), 0)
                .await
                .unwrap();
        ids.push(w.id);
    }
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    assert!(relay.terminate(Duration::from_secs(30)).success());

    // The option turned on, then the slot rewound to before every event.
    db.client
        .batch_execute(&format!(
            "ALTER PUBLICATION {} SET (publish_generated_columns = stored)",
            db.name
        ))
        .await
        .unwrap();
    db.rewind_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    for i in 0..5 {
        let w = crate::support::writer::insert_event(&db.client, "order", &format!("B-{i}"), 0)
            .await
            .unwrap();
        ids.push(w.id);
    }
    let got = crate::support::kafka::consume_settled(vec![db.topic("order")], 0).await;
    let seen: Vec<&str> = got
        .iter()
        .filter_map(|r| r.headers.get("event_id").map(String::as_str))
        .collect();
    let distinct: std::collections::HashSet<&str> = seen.iter().copied().collect();
    let log = relay.log_text();
    assert!(
        log.contains(outbox_relay::telemetry::events::CHECKPOINT_SKIP_DONE),
        "{log}"
    );
    assert!(
        ids.iter().all(|id| distinct.contains(id.as_str())),
        "every event arrives: {} of {}",
        distinct.len(),
        ids.len()
    );
    assert_eq!(
        seen.len(),
        ids.len(),
        "exactly once, no history refused:\n{log}"
    );
    relay.terminate(Duration::from_secs(30));
    crate::support::check::note(&format!(
        "pg18_generated_columns: written={} delivered={} distinct={}",
        ids.len(),
        seen.len(),
        distinct.len()
    ));

    // The generated column as the key.
    let keyed = config("agg_key");
    let mut relay = Relay::streaming(&db.name, &keyed).await;
    crate::support::writer::insert_event(&db.client, "gen", "ORD-9", 0)
        .await
        .unwrap();
    // The records carry `event_id`, not the `id` header `kafka::consume` counts: wait for one.
    let topic = db.topic("gen");
    let got = tokio::task::spawn_blocking(move || {
        crate::support::kafka::consume_until(&[topic], Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(got.first().and_then(|r| r.key.as_deref()), Some("ord-9"));
    relay.terminate(Duration::from_secs(30));

    // Without the option the mapped column would never arrive: refused, with the fix.
    db.client
        .batch_execute(&format!(
            "ALTER PUBLICATION {} SET (publish_generated_columns = none)",
            db.name
        ))
        .await
        .unwrap();
    let (exit, log) = Relay::once(&db.name, &keyed, &["setup"], &[]);
    assert_eq!(exit.code(), Some(3), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("public.outbox.agg_key is a stored generated column")
            && last.contains("SET (publish_generated_columns = stored)"),
        "{last}"
    );
    db.drop_slot(&copy).await;
    db.cleanup().await;
    drop(cluster);
}
