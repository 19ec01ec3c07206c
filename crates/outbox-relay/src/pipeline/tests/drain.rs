//! The graceful stop reads its delivery reports through the loop's one report path
//! (`delivery::delivered`): in a Kafka transaction, a report saying "purged" does not hide the
//! refusal that made librdkafka purge the transaction.

use rdkafka::error::RDKafkaErrorCode;

use super::*;
use crate::{
    error::{Definite, Transient},
    sink::Origin,
};

const TOPIC: &str = "outbox.event.order";

/// Two records of one transaction in flight at the stop; their reports come back as `first`
/// then `second`. Returns how the drain ended and what it confirmed.
async fn drain_with(
    first: RDKafkaErrorCode,
    second: RDKafkaErrorCode,
) -> (Result<(), RelayError>, Lsn) {
    let mock = MockCluster::new(1).unwrap();
    let cfg = config(&mock.bootstrap_servers(), "transactional_id = \"drain\"\n");
    let (sink, _own_reports) = KafkaSink::new(&cfg.kafka).unwrap();
    let (to_loop, reports) = mpsc::unbounded_channel();
    let mut reports = Reports::new(reports);
    let applied = Arc::new(Mutex::new(Lsn::ZERO));
    let session = Scripted {
        events: VecDeque::new(),
        applied: applied.clone(),
        pause_before: None,
        played: 0,
    };
    let mut carry = Carry::default();
    let mut p = pipeline(&cfg, &sink, &mut reports, &mut carry, session, None);
    p.progress.begin(Lsn(COMMIT), 0).unwrap();
    let mut origins = Vec::new();
    for seq in 0..2 {
        let tx = p.progress.record().unwrap();
        p.progress.handed(10);
        origins.push(Origin {
            tx,
            commit_lsn: Lsn(COMMIT),
            seq,
            commit_time_unix_us: 0,
            head: crate::sink::NO_HEAD,
        });
    }
    p.progress.commit(Lsn(COMMIT), Lsn(END)).unwrap();
    for (origin, code) in origins.into_iter().zip([first, second]) {
        to_loop
            .send(Delivered {
                origin,
                bytes: 10,
                topic: TOPIC.into(),
                outcome: Err(refused_with(code)),
            })
            .unwrap();
    }
    let ended = p.drain(Duration::from_millis(10)).await;
    let confirmed = *applied.lock().unwrap();
    (ended, confirmed)
}

#[tokio::test(flavor = "current_thread")]
async fn a_stop_reports_the_refusal_behind_a_purged_transaction_not_the_purge() {
    let (ended, confirmed) = drain_with(
        RDKafkaErrorCode::PurgeQueue,
        RDKafkaErrorCode::MessageSizeTooLarge,
    )
    .await;
    let err = ended.expect_err("the drain must stop on the refusal");
    assert!(
        matches!(err, RelayError::Definite(Definite::DeliveryRefused { .. })),
        "the purge hid the refusal: {err:?}"
    );
    assert!(err.to_string().contains("max.message.bytes"), "{err}");
    assert_eq!(confirmed, Lsn::ZERO, "confirmed past a refused record");
}

/// Only purged reports (a transaction aborted for a reason no record carries): the stop
/// still ends on the failed delivery, confirming nothing.
#[tokio::test(flavor = "current_thread")]
async fn a_stop_with_only_purged_reports_confirms_nothing() {
    let (ended, confirmed) = drain_with(
        RDKafkaErrorCode::PurgeQueue,
        RDKafkaErrorCode::PurgeInflight,
    )
    .await;
    let err = ended.expect_err("a purged record is not delivered");
    assert!(
        matches!(err, RelayError::Transient(Transient::Delivery { .. })),
        "{err:?}"
    );
    assert_eq!(confirmed, Lsn::ZERO);
}
