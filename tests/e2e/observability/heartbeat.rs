//! The heartbeat: `confirmed_flush_lsn` keeps moving while only other tables (and other
//! applications' logical messages) are written, and only outbox rows are published.

use std::time::{Duration, Instant};

use outbox_relay::telemetry::events;

use super::config;
use crate::support::{
    TestDb, eventually,
    http::{relay_addr, scrape},
    kafka,
    relay::Relay,
    writer,
};

/// The test [`super::heartbeat_keeps_confirmed_flush_up_while_only_other_tables_are_written`].
pub(super) async fn keeps_confirmed_flush_up() {
    let db = TestDb::new("heartbeat").await;
    let cfg = config(&db, "127.0.0.1:0", "[heartbeat]\ninterval_ms = 300\n");
    let mut relay = Relay::start(&db.name, &cfg);
    let started = Instant::now();
    let addr = relay_addr(&relay).await;
    relay
        .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
        .await;

    // Other applications' logical messages, transactional or not, pass through unpublished.
    db.client
        .batch_execute(
            "SELECT pg_logical_emit_message(true, 'another-app', 'x');
             SELECT pg_logical_emit_message(false, 'another-app', 'y');",
        )
        .await
        .unwrap();

    // Writes to an unpublished table only: every position is confirmed within seconds.
    let start = db.confirmed_flush().await.unwrap();
    for _ in 0..10 {
        for _ in 0..10 {
            db.client
                .execute("INSERT INTO business(note) VALUES ('other table')", &[])
                .await
                .unwrap();
        }
        let written = db.current_wal_lsn().await;
        db.wait_confirmed(written, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(db.confirmed_flush().await.unwrap() > start);

    // Heartbeats were written and confirmed end to end, recently: the age counts from the
    // relay's start until a heartbeat is confirmed, so after 6 s a small age proves it.
    tokio::time::sleep_until((started + Duration::from_secs(6)).into()).await;
    let m = eventually(
        "a recent confirmed heartbeat",
        Duration::from_secs(10),
        || async {
            let m = scrape(addr).await;
            let age = m.value("outbox_relay_heartbeat_age_seconds", &[])?;
            (age < 2.0).then_some(m)
        },
    )
    .await;
    let beats = m
        .value("outbox_relay_heartbeats_total", &[("result", "ok")])
        .unwrap();
    assert!(beats >= 10.0, "{beats} heartbeats in > 5 s at 300 ms");
    assert_eq!(
        m.value("outbox_relay_heartbeats_total", &[("result", "error")]),
        Some(0.0)
    );

    // Only outbox rows are published: one event, one record; no heartbeat, no foreign message.
    let w = writer::insert_event(&db.client, "order", "a-1", 0)
        .await
        .unwrap();
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = kafka::consume(vec![db.topic("order")], Duration::from_secs(3), 2).await;
    assert_eq!((got.len(), again.len()), (1, 1), "{again:?}");
    assert_eq!(again[0].header("id"), w.id);
    let log = relay.log_text();
    assert!(!log.contains(events::PIPELINE_RESTART), "{log}");

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
