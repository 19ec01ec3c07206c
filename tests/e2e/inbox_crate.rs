//! The client crate (`crates/outbox-inbox`) against the real servers: events enqueued as outbox
//! rows (default and custom layout) and as logical messages arrive through the relay with the
//! ids `enqueue` returned and nothing rolled back arrives; `process_once` claims an event once
//! even when two transactions race for it; the retention job deletes only old rows, in
//! batches; the retention check reads the topic's real settings from Kafka and refuses.

use std::time::Duration;

use outbox_inbox::{Event, Inbox, Layout, Outbox, Refusal, RetentionJob, TopicRetention, decide};
use serde_json::json;

use crate::support::{TestDb, connect, inbox::consumer_db, kafka, kafka_brokers, relay::Relay};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueued_rows_and_messages_arrive_with_their_ids() {
    let db = TestDb::new("enqueue").await;
    db.client
        .batch_execute(
            "CREATE TABLE billing_outbox (event_id text PRIMARY KEY, kind text NOT NULL, \
             aggregate_id text NOT NULL, event_type text NOT NULL, body text, \
             at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    let cfg = db.relay_config(&format!(
        "{}\n[[outbox]]\ntable = \"public.billing_outbox\"\ntopic = \"{db}.billing\"\n\
         key_column = \"aggregate_id\"\npayload_column = \"body\"\n\
         headers = {{ id = \"event_id\", eventType = \"event_type\" }}\n\
         \n[[message]]\nprefix = \"outbox\"\ntopic = \"{db}.{{aggregatetype}}\"\n",
        db.outbox_section(),
        db = db.name
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;

    let custom = Outbox::table_with(
        "public.billing_outbox",
        Layout {
            id: "event_id".into(),
            aggregate_type: "kind".into(),
            aggregate_id: "aggregate_id".into(),
            event_type: "event_type".into(),
            payload: "body".into(),
        },
    )
    .unwrap();
    let (table, message) = (Outbox::table(), Outbox::message("outbox").unwrap());
    let mut c = connect(&db.conninfo()).await;
    let mut expected = Vec::new(); // (topic, key, id, amount)
    for i in 0..3i64 {
        let tx = c.transaction().await.unwrap();
        for (o, kind) in [(&table, "order"), (&message, "order"), (&custom, "billing")] {
            let e = Event::new(kind, format!("a-{i}"), "Changed", json!({"amount": i}));
            let id = o.enqueue(&tx, &e).await.unwrap();
            assert_eq!(id, e.id());
            expected.push((db.topic(kind), format!("a-{i}"), id.to_string(), i));
        }
        tx.commit().await.unwrap();
    }
    // Rolled back: none of these may arrive.
    let tx = c.transaction().await.unwrap();
    let mut gone = Vec::new();
    for o in [&table, &message] {
        let e = Event::new("order", "gone", "Changed", json!({"amount": 99}));
        gone.push(o.enqueue(&tx, &e).await.unwrap().to_string());
    }
    tx.rollback().await.unwrap();

    let topics = vec![db.topic("order"), db.topic("billing")];
    let got = kafka::consume(topics, Duration::from_secs(60), expected.len()).await;
    for (topic, key, id, amount) in &expected {
        let r = got
            .iter()
            .find(|r| r.headers.get("id") == Some(id))
            .unwrap_or_else(|| panic!("event {id} did not arrive: {got:?}"));
        assert_eq!((&r.topic, r.key.as_deref()), (topic, Some(key.as_str())));
        assert_eq!(r.json(), json!({"amount": amount}), "value of {id}");
        assert_eq!(r.header("eventType"), "Changed");
    }
    assert!(
        got.iter()
            .all(|r| !gone.contains(&r.header("id").to_string()))
    );
    assert_eq!(got.len(), expected.len(), "nothing else arrived: {got:?}");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_once_claims_an_event_once_even_when_two_transactions_race() {
    let db = consumer_db("inbox_race").await;
    let inbox = Inbox::new();
    let mut a = connect(&db.conninfo()).await;
    let mut b = connect(&db.conninfo()).await;

    // A claim rolled back is no claim.
    let tx = a.transaction().await.unwrap();
    assert!(inbox.process_once(&tx, "svc", "e-1").await.unwrap());
    tx.rollback().await.unwrap();

    // Two deliveries of one event in two open transactions: the second waits for the first
    // and, once it committed, claims nothing.
    let ta = a.transaction().await.unwrap();
    assert!(inbox.process_once(&ta, "svc", "e-1").await.unwrap());
    let second = tokio::spawn(async move {
        let tb = b.transaction().await.unwrap();
        let claimed = outbox_inbox::process_once(&tb, "svc", "e-1").await.unwrap();
        tb.commit().await.unwrap();
        claimed
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second claim must wait");
    ta.commit().await.unwrap();
    assert!(!second.await.unwrap(), "the redelivery must not be applied");

    // Another consumer applies its own effect of the same event.
    let tx = a.transaction().await.unwrap();
    assert!(inbox.process_once(&tx, "other", "e-1").await.unwrap());
    tx.commit().await.unwrap();
    let n: i64 = a
        .query_one("SELECT count(*) FROM inbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);

    // No inbox table: the error says which migration creates it.
    let tx = a.transaction().await.unwrap();
    let err = Inbox::with_table("public.nope")
        .unwrap()
        .process_once(&tx, "svc", "e-2")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0003_inbox.sql"), "{err}");
    drop(tx);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_job_deletes_only_old_rows_in_batches() {
    let db = consumer_db("inbox_retention").await;
    db.client
        .batch_execute(
            "INSERT INTO inbox (consumer, event_id, processed_at) \
               SELECT 'svc', 'old-' || i, now() - interval '3 hours' FROM generate_series(1, 2500) i; \
             INSERT INTO inbox (consumer, event_id, processed_at) \
               SELECT 'other', 'old-' || i, now() - interval '3 hours' FROM generate_series(1, 10) i; \
             INSERT INTO inbox (consumer, event_id) \
               SELECT 'svc', 'new-' || i FROM generate_series(1, 10) i;",
        )
        .await
        .unwrap();
    let topic = TopicRetention {
        topic: "t".into(),
        retention_ms: 3_600_000,
        segment_ms: 600_000,
        compacted: false,
    };
    let allowed = decide(Duration::from_secs(7200), &[topic], None).unwrap();
    let deleted = RetentionJob::new()
        .consumer("svc")
        .batch_rows(1000)
        .run(&db.client, &allowed)
        .await
        .unwrap();
    assert_eq!((deleted.rows, deleted.batches), (2500, 3));
    let left: Vec<(String, i64)> = db
        .client
        .query(
            "SELECT consumer || ':' || split_part(event_id, '-', 1), count(*) FROM inbox GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(left, [("other:old".into(), 10), ("svc:new".into(), 10)]);
    let all = RetentionJob::new().run(&db.client, &allowed).await.unwrap();
    assert_eq!(all.rows, 10, "the other consumer's old rows");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_check_reads_the_topics_settings_from_kafka_and_refuses() {
    let name = format!(
        "t_retcheck_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let (finite, forever, compact) = (
        format!("{name}.finite"),
        format!("{name}.forever"),
        format!("{name}.compact"),
    );
    create_topics(&[
        (
            &finite,
            &[("retention.ms", "3600000"), ("segment.ms", "600000")],
        ),
        (&forever, &[("retention.ms", "-1")]),
        (&compact, &[("cleanup.policy", "compact,delete")]),
    ])
    .await;
    let mut cfg = rdkafka::ClientConfig::new();
    cfg.set("bootstrap.servers", kafka_brokers());
    let check = |topics: Vec<String>, retention: u64, window: Option<u64>| {
        let cfg = cfg.clone();
        async move {
            let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
            outbox_inbox::kafka::check_retention(
                &cfg,
                &topics,
                Duration::from_secs(retention),
                window.map(Duration::from_secs),
            )
            .await
        }
    };
    // One hour of retention.ms + 10 minutes of segment.ms + 5 minutes of margin = 4500 s.
    let err = check(vec![finite.clone()], 4000, None).await.unwrap_err();
    let outbox_inbox::Error::Refused(Refusal::ShorterThanTopic { bound, .. }) = &err else {
        panic!("{err}")
    };
    assert_eq!(*bound, Duration::from_secs(4500));
    assert!(
        err.to_string().contains("Keep inbox rows at least"),
        "{err}"
    );
    assert!(check(vec![finite.clone()], 4500, None).await.is_ok());

    for t in [&forever, &compact] {
        let err = check(vec![finite.clone(), t.clone()], 1_000_000, None)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, outbox_inbox::Error::Refused(Refusal::Unbounded { topic, .. }) if topic == t),
            "{err}"
        );
        assert!(err.to_string().contains("explicitly"), "{err}");
        // Told the replay window: allowed at and above it, and never below the finite topic's.
        assert!(
            check(vec![finite.clone(), t.clone()], 86_400, Some(86_400))
                .await
                .is_ok()
        );
        assert!(check(vec![t.clone()], 3_600, Some(86_400)).await.is_err());
        assert!(
            check(vec![finite.clone(), t.clone()], 4000, Some(60))
                .await
                .is_err()
        );
    }
    let missing = check(vec![format!("{name}.missing")], 1, None).await;
    assert!(
        missing.is_err(),
        "a missing topic must not pass: {missing:?}"
    );
}

/// Creates one-partition topics with settings (AlterConfigs would replace every setting at
/// once, so they are given at creation).
async fn create_topics(topics: &[(&String, &[(&str, &str)])]) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap();
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(t, settings)| {
            settings.iter().fold(
                NewTopic::new(t, 1, TopicReplication::Fixed(1)),
                |n, (k, v)| n.set(k, v),
            )
        })
        .collect();
    for r in admin
        .create_topics(&new, &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}
