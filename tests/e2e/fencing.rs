//! Zombie fencing with `kafka.transactional_id`, on a real broker of its own and the shared
//! PostgreSQL.
//!
//! The zombie: the active instance A is cut off from PostgreSQL *and* Kafka by a silent
//! partition (no connection is closed, so A cannot tell), PostgreSQL ends A's walsender after
//! `wal_sender_timeout`, and the passive instance B takes the slot and re-sends what A had not
//! confirmed. Then A gets Kafka back while its PostgreSQL connection still looks alive, with
//! records it received before the partition still queued. Without fencing A delivers them
//! (duplicates written after B's newer records); with it, B's `InitProducerId` has fenced A's
//! producer and the broker refuses them. The broker has a listener whose advertised address is
//! a proxy (A's path) and one reached directly (B and the checking consumer).

use std::time::{Duration, Instant};

use outbox_relay::telemetry::events;

use crate::{
    failover::write,
    support::{TestDb, broker::OwnBroker, check, eventually, kafka, proxy::Proxy, relay::Relay},
};

const KAFKA_PORT: u16 = 26592;
const KAFKA_DIRECT_PORT: u16 = 26594;
const KAFKA_PROXY_PORT: u16 = 26692;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_instance_is_fenced_and_writes_nothing_after_the_takeover() {
    let _broker = OwnBroker::start(
        KAFKA_PORT,
        &[
            format!(
                "listeners=PLAINTEXT://127.0.0.1:{KAFKA_PORT},DIRECT://127.0.0.1:{KAFKA_DIRECT_PORT},CONTROLLER://127.0.0.1:{}",
                KAFKA_PORT + 1
            ),
            format!(
                "advertised.listeners=PLAINTEXT://127.0.0.1:{KAFKA_PROXY_PORT},DIRECT://127.0.0.1:{KAFKA_DIRECT_PORT}"
            ),
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,DIRECT:PLAINTEXT"
                .into(),
            "inter.broker.listener.name=DIRECT".into(),
        ]
        .join("\n"),
    );
    let kafka_proxy = Proxy::start(KAFKA_PROXY_PORT, KAFKA_PORT).await;
    let db = TestDb::new("fence").await;
    let pg_proxy = Proxy::start(0, db.port).await;
    let shared = db.relay_config(&format!(
        "transactional_id = \"outbox-relay-{}\"\n{}\n[relay]\nrestart_backoff_initial_ms = 100\n\
         restart_backoff_max_ms = 500\n",
        db.name,
        db.outbox_section()
    ));
    let direct_brokers = format!("127.0.0.1:{KAFKA_DIRECT_PORT}");
    let brokers_line = format!("brokers = \"{}\"", crate::support::kafka_brokers());
    let cfg_a = shared
        .replace(
            &brokers_line,
            &format!("brokers = \"127.0.0.1:{KAFKA_PROXY_PORT}\""),
        )
        .replace(
            &format!("port = {}", db.port),
            &format!("port = {}", pg_proxy.port),
        );
    let cfg_b = shared.replace(&brokers_line, &format!("brokers = \"{direct_brokers}\""));

    let mut a = Relay::streaming(&db.name, &cfg_a).await;
    let mut b = Relay::start(&db.name, &cfg_b);
    b.wait_log("slot_busy", Duration::from_secs(30)).await;
    let mut written = write(&db, "a", 5).await;
    let end_a = db.current_wal_lsn().await;
    db.wait_confirmed(end_a, Duration::from_secs(30)).await;

    // A loses Kafka, then receives `b` from PostgreSQL and queues it; then it loses PostgreSQL.
    kafka_proxy.freeze();
    let queued = write(&db, "b", 5).await;
    let end_b = db.current_wal_lsn().await;
    eventually(
        "A's walsender sending `b`",
        Duration::from_secs(10),
        || async {
            let sent: Option<String> = db
                .client
                .query_one(
                    "SELECT (SELECT sent_lsn::text FROM pg_stat_replication WHERE pid = \
                     s.active_pid) FROM pg_replication_slots s WHERE slot_name = $1",
                    &[&db.name],
                )
                .await
                .unwrap()
                .get(0);
            sent.and_then(|s| s.parse::<relay_core::Lsn>().ok())
                .filter(|s| *s >= end_b)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    pg_proxy.freeze();

    // PostgreSQL ends A's walsender after wal_sender_timeout; B takes the slot, fences A's
    // producer, and publishes `b` and then `c`.
    b.wait_log(
        events::KAFKA_PRODUCER_FENCED_OTHERS,
        Duration::from_secs(60),
    )
    .await;
    db.wait_confirmed(end_b, Duration::from_secs(30)).await;
    let c = write(&db, "c", 5).await;
    let end_c = db.current_wal_lsn().await;
    db.wait_confirmed(end_c, Duration::from_secs(30)).await;

    // A gets Kafka back (PostgreSQL still silent): its queued `b` must not be written.
    kafka_proxy.thaw();
    a.wait_log("producer_fenced", Duration::from_secs(60)).await;
    written.extend(queued);
    written.extend(c);
    let ids: Vec<String> = written.iter().map(|w| w.id.clone()).collect();
    let topic = db.topic("order");
    // Read uncommitted: every record written to the log, aborted ones included. A few more
    // seconds after the last expected id, for late records of A to show.
    let settle = Instant::now() + Duration::from_secs(3);
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until_with(
            &direct_brokers,
            &[("isolation.level", "read_uncommitted")],
            &[topic],
            Duration::from_secs(60),
            |recs| {
                Instant::now() > settle
                    && ids
                        .iter()
                        .all(|id| recs.iter().any(|r| r.header("id") == id))
            },
        )
    })
    .await
    .unwrap();
    let f = check::check("zombie_fenced", |t| db.topic(t), &written, &got);
    f.assert_exactly_once(&format!("A:\n{}\nB:\n{}", a.log_text(), b.log_text()));
    a.kill9();
    assert_eq!(b.terminate(Duration::from_secs(30)).code(), Some(0));
    db.cleanup().await;
}

