//! A record Kafka refuses for good under `relay.on_poison = "halt"`: the error names the change
//! it came from (source, commit LSN, position), whether the producer refused it at once or a
//! delivery report did.

use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::*;
use crate::error::{Definite, RefusedChange};

/// A transactional logical message with prefix `outbox` whose payload is `payload_bytes` long.
fn message(id: &str, payload_bytes: usize) -> ReplicationEvent {
    let content = format!(
        r#"{{"id": "{id}", "aggregatetype": "order", "aggregateid": "a1", "type": "T", "payload": "{}"}}"#,
        "x".repeat(payload_bytes)
    );
    ReplicationEvent::Message {
        transactional: true,
        lsn: lsn(COMMIT - 8),
        prefix: "outbox".into(),
        content: Bytes::from(content),
    }
}

/// Runs the script to the loop's end and returns the change its refusal names.
async fn refused_change(run: &mut Run) -> (RefusedChange, String) {
    let err = run
        .outcome(None, |_| false, |_| {})
        .await
        .expect_err("the loop must stop on the refusal");
    let text = err.to_string();
    match err {
        RelayError::Definite(Definite::DeliveryRefused {
            change: Some(change),
            ..
        }) => (change, text),
        other => panic!("not a refusal naming a change: {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_record_the_producer_refuses_names_its_prefix_commit_lsn_and_position() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("outbox.event.order", 1, 1).unwrap();
    // Two sources: the name comes from the refusing call, not from the config.
    let cfg = config(
        &mock.bootstrap_servers(),
        "properties = { \"message.max.bytes\" = \"1000\" }\n\
         [[outbox]]\ntable = \"public.outbox\"\n[[message]]\nprefix = \"outbox\"\n",
    );
    let mut run = Run::new(cfg);
    run.script = VecDeque::from([
        begin(COMMIT),
        xlog(relation(100, "public", "outbox", &outbox_columns())),
        outbox_row("e1"),
        message("m1", 5_000),
        commit(COMMIT, END),
        keepalive(),
    ]);
    let (change, text) = refused_change(&mut run).await;
    assert_eq!(
        change,
        RefusedChange {
            routed: Some("message:outbox".into()),
            commit_lsn: Lsn(COMMIT),
            seq: 1,
            in_batch: false,
        }
    );
    assert!(
        text.contains(
            "It is the logical message with prefix \"outbox\" committed at 0/1000 (position 1)"
        ),
        "{text}"
    );
    assert_eq!(
        run.applied(),
        Lsn::ZERO,
        "confirmed past the refused change"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_record_a_delivery_report_refuses_names_its_position_and_the_only_source() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("outbox.event.order", 1, 1).unwrap();
    // The broker refuses the first produce request for size.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let cfg = config(
        &mock.bootstrap_servers(),
        "[[message]]\nprefix = \"outbox\"\n",
    );
    let mut run = Run::new(cfg);
    run.script = VecDeque::from([
        begin(COMMIT),
        message("m1", 10),
        commit(COMMIT, END),
        keepalive(),
    ]);
    let (change, text) = refused_change(&mut run).await;
    assert_eq!(
        change,
        RefusedChange {
            routed: Some("message:outbox".into()),
            commit_lsn: Lsn(COMMIT),
            seq: 0,
            in_batch: true,
        }
    );
    assert!(
        text.contains(
            "The first record refused is the logical message with prefix \"outbox\" committed \
             at 0/1000 (position 0)"
        ),
        "{text}"
    );
    assert_eq!(
        run.applied(),
        Lsn::ZERO,
        "confirmed past the refused change"
    );
}

/// A logical message committed at `commit` (a transaction of its own, see [`message`]).
fn message_at(id: &str, commit: u64) -> ReplicationEvent {
    match message(id, 10) {
        ReplicationEvent::Message {
            transactional,
            prefix,
            content,
            ..
        } => ReplicationEvent::Message {
            transactional,
            lsn: lsn(commit - 8),
            prefix,
            content,
        },
        _ => unreachable!(),
    }
}

/// Issue 40, item 7 (the halt policy broke per-key order): the broker refuses a partition's
/// first record for good while the next event of the same key is on its way. Kafka stores a
/// first sequence other than 0 from a producer it knows nothing of on that partition, and
/// librdkafka sends a request already queued even after its gapless guarantee raised the fatal
/// error, so the later event used to be stored (its report a success) and, once the refused
/// one was sent again, sit before it. The head rule hands the second over only after the
/// first one's report: here that report stops the relay, and the partition holds nothing.
#[tokio::test(flavor = "current_thread")]
async fn nothing_committed_after_a_refused_first_record_reaches_its_partition() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("outbox.event.order", 1, 1).unwrap();
    let cfg = config(
        &mock.bootstrap_servers(),
        "[[message]]\nprefix = \"outbox\"\n",
    );
    let mut run = Run::new(cfg);
    // Connected first; then every answer takes 250 ms and the first record is refused.
    run.sink
        .check_reachable(Duration::from_secs(10))
        .await
        .unwrap();
    mock.broker_round_trip_time(1, Duration::from_millis(250))
        .unwrap();
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    run.script = VecDeque::from([
        begin(COMMIT),
        message_at("m1", COMMIT),
        commit(COMMIT, END),
        begin(COMMIT2),
        message_at("m2", COMMIT2),
        commit(COMMIT2, END2),
        keepalive(),
    ]);
    // The second transaction arrives while the first record waits for its answer.
    run.pause_before = Some(3);
    let (change, _) = refused_change(&mut run).await;
    assert_eq!((change.commit_lsn, change.seq), (Lsn(COMMIT), 0));
    assert_eq!(
        run.applied(),
        Lsn::ZERO,
        "confirmed past the refused change"
    );
    let stored = stored_ids(&mock, "outbox.event.order");
    assert!(stored.is_empty(), "the partition holds {stored:?}");
}

/// The `id` headers of what partition 0 of `topic` holds (read for 3 s).
fn stored_ids<C: rdkafka::ClientContext>(mock: &MockCluster<'_, C>, topic: &str) -> Vec<String> {
    use rdkafka::{
        Message, TopicPartitionList,
        consumer::{BaseConsumer, Consumer},
        message::Headers,
    };
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "readback")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut ids = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let id = m
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == "id"))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned());
            ids.push(id.unwrap_or_default());
        }
    }
    ids
}
