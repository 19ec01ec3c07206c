//! The Rust recipe (`examples/inbox-rust`) against outbox-relay's real output: events enqueued
//! with the client crate, relayed, consumed once; then re-delivered (a duplicate record of one
//! event, and the whole topic again for a new consumer group): every redelivery is counted as a
//! duplicate and the totals do not move. A record without an `id` header stops the program.

use std::{collections::BTreeMap, process::Command, time::Duration};

use outbox_inbox::{Event, Outbox};
use serde_json::json;

use crate::support::{
    TestDb, check, connect,
    inbox::{RunFigures, consumer_db, example_binary},
    kafka, kafka_brokers,
    relay::Relay,
};

/// Runs the recipe until it is idle; returns whether it succeeded, its figures and stderr.
async fn recipe(consumer: &TestDb, topic: &str, group: &str) -> (bool, RunFigures, String) {
    let bin = example_binary("inbox-rust", "inbox-rust");
    let (db, port, topic, group) = (
        consumer.name.clone(),
        consumer.port,
        topic.to_string(),
        group.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        let out = Command::new(bin)
            .envs([
                ("PGHOST", "127.0.0.1".to_string()),
                ("PGPORT", port.to_string()),
                ("PGUSER", "postgres".into()),
                ("PGDATABASE", db),
                ("BROKERS", kafka_brokers()),
                ("TOPIC", topic),
                ("GROUP", group),
                ("CONSUMER", "recipe".into()),
                ("IDLE_MS", "1500".into()),
            ])
            .output()
            .expect("run inbox-rust");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), RunFigures::parse(&stdout), stderr)
    })
    .await
    .unwrap()
}

async fn totals(consumer: &TestDb) -> BTreeMap<String, (i64, i64)> {
    consumer
        .client
        .query(
            "SELECT aggregate_id, events, amount::bigint FROM recipe_totals",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_recipe_applies_relayed_events_once_and_counts_redeliveries() {
    let producer = TestDb::new("recipe_rust_p").await;
    let consumer = consumer_db("recipe_rust_c").await;
    let mut relay = Relay::streaming(
        &producer.name,
        &producer.relay_config(&producer.outbox_section()),
    )
    .await;
    let topic = producer.topic("recipe");

    let outbox = Outbox::table();
    let mut c = connect(&producer.conninfo()).await;
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut first = None;
    for i in 0..40i64 {
        let tx = c.transaction().await.unwrap();
        let agg = format!("a-{}", i % 5);
        let e = Event::new("recipe", &agg, "Changed", json!({"amount": i}));
        outbox.enqueue(&tx, &e).await.unwrap();
        tx.commit().await.unwrap();
        let t = expected.entry(agg.clone()).or_default();
        *t = (t.0 + 1, t.1 + i);
        first.get_or_insert((agg, e.id().to_string(), i));
    }
    kafka::consume(vec![topic.clone()], Duration::from_secs(60), 40).await;

    let (ok, f, err) = recipe(&consumer, &topic, "g1").await;
    assert!(ok, "{err}");
    assert!(f.applied == 40 && f.duplicates == f.records - 40, "{f:?}");
    assert_eq!(totals(&consumer).await, expected);

    // A duplicate of the first event, as a producer retry or a relay restart would send it.
    let (agg, id, amount) = first.unwrap();
    kafka::produce_one(&topic, &agg, &json!({"amount": amount}).to_string(), &id).await;
    let (ok, again, err) = recipe(&consumer, &topic, "g1").await;
    assert!(ok, "{err}");
    assert_eq!((again.records, again.applied, again.duplicates), (1, 0, 1));

    // A new consumer group (offsets from the earliest): everything again, nothing applied.
    let (ok, replay, err) = recipe(&consumer, &topic, "g2").await;
    assert!(ok, "{err}");
    assert_eq!(
        (replay.records, replay.applied, replay.duplicates),
        (f.records + 1, 0, f.records + 1)
    );
    assert_eq!(totals(&consumer).await, expected);
    check::note(&format!(
        "inbox_rust_recipe: {} events relayed, applied {}; redeliveries absorbed {} (1 duplicate \
         record + a replay of {})",
        40,
        f.applied,
        again.duplicates + replay.duplicates,
        replay.records
    ));

    // A record without an `id` header stops the recipe, and is not skipped: again next run.
    let p: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap();
    p.send(
        rdkafka::producer::FutureRecord::to(&topic)
            .key("a-0")
            .payload("{\"amount\": 1}"),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let (ok, f, err) = recipe(&consumer, &topic, "g1").await;
        assert!(!ok && err.contains("no `id` header"), "{f:?} {err}");
        assert_eq!(f.applied, 0);
    }
    assert_eq!(totals(&consumer).await, expected);
    relay.terminate(Duration::from_secs(30));
    producer.cleanup().await;
    consumer.cleanup().await;
}
