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
