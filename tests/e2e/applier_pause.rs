//! A partition the applier's consumer paused (its task's queue and the records waiting behind
//! it full) and then taken away and given back by rebalances is read again: librdkafka keeps
//! an application's pause across a new assignment, so the applier resumes what it assigns.

use std::time::Duration;

use crate::support::{
    TestDb,
    applier::{config, count, effect_schema, producer, send, setup},
    check, eventually, kafka,
    relay::Relay,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_taken_away_and_given_back_is_read_again() {
    let db = TestDb::new("ap_pause").await;
    // 3 ms per event: a backlog of 3,000 fills the task's queue (1,024) and the 1,024 records
    // allowed to wait behind it, so the partition is paused for seconds.
    effect_schema(&db, 0.003).await;
    let topic = format!("{}.p", db.name);
    kafka::create_topic(&topic, 1).await;
    let sub = format!("topics = [\"{topic}\"]");
    let session = "session_timeout_ms = 6000\n";
    let (cfg_a, cfg_b) = (
        config(&db, &sub, "pause-a", session),
        config(&db, &sub, "pause-b", session),
    );
    setup(&db, &cfg_a);
    let p = producer();
    let n = 3000;
    for i in 0..n {
        send(&p, &topic, &format!("p-{i}"), 1).await;
    }
    let mut a = Relay::start_with(&format!("{}-a", db.name), &cfg_a, &["apply", "run"], &[]);
    eventually("A applying", Duration::from_secs(60), || async {
        (count(&db, "SELECT count(*) FROM effects").await >= 100).then_some(())
    })
    .await;
    // B joins (a rebalance while A's partition is paused) and leaves (another): the partition
    // ends on A in any case.
    let mut b = Relay::start_with(&format!("{}-b", db.name), &cfg_b, &["apply", "run"], &[]);
    b.wait_log("apply_partitions_assigned", Duration::from_secs(60))
        .await;
    let during = count(&db, "SELECT count(*) FROM effects").await;
    assert!(b.terminate(Duration::from_secs(30)).success());
    eventually(
        "every event applied after the rebalances",
        Duration::from_secs(120),
        || async { (count(&db, "SELECT count(*) FROM effects").await == n).then_some(()) },
    )
    .await;
    let distinct = count(&db, "SELECT count(DISTINCT event_id) FROM effects").await;
    assert_eq!(distinct, n, "each event applied once");
    assert!(a.terminate(Duration::from_secs(30)).success());
    check::note(&format!(
        "applier_pause: {n} events through two rebalances with the partition paused ({during} applied when B joined), each once"
    ));
    db.cleanup().await;
}
