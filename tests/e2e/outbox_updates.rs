//! UPDATEs and DELETEs of outbox rows, which reach the relay only through a publication that
//! publishes them (Debezium's, kept at a cutover): never published; `table.op.invalid.behavior`
//! decides whether an UPDATE is logged (`warn`, the default) or stops the relay (`fatal`)
//! without confirming anything from it on.

use std::time::Duration;

use outbox_relay::telemetry::events;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, writer};

/// The relay's database with a publication of every operation (PostgreSQL's default).
async fn db_publishing_everything(hint: &str) -> TestDb {
    let db = TestDb::new(hint).await;
    db.client
        .batch_execute(&format!(
            "CREATE PUBLICATION \"{}\" FOR TABLE outbox",
            db.name
        ))
        .await
        .unwrap();
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_deletes_of_outbox_rows_are_logged_and_never_published() {
    let db = db_publishing_everything("obupd").await;
    let cfg = db.relay_config(&db.outbox_section());
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    let first = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    c.batch_execute(
        "UPDATE outbox SET type = 'Changed'; DELETE FROM outbox; \
         UPDATE outbox SET type = 'Nothing'",
    )
    .await
    .unwrap();
    let second = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(end, Duration::from_secs(30)).await;
    relay
        .wait_log(events::OUTBOX_UPDATE_IGNORED, Duration::from_secs(10))
        .await;
    let got = kafka::consume_settled(vec![db.topic("order")], 2).await;
    let f = check::check(
        "outbox_update_warn",
        |t| db.topic(t),
        &[first, second],
        &got,
    );
    assert_eq!((f.lost, f.unexpected, f.duplicated), (0, 0, 0), "{f:?}");
    assert!(
        got.iter().all(|r| r.header("eventType") != "Changed"),
        "an UPDATE was published: {got:?}"
    );
    relay.terminate(Duration::from_secs(10));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_behaviour_stops_at_an_update_and_confirms_nothing_past_it() {
    let db = db_publishing_everything("obupdf").await;
    let cfg = db.relay_config(&format!(
        "{}[outbox.debezium]\n\"table.op.invalid.behavior\" = \"fatal\"\n",
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    let first = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    let before = db.current_wal_lsn().await;
    c.batch_execute("UPDATE outbox SET type = 'Changed'")
        .await
        .unwrap();
    writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("the relay must stop at the UPDATE");
    let log = relay.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("\"table.op.invalid.behavior\" = \"fatal\" stops here"),
        "{log}"
    );
    assert!(
        db.confirmed_flush().await.unwrap() <= before,
        "confirmed past the UPDATE"
    );
    // A restart meets the same UPDATE and stops again.
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(status.code(), Some(1), "{log}");
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(20), 1).await;
    let f = check::check("outbox_update_fatal", |t| db.topic(t), &[first], &got);
    assert_eq!((f.lost, f.unexpected), (0, 0), "{f:?}");
    db.cleanup().await;
}
