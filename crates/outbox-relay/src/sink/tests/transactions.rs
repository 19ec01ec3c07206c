//! The sink's Kafka transactions against librdkafka's mock cluster: the two producers taking
//! turns, a commit that waits for its records' reports, an abort the broker refuses.

use std::{sync::atomic::Ordering, time::Duration};

use rdkafka::{mocking::MockCluster, producer::Producer};

use super::{kafka_config, origins, record};
use crate::sink::KafkaSink;

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

/// Two transactional producers: the next transaction starts only once the report of every
/// record of the committing one is in (per-partition order across the producers: a record of
/// the next transaction must not reach a partition before an earlier one still in flight). With
/// a 200 ms round trip and `linger.ms` at ten minutes, nothing would be reported yet had
/// `commit_start` not flushed and waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_transaction_starts_after_the_committing_ones_records_are_acknowledged() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    mock.create_topic("cp", 1, 1).unwrap();
    mock.broker_round_trip_time(1, Duration::from_millis(200))
        .unwrap();
    let cfg = kafka_config(
        &mock.bootstrap_servers(),
        "linger_ms = 600000\ntransactional_id = \"two\"\n",
    );
    let (sink, mut reports) = KafkaSink::new(&cfg).unwrap();
    assert!(sink.pipelines_commits());
    let timeout = Duration::from_secs(30);
    sink.fence_and_begin(timeout).await.unwrap();
    let origin = origins();
    for seq in 0..3 {
        sink.send(&record("t", "k"), origin(seq)).await.unwrap();
    }
    sink.send_checkpoint("cp", "key", b"{}", true)
        .await
        .unwrap();
    let (mut running, _) = sink.commit_start(timeout).await.unwrap();
    assert_eq!(
        sink.active.load(Ordering::Relaxed) % 2,
        1,
        "the other producer"
    );
    let mut seen = Vec::new();
    while let Ok(d) = reports.try_recv() {
        assert!(d.outcome.is_ok(), "{:?}", d.outcome);
        seen.push(d.origin.seq);
    }
    assert_eq!(seen, [0, 1, 2], "every report before the next transaction");
    sink.commit_settled(running.ended().await).unwrap();
}

/// Two transactional producers, Kafka away longer than the commit's flush may wait: the next
/// transaction must not start on the other producer while this one's records are still queued
/// (once Kafka was back, the next one's records could reach a partition first: the fenced e2e
/// `kafka_down_longer_than_wal_sender_timeout...` saw 3 events reordered that way). The
/// commit fails instead (the pipeline aborts it and restarts from the last confirmed LSN).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_records_are_not_all_acknowledged_does_not_start_the_next_transaction() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    mock.create_topic("cp", 1, 1).unwrap();
    let cfg = kafka_config(&mock.bootstrap_servers(), "transactional_id = \"away\"\n");
    let (sink, _reports) = KafkaSink::new(&cfg).unwrap();
    sink.fence_and_begin(Duration::from_secs(30)).await.unwrap();
    mock.broker_down(1).unwrap();
    let origin = origins();
    for seq in 0..3 {
        sink.send(&record("t", "k"), origin(seq)).await.unwrap();
    }
    let started = sink.commit_start(Duration::from_millis(500)).await;
    let Err(e) = started else {
        panic!("the commit started with records unacknowledged");
    };
    assert!(e.to_string().contains("not acknowledged"), "{e}");
    assert_eq!(sink.unreported(), 3);
    assert_eq!(
        sink.active.load(Ordering::Relaxed) % 2,
        0,
        "the next transaction began on the other producer"
    );
    mock.broker_up(1).unwrap();
}

/// The relay's abort of a failed pipeline's transaction answered INVALID_TXN_STATE (as the
/// clean-clone CI of ba52eba saw, librdkafka issue 4849): the abort fails, the producer's error
/// is fatal, so the next start builds a new one (`fatal_error`), and librdkafka's two log lines
/// for it, taken from that run, are the ones the context lowers to a warning while the relay
/// aborts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_the_broker_refuses_leaves_a_fatal_producer_and_is_a_warning() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let cfg = kafka_config(
        &mock.bootstrap_servers(),
        "transactional_id = \"refused-abort\"\n",
    );
    let (sink, _reports) = KafkaSink::new(&cfg).unwrap();
    sink.fence_and_begin(Duration::from_secs(30)).await.unwrap();
    let origin = origins();
    sink.send(&record("t", "k"), origin(0)).await.unwrap();
    assert!(sink.reports_served(Duration::from_secs(10)).await);
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE],
    );
    assert!(sink.abort(Duration::from_secs(10)).await.is_err());
    assert!(
        sink.fatal_error().is_some(),
        "the next start must rebuild it"
    );
    assert!(!sink.context().aborting.load(Ordering::Acquire));
    for (fac, line) in [
        (
            "TXNERR",
            "[thrd:main]: Fatal transaction error: Failed to end transaction: Broker: Producer \
             attempted a transactional operation in an invalid state (INVALID_TXN_STATE)",
        ),
        (
            "FATAL",
            "[thrd:main]: Fatal error: Broker: Producer attempted a transactional operation in \
             an invalid state: Failed to end transaction: Broker: Producer attempted a \
             transactional operation in an invalid state",
        ),
    ] {
        assert!(crate::sink::context::own_abort_failed(fac, line), "{line}");
    }
    assert!(!crate::sink::context::own_abort_failed(
        "ADDPARTS",
        "Failed to add partition \"t\" [0] to transaction: Broker: Topic authorization failed"
    ));
}
