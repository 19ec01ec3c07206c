//! Every committed event arrives with the right topic, key, value and headers; nothing rolled
//! back arrives; per aggregate, Kafka order equals commit order.

use std::time::Duration;

use crate::support::{TestDb, check, kafka, relay::Relay, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_with_rollbacks_and_savepoints_arrive_complete_and_in_commit_order() {
    let db = TestDb::new("concurrent").await;
    let mut relay = Relay::start(&db.name, &db.relay_config(&db.outbox_section()));
    relay
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;

    let stats = writer::run_writers(&db.conninfo(), 4, 60, 20).await;
    assert!(
        stats.rolled_back_txns > 0 && stats.rolled_back_savepoints > 0,
        "workload must roll back"
    );

    let got = kafka::consume(
        vec![db.topic("order")],
        Duration::from_secs(90),
        stats.written.len(),
    )
    .await;
    let f = check::check("concurrent_writers", |t| db.topic(t), &stats.written, &got);
    check::assert_absent(&stats.discarded, &got);
    assert_eq!(
        (f.lost, f.duplicated, f.order_violations, f.unexpected),
        (0, 0, 0, 0),
        "{f:?}"
    );

    // Everything acknowledged, the slot catches up with the end of WAL.
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(end, Duration::from_secs(30)).await;
    let status = relay.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "graceful stop must exit 0, got {status}; log:\n{}",
        relay.log_text()
    );
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_then_delete_in_one_transaction_is_relayed_and_updates_are_not() {
    let db = TestDb::new("insdel").await;
    let mut relay = Relay::start(&db.name, &db.relay_config(&db.outbox_section()));
    relay
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;

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
