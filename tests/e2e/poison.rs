//! Poison events: rows that cannot become a Kafka record, and records Kafka refuses for good.
//! Policy `halt` (the default): stop with the reason, confirm nothing from the poison event on,
//! and refuse again after a restart — nothing is dropped without a record.

use std::time::Duration;

use relay_core::Lsn;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, writer};

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
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    let good = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    db.wait_confirmed(commit_lsn_after(&db).await, Duration::from_secs(30))
        .await;
    let before = db.current_wal_lsn().await;
    writer::insert_null_key(&c).await;
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
    let topic = db.topic("order");
    kafka::create_topic_with_max_bytes(&topic, 20_000).await;
    // Uncompressed, so the record is as large on the wire as in the table.
    let cfg = db
        .relay_config(&db.outbox_section())
        .replace("[kafka]\n", "[kafka]\ncompression = \"none\"\n");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
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
    let mut relay = Relay::streaming(&db.name, &cfg).await;
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

fn dead_letter_cfg(db: &TestDb) -> String {
    db.relay_config(&format!(
        "{}\n[relay]\non_poison = \"dead-letter\"\ndead_letter_topic = \"{}\"\n",
        db.outbox_section(),
        db.topic("dlq")
    ))
    .replace("[kafka]\n", "[kafka]\ncompression = \"none\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_policy_records_unroutable_and_refused_events_and_goes_on() {
    let db = TestDb::new("dlq").await;
    db.client
        .batch_execute("ALTER TABLE outbox ALTER COLUMN aggregateid DROP NOT NULL")
        .await
        .unwrap();
    let topic = db.topic("order");
    kafka::create_topic_with_max_bytes(&topic, 20_000).await;
    let mut relay = Relay::streaming(&db.name, &dead_letter_cfg(&db)).await;
    let c = connect(&db.conninfo()).await;
    let mut written = vec![writer::insert_event(&c, "order", "k-1", 0).await.unwrap()];
    // 1. A NULL key: cannot be routed.
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES ('00000000-0000-0000-0000-00000000000a', 'order', NULL, 'Event', '{\"n\": 1}')",
        &[],
    )
    .await
    .unwrap();
    written.push(writer::insert_event(&c, "order", "k-1", 0).await.unwrap());
    // 2. 50 kB: the broker refuses it after it was sent (topic max.message.bytes = 20000).
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES ('00000000-0000-0000-0000-00000000000b', 'order', 'k-2', 'Event', \
                 jsonb_build_object('big', repeat('x', 50000)))",
        &[],
    )
    .await
    .unwrap();
    written.push(writer::insert_event(&c, "order", "k-2", 0).await.unwrap());
    // 3. 1.2 MB: the producer refuses it before sending (message.max.bytes = 1000000).
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES ('00000000-0000-0000-0000-00000000000c', 'order', 'k-3', 'Event', \
                 jsonb_build_object('big', repeat('y', 1200000)))",
        &[],
    )
    .await
    .unwrap();
    written.push(writer::insert_event(&c, "order", "k-3", 0).await.unwrap());

    let got = kafka::consume(vec![topic.clone()], Duration::from_secs(60), written.len()).await;
    let f = check::check(
        "dead_letter_policy_main_topic",
        |t| db.topic(t),
        &written,
        &got,
    );
    f.assert_nothing_lost_or_reordered("");
    // At-least-once holds for the dead-letter topic too: restarts can repeat a record, so
    // count distinct source positions.
    let positions = |recs: &[kafka::Rec]| {
        recs.iter()
            .map(|r| {
                (
                    r.header("outbox-relay.commit-lsn").to_string(),
                    r.header("outbox-relay.seq").to_string(),
                )
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    let dlq_topic = vec![db.topic("dlq")];
    let dlq = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&dlq_topic, Duration::from_secs(60), |r| {
            positions(r).len() >= 3
        })
    })
    .await
    .unwrap();
    assert_eq!(
        positions(&dlq).len(),
        3,
        "three dead-lettered events: {dlq:#?}"
    );
    let by_reason = |needle: &str| {
        dlq.iter()
            .find(|r| r.header("outbox-relay.dlq.reason").contains(needle))
            .unwrap_or_else(|| panic!("no dead-letter record for {needle}: {dlq:#?}"))
    };
    let null_key = by_reason("NULL");
    let row: serde_json::Value = serde_json::from_str(null_key.value.as_deref().unwrap()).unwrap();
    assert_eq!(row["id"], "00000000-0000-0000-0000-00000000000a");
    assert_eq!(row["aggregateid"], serde_json::Value::Null);
    assert_eq!(null_key.header("outbox-relay.dlq.table"), "public.outbox");
    // Distinct refused events, by id (a restart may have repeated a dead-letter record).
    let refused = dlq
        .iter()
        .filter(|r| r.header("outbox-relay.dlq.topic") == topic)
        .map(|r| (r.header("id").to_string(), r))
        .collect::<std::collections::BTreeMap<_, _>>();
    assert_eq!(refused.len(), 2, "{dlq:#?}");
    let refused: Vec<&kafka::Rec> = refused.into_values().collect();
    for r in &refused {
        assert!(
            r.header("outbox-relay.dlq.reason").contains("size"),
            "{r:?}"
        );
        assert!(r.headers.contains_key("outbox-relay.commit-lsn"));
    }
    let local = refused
        .iter()
        .find(|r| r.header("id").ends_with('c'))
        .unwrap();
    assert!(
        local.value.is_none(),
        "a 1.2 MB value is left out of the dead-letter record"
    );
    assert!(
        local
            .header("outbox-relay.dlq.omitted-value-bytes")
            .parse::<u64>()
            .unwrap()
            > 1_200_000
    );
    let broker = refused
        .iter()
        .find(|r| r.header("id").ends_with('b'))
        .unwrap();
    assert!(
        broker.value.as_deref().unwrap().len() > 50_000,
        "a 50 kB value is kept"
    );
    check::note(&format!(
        "dead_letter_policy: {} events delivered in order, 3 dead-lettered (NULL key, refused by the broker, refused by the producer)",
        written.len()
    ));
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    assert!(relay.is_running());
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

