//! Every committed event arrives with the right topic, key, value and headers; nothing rolled
//! back arrives; per aggregate, Kafka order equals commit order.

use std::time::Duration;

use crate::support::{TestDb, check, kafka, relay::Relay, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_with_rollbacks_and_savepoints_arrive_complete_and_in_commit_order() {
    let db = TestDb::new("concurrent").await;
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&db.outbox_section())).await;
    relay
        .delivers_concurrent_writers_once(&db, "concurrent_writers")
        .await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_then_delete_in_one_transaction_is_relayed_and_updates_are_not() {
    let db = TestDb::new("insdel").await;
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&db.outbox_section())).await;

    let mut c = crate::support::connect(&db.conninfo()).await;
    let tx = c.transaction().await.unwrap();
    let w1 = writer::insert_event(&tx, "order", "a-1", 0).await.unwrap();
    tx.execute("DELETE FROM outbox WHERE id = $1::text::uuid", &[&w1.id])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let tx = c.transaction().await.unwrap();
    let w2 = writer::insert_event(&tx, "order", "a-1", 0).await.unwrap();
    tx.commit().await.unwrap();
    c.execute("UPDATE outbox SET type = 'Changed'", &[])
        .await
        .unwrap();
    c.execute("DELETE FROM outbox", &[]).await.unwrap();
    c.execute("TRUNCATE outbox", &[]).await.unwrap();
    let left: i64 = c
        .query_one("SELECT count(*) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);

    let written = vec![w1, w2];
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 2).await;
    // Give an erroneously published UPDATE/DELETE time to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = {
        let more = kafka::consume(vec![db.topic("order")], Duration::from_secs(5), 3).await;
        if more.len() > got.len() { more } else { got }
    };
    let f = check::check("insert_then_delete", |t| db.topic(t), &written, &got);
    assert_eq!(
        (f.delivered, f.lost, f.duplicated, f.order_violations),
        (2, 0, 0, 0),
        "{f:?}"
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_outbox_tables_with_different_layouts_are_routed_by_their_own_mapping() {
    let db = TestDb::new("twotables").await;
    // The seed article's layout: the topic is a column, the key is aggregate_id.
    db.client
        .batch_execute(
            "CREATE TABLE payments_outbox (
                 id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                 aggregate_id text NOT NULL, topic text NOT NULL, event_type text NOT NULL,
                 payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());",
        )
        .await
        .unwrap();
    let payments_topic = db.topic("payments");
    let cfg = db.relay_config(&format!(
        "{}\n[[outbox]]\ntable = \"public.payments_outbox\"\ntopic = \"{{topic}}\"\n\
         key_column = \"aggregate_id\"\nheaders = {{ id = \"id\", eventType = \"event_type\" }}\n",
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;

    let mut c = crate::support::connect(&db.conninfo()).await;
    let mut written = Vec::new();
    for i in 0..5 {
        // One business transaction writes to both outboxes.
        let tx = c.transaction().await.unwrap();
        written.push(
            writer::insert_event(&tx, "order", &format!("o-{}", i % 2), 0)
                .await
                .unwrap(),
        );
        tx.execute(
            "INSERT INTO payments_outbox(aggregate_id, topic, event_type, payload) \
             VALUES ($1, $2, 'PaymentCaptured', jsonb_build_object('n', $3::int))",
            &[&format!("pay-{}", i % 2), &payments_topic, &i],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    let f = db
        .check_order_topic("two_outbox_tables_order", &written, Duration::from_secs(60))
        .await;
    f.assert_exactly_once("");

    let pay = kafka::consume(vec![payments_topic.clone()], Duration::from_secs(60), 5).await;
    assert_eq!(pay.len(), 5, "{pay:#?}");
    for (k, agg) in ["pay-0", "pay-1"].iter().enumerate() {
        let ns: Vec<i64> = pay
            .iter()
            .filter(|r| r.key.as_deref() == Some(agg))
            .map(|r| r.json()["n"].as_i64().unwrap())
            .collect();
        let want: Vec<i64> = (0..5).filter(|i| i % 2 == k as i64).collect();
        assert_eq!(ns, want, "per-key commit order on the seed layout");
    }
    assert!(
        pay.iter()
            .all(|r| r.header("eventType") == "PaymentCaptured" && !r.header("id").is_empty())
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
