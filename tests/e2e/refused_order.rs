//! Per-key order around a record Kafka refuses for good: nothing of the same key that was
//! committed after it may reach the topic first, in either poison policy. The refused record
//! and later records of its aggregate go to one partition; without librdkafka's gapless
//! guarantee the broker refuses the batch and, once the idempotent producer has bumped its
//! epoch, accepts the later batches, which leaves later events in the topic ahead of earlier
//! ones for good.

use std::time::Duration;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, writer};

/// One transaction with a small event and a ~900 kB incompressible one. Returns the small
/// event and the big event's id.
async fn refused_transaction(db: &TestDb) -> (writer::Written, String) {
    let mut c = connect(&db.conninfo()).await;
    let tx = c.transaction().await.unwrap();
    let first = writer::insert_event(&tx, "order", "agg-1", 0)
        .await
        .unwrap();
    let big_id = uuid::Uuid::new_v4().to_string();
    // 28,000 md5 digests: 896 kB of hex that no codec squeezes under the topic's 500 kB.
    tx.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         SELECT $1::text::uuid, 'order', 'agg-1', 'Event', \
                jsonb_build_object('big', string_agg(md5(random()::text || g::text), '')) \
         FROM generate_series(1, 28000) g",
        &[&big_id],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    (first, big_id)
}

/// The refused transaction and 400 later events of its aggregate, all in the slot before the
/// relay starts: they reach it in one burst.
async fn backlog(db: &TestDb, cfg: &str) -> (Vec<writer::Written>, String) {
    let (status, log) = Relay::once(&db.name, cfg, &["setup"], &[]);
    assert!(status.success(), "{log}");
    let (first, big) = refused_transaction(db).await;
    let mut written = vec![first];
    for _ in 0..400 {
        written.push(
            writer::insert_event(&db.client, "order", "agg-1", 0)
                .await
                .unwrap(),
        );
    }
    (written, big)
}

fn cfg(db: &TestDb, relay: &str) -> String {
    db.relay_config(&format!("{}\n[relay]\n{relay}\n", db.outbox_section()))
}

/// A topic that refuses records over 500 kB.
async fn small_topic(db: &TestDb) -> String {
    let topic = db.topic("order");
    kafka::create_topic_with_max_bytes(&topic, 500_000).await;
    topic
}

/// After a halt: the operator raises the limit, the relay sends everything again, and the
/// first occurrences of `written` must be in commit order.
async fn raise_limit_and_check(db: &TestDb, cfg: &str, test: &str, written: &[writer::Written]) {
    let topic = db.topic("order");
    kafka::set_topic_config(&topic, "max.message.bytes", "2000000").await;
    let mut relay = Relay::streaming(&db.name, cfg).await;
    let got = kafka::consume(vec![topic], Duration::from_secs(60), written.len() + 1).await;
    let small: Vec<kafka::Rec> = got
        .into_iter()
        .filter(|r| written.iter().any(|w| w.id == r.header("id")))
        .collect();
    let f = check::check(test, |t| db.topic(t), written, &small);
    f.assert_nothing_lost_or_reordered(&relay.log_text());
    relay.terminate(Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halt_keeps_commit_order_around_a_refused_record() {
    let db = TestDb::new("ordhalt").await;
    small_topic(&db).await;
    let cfg = cfg(&db, "");
    let (written, _big) = backlog(&db, &cfg).await;
    let mut relay = Relay::start(&db.name, &cfg);
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("max.message.bytes"), "{log}");
    raise_limit_and_check(&db, &cfg, "refused_order_halt", &written).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_keeps_commit_order_around_a_refused_record() {
    let db = TestDb::new("orddlq").await;
    let topic = small_topic(&db).await;
    let cfg = cfg(
        &db,
        &format!(
            "on_poison = \"dead-letter\"\ndead_letter_topic = \"{}\"",
            db.topic("dlq")
        ),
    );
    let (written, big) = backlog(&db, &cfg).await;
    let mut relay = Relay::start(&db.name, &cfg);
    let got = kafka::consume(vec![topic.clone()], Duration::from_secs(90), written.len()).await;
    let f = check::check("refused_order_dead_letter", |t| db.topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered(&relay.log_text());
    assert!(
        got.iter().all(|r| r.header("id") != big),
        "the refused record cannot be in its topic"
    );
    let dlq = vec![db.topic("dlq")];
    let big2 = big.clone();
    let dead = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&dlq, Duration::from_secs(60), |r| {
            r.iter().any(|r| r.header("id") == big2)
        })
    })
    .await
    .unwrap();
    assert!(dead.iter().any(|r| r.header("id") == big), "{dead:#?}");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

/// The same while streaming, with the later events committed in a burst 30 ms after the
/// refused transaction: the refused batch and later batches of the partition are in flight
/// together. This is the shape that reproduces the fault (the backlog above puts every later
/// record into the refused request itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halt_keeps_commit_order_when_later_batches_are_in_flight() {
    let db = TestDb::new("ordlive").await;
    small_topic(&db).await;
    let cfg = cfg(&db, "");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let (first, _big) = refused_transaction(&db).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    // 200 later events of the same aggregate, one transaction each, in a burst.
    db.client
        .batch_execute(
            "DO $$ DECLARE s int; BEGIN FOR i IN 1..200 LOOP \
               UPDATE agg SET seq = seq + 1 WHERE id = 'agg-1' RETURNING seq INTO s; \
               INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
                 VALUES (gen_random_uuid(), 'order', 'agg-1', 'Event', \
                         jsonb_build_object('aggregate', 'agg-1', 'seq', s, 'writer', 0, 'note', 'x')); \
               COMMIT; \
             END LOOP; END $$",
        )
        .await
        .unwrap();
    let mut written = vec![first];
    for row in db
        .client
        .query(
            "SELECT id::text, (payload->>'seq')::int, payload::text FROM outbox \
             WHERE payload ? 'seq' AND (payload->>'seq')::int > 1 ORDER BY 2",
            &[],
        )
        .await
        .unwrap()
    {
        written.push(writer::Written {
            id: row.get(0),
            aggregate_type: "order".into(),
            aggregate: "agg-1".into(),
            seq: row.get(1),
            payload: serde_json::from_str(row.get::<_, &str>(2)).unwrap(),
        });
    }
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{log}");
    raise_limit_and_check(&db, &cfg, "refused_order_halt_live", &written).await;
    db.cleanup().await;
}
