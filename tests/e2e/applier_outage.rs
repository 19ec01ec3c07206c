//! The applier's log through a broker outage (issue 41, item 4): its broker (one of this
//! test's own) killed with SIGKILL for `RELAY_TEST_OUTAGE_SECS` seconds (default 20) while the
//! applier runs, then started again. librdkafka reports every failed reconnect, several a
//! second; the log must say it once when the broker goes (`apply_kafka_unreachable`), remind
//! once a minute, and say once when it is back (`apply_kafka_reachable`), with no
//! `librdkafka: Global error` line, and the records written after the outage are applied.

use std::time::Duration;

use crate::support::{
    TestDb,
    applier::{config, count, effect_schema, send, setup},
    broker::OwnBroker,
    check, eventually, kafka,
    relay::Relay,
};
use rdkafka::{ClientConfig, producer::FutureProducer};

/// A broker of this test's own (killed on purpose; controller: +1).
const KAFKA_PORT: u16 = 28050;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_is_one_line_when_it_goes_and_one_when_it_is_back() {
    let outage_s: u64 = std::env::var("RELAY_TEST_OUTAGE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let broker = tokio::task::spawn_blocking(|| OwnBroker::start(KAFKA_PORT, ""))
        .await
        .unwrap();
    let brokers = format!("127.0.0.1:{KAFKA_PORT}");
    let db = TestDb::new("ap_outage").await;
    effect_schema(&db, 0.0).await;
    let topic = format!("{}.out", db.name);
    kafka::create_topic_on(&brokers, &topic, 2).await;
    let cfg = config(&db, &format!("topics = [\"{topic}\"]"), "outage", "")
        .replace(&crate::support::kafka_brokers(), &brokers);
    setup(&db, &cfg);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .unwrap();
    for i in 0..5 {
        send(&producer, &topic, &format!("before-{i}"), 1).await;
    }
    let mut a = Relay::start_with(&format!("{}-run", db.name), &cfg, &["apply", "run"], &[]);
    eventually("the first events", Duration::from_secs(60), || async {
        (count(&db, "SELECT count(*) FROM effects").await == 5).then_some(())
    })
    .await;
    let before = a.log_text().lines().count();

    broker.kill9();
    tokio::time::sleep(Duration::from_secs(outage_s)).await;
    let broker = tokio::task::spawn_blocking(move || {
        broker.restart("");
        broker
    })
    .await
    .unwrap();
    a.wait_log("apply_kafka_reachable", Duration::from_secs(60))
        .await;
    for i in 0..5 {
        send(&producer, &topic, &format!("after-{i}"), 1).await;
    }
    eventually(
        "the events written after the outage",
        Duration::from_secs(60),
        || async { (count(&db, "SELECT count(*) FROM effects").await == 10).then_some(()) },
    )
    .await;
    assert!(a.terminate(Duration::from_secs(30)).success());
    let log = a.log_text();
    let during: Vec<&str> = log.lines().skip(before).collect();
    let loud: Vec<&&str> = during
        .iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    let said = |what: &str| during.iter().filter(|l| l.contains(what)).count();
    let (down, back, global) = (
        said("apply_kafka_unreachable:"),
        said("apply_kafka_reachable:"),
        said("librdkafka: Global error"),
    );
    check::note(&format!(
        "applier_outage: broker away {outage_s} s: {} WARN/ERROR lines ({down} unreachable, \
         {back} reachable, {global} librdkafka global errors, {} other)",
        loud.len(),
        loud.len() - down
    ));
    let reminders = outage_s / 60;
    assert_eq!(
        (down as u64, back, global),
        (1 + reminders, 1, 0),
        "one line when it goes, one a minute, one when it is back: {loud:#?}"
    );
    assert!(
        loud.len() as u64 <= 1 + reminders + 3,
        "hardly anything else: {loud:#?}"
    );
    drop(broker);
    db.cleanup().await;
}
