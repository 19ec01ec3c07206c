//! Poison events: rows that cannot become a Kafka record, and records Kafka refuses for good.
//! Policy `halt` (the default): stop with the reason, confirm nothing from the poison event on,
//! and refuse again after a restart — nothing is dropped without a record.

use std::time::Duration;

use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
};
use relay_core::Lsn;

use crate::support::{TestDb, check, connect, kafka, kafka_brokers, relay::Relay, writer};

async fn commit_lsn_after(db: &TestDb) -> Lsn {
    db.current_wal_lsn().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_key_halts_with_the_reason_and_confirms_nothing_past_it() {
    let db = TestDb::new("nullkey").await;
    db.client
        .batch_execute("ALTER TABLE outbox ALTER COLUMN aggregateid DROP NOT NULL")
        .await
        .unwrap();
    let cfg = db.relay_config(&db.outbox_section());
    let mut relay = Relay::start(&db.name, &cfg);
    relay
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;
    let c = connect(&db.conninfo()).await;
    let good = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    db.wait_confirmed(commit_lsn_after(&db).await, Duration::from_secs(30))
        .await;
    let before = db.current_wal_lsn().await;
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES (gen_random_uuid(), 'order', NULL, 'Event', '{}')",
        &[],
    )
    .await
    .unwrap();
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("the relay must stop on a poison event");
    assert_eq!(status.code(), Some(1), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(
        log.contains("NULL in \"aggregateid\", which is configured as the key"),
        "{log}"
    );
    assert!(
        db.confirmed_flush().await.unwrap() <= before,
        "confirmed past the poison event"
    );
    // A restart meets the same event and stops again: nothing is skipped.
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("NULL in \"aggregateid\""), "{log}");
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
    let f = check::check("poison_null_key_halt", |t| db.topic(t), &[good], &got);
    assert_eq!((f.lost, f.unexpected), (0, 0), "{f:?}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_larger_than_the_topic_accepts_halts_with_a_hint() {
    let db = TestDb::new("toolarge").await;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap();
    let topic = db.topic("order");
    let new =
        NewTopic::new(&topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", "20000");
    admin
        .create_topics(&[new], &AdminOptions::new())
        .await
        .unwrap();
    // Uncompressed, so the record is as large on the wire as in the table.
    let cfg = db
        .relay_config(&db.outbox_section())
        .replace("[kafka]\n", "[kafka]\ncompression = \"none\"\n");
    let mut relay = Relay::start(&db.name, &cfg);
    relay
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;
    let c = connect(&db.conninfo()).await;
    let good = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    let before = db.current_wal_lsn().await;
    let big = "x".repeat(50_000);
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES (gen_random_uuid(), 'order', 'k-1', 'Event', jsonb_build_object('big', $1::text))",
        &[&big],
    )
    .await
    .unwrap();
    let status = relay
        .wait(Duration::from_secs(60))
        .expect("the relay must stop on a refused record");
    assert_eq!(status.code(), Some(1), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(
        log.contains("refused an event") && log.contains("max.message.bytes"),
        "{log}"
    );
    assert!(
        db.confirmed_flush().await.unwrap() <= before,
        "confirmed past the refused event"
    );
    let got = kafka::consume(vec![topic], Duration::from_secs(30), 1).await;
    let f = check::check("poison_too_large_halt", |t| db.topic(t), &[good], &got);
    assert_eq!((f.lost, f.unexpected), (0, 0), "{f:?}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_column_dropped_mid_stream_halts_with_its_name() {
    let db = TestDb::new("dropcol").await;
    let cfg = db.relay_config(&db.outbox_section());
    let mut relay = Relay::start(&db.name, &cfg);
    relay
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;
    let c = connect(&db.conninfo()).await;
    writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    let before = db.current_wal_lsn().await;
    c.batch_execute(
        "ALTER TABLE outbox DROP COLUMN type;
         INSERT INTO outbox(id, aggregatetype, aggregateid, payload) VALUES (gen_random_uuid(), 'order', 'k-1', '{}');",
    )
    .await
    .unwrap();
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("the relay must stop");
    assert_eq!(status.code(), Some(1), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(
        log.contains("has no column \"type\"") && log.contains("header \"eventType\""),
        "{log}"
    );
    assert!(db.confirmed_flush().await.unwrap() <= before);
    db.cleanup().await;
}