/// A broker of its own with `auto.create.topics.enable=false`.
struct NoAutoCreateKafka;

const NO_AUTO_CREATE_PORT: u16 = 26292;

impl NoAutoCreateKafka {
    fn start() -> Self {
        let ok =
            std::process::Command::new(crate::support::repo_root().join("infra/kafka/start.sh"))
                .env("KAFKA_PORT", NO_AUTO_CREATE_PORT.to_string())
                .env("KAFKA_EXTRA_PROPS", "auto.create.topics.enable=false")
                .status()
                .unwrap()
                .success();
        assert!(ok, "broker without auto-creation did not start");
        NoAutoCreateKafka
    }
    fn brokers(&self) -> String {
        format!("127.0.0.1:{NO_AUTO_CREATE_PORT}")
    }
}

impl Drop for NoAutoCreateKafka {
    fn drop(&mut self) {
        let _ = std::process::Command::new(crate::support::repo_root().join("infra/kafka/stop.sh"))
            .arg("--destroy")
            .env("KAFKA_PORT", NO_AUTO_CREATE_PORT.to_string())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_does_not_exist_with_auto_creation_off_halts_or_is_dead_lettered() {
    use rdkafka::{
        ClientConfig,
        admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
        client::DefaultClientContext,
    };
    let broker = NoAutoCreateKafka::start();
    let db = TestDb::new("notopic").await;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .create()
        .unwrap();
    let (present, dlq) = (db.topic("present"), db.topic("dlq"));
    let topics = [
        NewTopic::new(&present, 1, TopicReplication::Fixed(1)),
        NewTopic::new(&dlq, 1, TopicReplication::Fixed(1)),
    ];
    for r in admin
        .create_topics(&topics, &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
    // librdkafka waits topic.metadata.propagation.max.ms (30 s) before calling a topic missing,
    // and the relay's partition choice as long: 2 s here.
    let base = db
        .relay_config(&db.outbox_section())
        .replace(&crate::support::kafka_brokers(), &broker.brokers())
        + "\n[kafka.properties]\n\"topic.metadata.propagation.max.ms\" = \"2000\"\n";
    let (status, log) = Relay::once(&db.name, &base, &["setup"], &[]);
    assert_eq!(status.code(), Some(0), "{log}");
    let c = connect(&db.conninfo()).await;
    let missing_event = writer::insert_event(&c, "missing", "m-1", 0).await.unwrap();

    // halt: stops with the hint, nothing confirmed past the event; within the 2 s set above,
    // not the 30 s default (the relay's own wait once ignored the setting: 30 s every time).
    let started = std::time::Instant::now();
    let (status, log) = Relay::once(&db.name, &base, &["run"], &[]);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the halt took {:?}:\n{log}",
        started.elapsed()
    );
    assert!(
        log.contains("does not exist") && log.contains("create it"),
        "{log}"
    );

    // dead-letter: the event goes to the dead-letter topic, the next one to its own.
    let cfg =
        format!("{base}\n[relay]\non_poison = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let next = writer::insert_event(&c, "present", "p-1", 0).await.unwrap();
    let b = broker.brokers();
    let (p, d) = (present.clone(), dlq.clone());
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until_from(&b, &[p, d], Duration::from_secs(90), |r| r.len() >= 2)
    })
    .await
    .unwrap();
    let in_dlq: Vec<_> = got.iter().filter(|r| r.topic == dlq).collect();
    assert!(
        in_dlq.iter().any(|r| r.header("id") == missing_event.id
            && r.header("outbox-relay.dlq.topic") == db.topic("missing")),
        "{got:#?}"
    );
    assert!(
        got.iter()
            .any(|r| r.topic == present && r.header("id") == next.id),
        "{got:#?}"
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
