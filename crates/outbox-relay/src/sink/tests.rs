//! The sink against librdkafka's mock cluster and its pure helpers.

use std::{sync::atomic::Ordering, time::Duration};

use rdkafka::{mocking::MockCluster, producer::Producer};

use super::{KafkaSink, transactional_ids};
use crate::config::Config;

fn kafka_config(brokers: &str, extra: &str) -> crate::config::KafkaConfig {
    let dir = std::env::temp_dir().join(format!("relay-sink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.toml", extra.len()));
    std::fs::write(
        &path,
        format!("[kafka]\nbrokers = \"{brokers}\"\nlinger_ms = 0\n{extra}"),
    )
    .unwrap();
    Config::load(Some(&path), std::iter::empty()).unwrap().kafka
}

#[test]
fn two_transactional_ids_by_default_one_on_request_none_without() {
    let ids = |extra| transactional_ids(&kafka_config("127.0.0.1:1", extra));
    assert_eq!(ids("transactional_id = \"r\"\n"), ["r", "r.2"]);
    assert_eq!(
        ids("transactional_id = \"r\"\ntransaction_producers = 1\n"),
        ["r"]
    );
    assert!(ids("").is_empty());
}

/// Transactions alternate between the two producers. (That a new instance fences both
/// needs a real broker, whose coordinator bumps the epoch; librdkafka's mock does not:
/// e2e `fencing::a_start_fences_both_transactional_ids`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_alternate_between_the_two_producers() {
    let t = Duration::from_secs(10);
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("cp", 1, 1).unwrap();
    let cfg = kafka_config(&mock.bootstrap_servers(), "transactional_id = \"tid\"\n");
    let (sink, _reports) = KafkaSink::new(&cfg).unwrap();
    assert_eq!(sink.producers.len(), 2);
    sink.fence_and_begin(t).await.unwrap();
    for expected in [1, 0, 1] {
        sink.send_checkpoint("cp", "k", b"v", true).await.unwrap();
        sink.commit_and_begin(t).await.unwrap();
        assert_eq!(sink.active.load(Ordering::Relaxed) % 2, expected);
    }
    // The open transaction is on producer 1 only: producer 0 has none to commit.
    let other = sink
        .transaction_on(0, move |p| p.commit_transaction(t))
        .await;
    assert!(other.is_err(), "producer 0 had a transaction open too");
}

#[test]
fn the_refused_topic_is_read_from_librdkafkas_message() {
    let m = "TxnCoordinator/1: Failed to add partition \"t_kacl.secret\" [0] to transaction: \
             Broker: Topic authorization failed";
    assert_eq!(super::refused_topic_in(m), Some("t_kacl.secret"));
    let collateral = "TxnCoordinator/1: Failed to add partition \"t_kacl.order\" [0] to \
                      transaction: Broker: Operation not attempted";
    assert_eq!(super::refused_topic_in(collateral), None);
}

#[test]
fn startup_notices_are_not_warnings() {
    assert!(super::is_benign(
        "[thrd:app]: Configuration property enable.gapless.guarantee is experimental: ..."
    ));
    assert!(super::is_benign(
        "TxnCoordinator/1: FindCoordinator: Coordinator load in progress: retrying"
    ));
    assert!(!super::is_benign(
        "ProduceRequest failed: Broker: Message size too large"
    ));
}