/// A relay that stops on a definite error (here a poison row, policy halt) aborts its open
/// Kafka transaction: read-committed consumers of the partition are not held behind it until
/// Kafka times it out (`transaction.timeout.ms`, 60 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definite_exit_aborts_the_open_kafka_transaction() {
    let db = TestDb::new("txabort").await;
    db.client
        .batch_execute("ALTER TABLE outbox ALTER COLUMN aggregateid DROP NOT NULL")
        .await
        .unwrap();
    let topic = db.topic("order");
    kafka::create_topic_with_max_bytes(&topic, 1_000_000).await;
    let cfg = db.relay_config(&format!(
        "transactional_id = \"outbox-relay-{}\"\ntransaction_interval_ms = 10000\n{}",
        db.name,
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    // A good row, acknowledged inside the open Kafka transaction (committed only every 10 s),
    // then a NULL key.
    db.client
        .batch_execute(
            "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload)
               VALUES (gen_random_uuid(), 'order', 'k', 'Event', '{}');",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    db.client
        .batch_execute(
            "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload)
               VALUES (gen_random_uuid(), 'order', NULL, 'Event', '{}');",
        )
        .await
        .unwrap();
    let (status, log) = relay.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{log}");
    // A record written after the exit is visible to a read-committed consumer at once.
    kafka::produce_one(&topic, "k", "{}", "after-exit").await;
    let started = Instant::now();
    let topics = vec![topic.clone()];
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&topics, Duration::from_secs(20), |r| {
            r.iter().any(|r| r.header("id") == "after-exit")
        })
    })
    .await
    .unwrap();
    assert!(
        got.iter().any(|r| r.header("id") == "after-exit"),
        "a read-committed consumer is still held behind the relay's open transaction after \
         20 s:\n{log}"
    );
    check::note(&format!(
        "definite_exit_aborts_transaction: read-committed consumer saw the next record {} ms \
         after the exit",
        started.elapsed().as_millis()
    ));
    assert!(log.contains(events::KAFKA_TRANSACTION_ABORTED), "{log}");
    db.cleanup().await;
}

/// The relay runs its transactions on two producers (`<id>` and `<id>.2`): at every start it
/// fences both, so an older instance's open transaction on either is aborted and the older
/// instance can no longer commit it. Here the "older instance" is a bare transactional
/// producer with id `<id>.2`, holding an open transaction with one record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_fences_both_transactional_ids() {
    use rdkafka::{
        ClientConfig,
        producer::{BaseProducer, BaseRecord, Producer},
    };
    let db = TestDb::new("fence2").await;
    let topic = db.topic("order");
    kafka::create_topic(&topic, 1).await;
    let id = format!("outbox-relay-{}", db.name);
    let zombie: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", crate::support::kafka_brokers())
        .set("transactional.id", format!("{id}.2"))
        // Longer than the test: only a fence may end its transaction.
        .set("transaction.timeout.ms", "300000")
        .create()
        .unwrap();
    let t = Duration::from_secs(20);
    zombie.init_transactions(t).unwrap();
    zombie.begin_transaction().unwrap();
    zombie
        .send(BaseRecord::to(&topic).key("k").payload("{}"))
        .unwrap();
    zombie.flush(t).unwrap();

    let cfg = db.relay_config(&format!(
        "transactional_id = \"{id}\"\n{}",
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let written = vec![
        crate::support::writer::insert_event(&db.client, "order", "k", 0)
            .await
            .unwrap(),
    ];
    let got = kafka::consume_settled(vec![topic.clone()], written.len()).await;
    let f = check::check("fence_both_ids", |t| db.topic(t), &written, &got);
    f.assert_exactly_once("the relay's record, not the zombie's");
    let commit = tokio::task::spawn_blocking(move || zombie.commit_transaction(t))
        .await
        .unwrap();
    assert!(
        commit.is_err(),
        "the producer with id {id}.2 could still commit after the relay started"
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
