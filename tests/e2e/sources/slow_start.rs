//! Instances that start together against a slow broker stop no source (issue 40, item 5).
//!
//! Three instances sharing one exactly-once config, each source with its own checkpoint topic,
//! started at once while their fresh broker runs 150 ms out of every 1.5 s: CreateTopics times
//! out, or an instance reads a checkpoint topic another is still creating (no partition, no
//! cleanup policy yet). Each such failure on the start path is transient: the source retries
//! after its backoff, and once the broker is itself again every source streams and delivers
//! exactly once. Before the fix they were definite, and a stopped source stayed stopped until
//! a reload.

use std::time::Duration;

use outbox_relay::telemetry::events::{PIPELINE_RESTART, SOURCE_STOPPED};

use super::{all_streaming, check_source, count_from_env, source_section, top_level};
use crate::support::{
    TestDb, broker::OwnBroker, check, connect, kafka, kafka_brokers, pg_port, relay::Relay, writer,
};

const KAFKA_PORT: u16 = 27392;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_that_start_together_on_a_slow_broker_stop_no_source() {
    let n = count_from_env("RELAY_TEST_SLOW_START_SOURCES", 4, 2);
    let broker = tokio::task::spawn_blocking(|| OwnBroker::start(KAFKA_PORT, ""))
        .await
        .unwrap();
    let brokers = format!("127.0.0.1:{KAFKA_PORT}");
    let mut dbs = Vec::new();
    for i in 0..n {
        dbs.push(TestDb::new(&format!("slowstart{i}")).await);
    }
    let mut cfg = format!(
        "{}[relay]\ndelivery = \"exactly-once\"\n\n",
        top_level(&dbs[0], pg_port())
            .replace(&kafka_brokers(), &brokers)
            .replace(
                "[kafka]\n",
                &format!(
                    "[kafka]\ntransactional_id = \"t-{}\"\nconnect_timeout_ms = 1000\n",
                    dbs[0].name
                )
            )
    );
    for (i, db) in dbs.iter().enumerate() {
        cfg.push_str(&source_section(&format!("s{i:02}"), db, ""));
    }
    let throttle = broker.throttle(Duration::from_millis(150), Duration::from_millis(1350));
    let mut relays: Vec<Relay> = (0..3)
        .map(|k| Relay::start(&format!("sources_slow_start_{k}"), &cfg))
        .collect();
    tokio::time::sleep(Duration::from_secs(30)).await;
    drop(throttle);
    let all: Vec<&TestDb> = dbs.iter().collect();
    all_streaming(&all, Duration::from_secs(120)).await;

    let logs: Vec<String> = relays.iter().map(Relay::log_text).collect();
    let stopped: Vec<&str> = logs
        .iter()
        .flat_map(|l| l.lines())
        .filter(|l| l.contains(SOURCE_STOPPED))
        .collect();
    assert!(stopped.is_empty(), "sources stopped for good: {stopped:#?}");
    // The broker was slow enough to matter: starts failed against it and were retried (the
    // build before the fix stopped 6 of the 12 source tasks here: 5 on the checkpoint topic's
    // OperationTimedOut, 1 on the publication race).
    let retried = |reason: &str| -> usize {
        logs.iter()
            .flat_map(|l| l.lines())
            .filter(|l| l.contains(PIPELINE_RESTART) && l.contains(reason))
            .count()
    };
    let checkpoint = retried("reason=\"checkpoint_topic_not_ready\"");
    let slow = checkpoint + retried("reason=\"kafka_unreachable\"");
    assert!(
        slow > 0,
        "no start failed against the broker: it was not slow"
    );
    let restarts = slow + retried("reason=\"postgres_query\"");

    // Every source delivers, exactly once.
    let mut total = check::Figures::default();
    for (i, db) in dbs.iter().enumerate() {
        let c = connect(&db.conninfo()).await;
        let written = writer::insert_orders(&c, 5, |k| format!("k-{k}")).await;
        let (topics, brokers, want) = (vec![db.topic("order")], brokers.clone(), written.len());
        let got = tokio::task::spawn_blocking(move || {
            kafka::consume_until_from(&brokers, &topics, Duration::from_secs(60), |r| {
                r.len() >= want
            })
        })
        .await
        .unwrap();
        check_source("sources_slow_start", i, db, &written, &got, &mut total);
    }
    check::record("sources_slow_start_all", &total);
    check::note(&format!(
        "sources_slow_start: {n} sources on 3 instances started on a throttled broker: {restarts} \
         start retries against it ({checkpoint} on the checkpoint topic), 0 sources stopped"
    ));
    for r in &mut relays {
        r.terminate(Duration::from_secs(30));
    }
    for db in dbs {
        db.cleanup().await;
    }
}
