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

/// A session whose status updates never leave (the server is slow, or the interval long): its
/// last sent position stays at zero.
struct Unsent;

impl Session for Unsent {
    async fn recv(&mut self) -> Result<Option<StreamEvent>, PgWireError> {
        std::future::pending().await
    }
    fn update_applied_lsn(&self, _: Lsn) {}
    fn last_applied_lsn(&self) -> Lsn {
        Lsn::ZERO
    }
    fn is_running(&self) -> bool {
        true
    }
}

/// How long (paused clock) the drain of a connection that started at 0/500 takes, with a
/// status interval of 1 s, after `moved` (the stream's progress before the stop, if any) was
/// confirmed.
async fn drain_time(moved: Option<Lsn>) -> Duration {
    let cfg = super::paused::memory_config("");
    let (sink, mut reports) = super::memory::MemorySink::new(false, false, Duration::ZERO);
    let mut carry = Carry::default();
    let health = HEALTH.get_or_init(crate::observe::health::Shared::new);
    let mut conn = connection(&cfg, Unsent, None);
    conn.start.start = Lsn(0x500);
    let mut p = Pipeline::new(&cfg, &sink, &mut reports, &mut carry, health, conn);
    if let Some(lsn) = moved {
        p.progress.keepalive(lsn);
        p.confirm();
    }
    let at = tokio::time::Instant::now();
    p.drain(Duration::from_secs(1)).await.unwrap();
    at.elapsed()
}

/// A stop waits for the status update that carries its last confirmation (bounded by two
/// intervals and a second), and for none when nothing was confirmed on the connection: the
/// slot already holds where the connection started. It used to wait for the start position
/// too, which the session never sends, so every stop of a relay that had confirmed nothing yet
/// took the whole bound (3 s at the default interval, 9 s at 4 s).
#[tokio::test(start_paused = true)]
async fn a_stop_waits_for_the_last_confirmation_to_leave_and_for_nothing_else() {
    assert_eq!(drain_time(None).await, Duration::ZERO);
    let waited = drain_time(Some(Lsn(0x600))).await;
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
}
