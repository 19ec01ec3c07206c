//! The loop over the in-memory sink ([`MemorySink`]) on tokio's paused clock: no broker, no
//! wall-clock sleeps. The test drives Kafka's side (which report comes when, how a commit
//! ends) and checks what the loop confirms and when it stops.

use std::future::Future;

use rdkafka::error::RDKafkaErrorCode;
use tokio::time::Instant;

use super::{memory::MemorySink, memory::Step, *};
use crate::error::{Definite, Transient};

/// What a run ended with.
pub(super) struct Ended {
    pub(super) result: Result<(), RelayError>,
    /// The LSN the loop last confirmed.
    pub(super) confirmed: Lsn,
}

/// A script, and before which of its events the stream is quiet for 300 ms.
pub(super) struct Script(
    pub(super) VecDeque<ReplicationEvent>,
    pub(super) Option<usize>,
);

/// Runs the loop (then, after a stop, the drain, as `run_pipeline` does) over `script` and
/// `sink`, beside `driver`, which plays Kafka and may stop the loop (SIGTERM) with the sender
/// it gets.
pub(super) async fn run<F: Future<Output = ()>>(
    cfg: &Config,
    sink: &MemorySink,
    reports: &mut Reports,
    script: Script,
    driver: impl FnOnce(Arc<Mutex<Lsn>>, Arc<watch::Sender<bool>>) -> F,
) -> Ended {
    run_with(cfg, sink, reports, script, None, driver).await
}

/// [`run`] on a connection that writes checkpoints under `checkpoints` (a start without one
/// to skip by).
pub(super) async fn run_with<F: Future<Output = ()>>(
    cfg: &Config,
    sink: &MemorySink,
    reports: &mut Reports,
    Script(script, pause_before): Script,
    checkpoints: Option<Identity>,
    driver: impl FnOnce(Arc<Mutex<Lsn>>, Arc<watch::Sender<bool>>) -> F,
) -> Ended {
    let applied = Arc::new(Mutex::new(Lsn::ZERO));
    let session = Scripted {
        events: script,
        applied: applied.clone(),
        pause_before,
        played: 0,
    };
    let mut carry = Carry::default();
    let mut p = pipeline(cfg, sink, reports, &mut carry, session, checkpoints);
    if !sink.is_at_heads() {
        p.heads = None;
    }
    // Held here too: a driver that ends does not stop the loop (a dropped sender would).
    let (stop, mut shutdown) = watch::channel(false);
    let stop = Arc::new(stop);
    let pipeline = async {
        match p.run(&mut shutdown).await {
            Ok(()) => p.drain(Duration::from_secs(1)).await,
            Err(e) => Err(e),
        }
    };
    let (result, ()) = tokio::join!(pipeline, driver(applied.clone(), stop.clone()));
    let confirmed = *applied.lock().unwrap();
    Ended { result, confirmed }
}

pub(super) fn memory_config(extra: &str) -> Config {
    config("127.0.0.1:1", extra)
}

/// One transaction of outbox rows of the given aggregates, then a keepalive.
pub(super) fn rows(aggregates: &[&str]) -> Script {
    let mut ev = VecDeque::from([
        begin(COMMIT),
        xlog(relation(100, "public", "outbox", &outbox_columns())),
    ]);
    for (i, agg) in aggregates.iter().enumerate() {
        ev.push_back(outbox_row_of(&format!("e{i}"), agg));
    }
    ev.extend([commit(COMMIT, END), keepalive()]);
    Script(ev, None)
}

pub(super) async fn until(sink: &MemorySink, sent: usize) {
    while sink.sent().len() < sent {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Kafka answers per partition: the second record (another key) is acknowledged first. Nothing
/// is confirmed until every record of the transaction is in; then everything is.
#[tokio::test(start_paused = true)]
async fn acknowledgements_out_of_order_confirm_only_the_whole_transaction() {
    let cfg = memory_config("");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let ended = run(
        &cfg,
        &sink,
        &mut reports,
        rows(&["a", "b"]),
        |applied, stop| {
            let sink = &sink;
            async move {
                until(sink, 2).await;
                assert_ne!(sink.sent()[0].key, sink.sent()[1].key, "two keys");
                let seqs: Vec<u64> = sink.sent().iter().map(|s| s.origin.seq).collect();
                assert_eq!(seqs, [0, 1], "in transaction order");
                sink.report(|i, _| i == 1, None);
                tokio::time::sleep(Duration::from_secs(2)).await;
                assert_eq!(
                    *applied.lock().unwrap(),
                    Lsn::ZERO,
                    "confirmed with e0 unacknowledged"
                );
                sink.ack_all();
                tokio::time::sleep(Duration::from_secs(2)).await;
                assert_eq!(
                    *applied.lock().unwrap(),
                    Lsn(IDLE),
                    "everything acknowledged"
                );
                let _ = stop.send(true);
            }
        },
    )
    .await;
    ended.result.unwrap();
    assert_eq!(ended.confirmed, Lsn(IDLE));
}

/// A record refused for good while later records of the same key are in flight: under `halt`
/// the loop stops naming it, under `dead-letter` it restarts to dead-letter it; nothing is
/// confirmed either way.
#[tokio::test(start_paused = true)]
async fn a_record_refused_for_good_stops_or_dead_letters_with_later_records_in_flight() {
    for (policy, dead_letter) in [("halt", false), ("dead-letter", true)] {
        let cfg = memory_config(&format!("[relay]\non_poison = \"{policy}\"\n"));
        let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
        let ended = run(&cfg, &sink, &mut reports, rows(&["a", "a", "a"]), |_, _| {
            let sink = &sink;
            async move {
                until(sink, 3).await;
                sink.report(
                    |i, _| i == 0,
                    Some(refused_with(RDKafkaErrorCode::MessageSizeTooLarge)),
                );
            }
        })
        .await;
        assert_eq!(
            sink.pending(),
            2,
            "{policy}: the later records stay in flight"
        );
        match (ended.result, dead_letter) {
            (Err(RelayError::Definite(Definite::DeliveryRefused { .. })), false) => {}
            (Err(RelayError::Transient(Transient::DeadLetterPending { seq: 0, .. })), true) => {}
            (other, _) => panic!("{policy}: {other:?}"),
        }
        assert_eq!(
            ended.confirmed,
            Lsn::ZERO,
            "{policy}: confirmed past the refusal"
        );
    }
}

/// Two producers: the commit of the first Kafka transaction runs (2 s) while the next one
/// fills; the first transaction is confirmed only once its commit ended, the second after
/// its own.
#[tokio::test(start_paused = true)]
async fn a_commit_runs_while_the_next_transaction_fills_and_confirms_when_it_ends() {
    let cfg = memory_config("transactional_id = \"paused\"\ncommit_min_interval_ms = 0\n");
    let (sink, mut reports) = MemorySink::new(true, true, Duration::from_secs(2));
    let started = Instant::now();
    let script = Script(two_transactions(), Some(4));
    let ended = run(&cfg, &sink, &mut reports, script, |applied, stop| {
        let sink = &sink;
        async move {
            while !sink.steps().contains(&Step::CommitEnded(0, true)) {
                assert!(
                    *applied.lock().unwrap() < Lsn(COMMIT),
                    "confirmed before its Kafka transaction committed: {:?}",
                    sink.steps()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_secs(6)).await;
            let _ = stop.send(true);
        }
    })
    .await;
    ended.result.unwrap();
    let steps = sink.steps();
    let at = |s: &Step| steps.iter().position(|x| x == s).unwrap();
    let second_sent = steps
        .iter()
        .rposition(|s| matches!(s, Step::Sent(_)))
        .unwrap();
    assert!(
        at(&Step::CommitStarted(0)) < second_sent && second_sent < at(&Step::CommitEnded(0, true)),
        "the next transaction did not fill while the commit ran: {steps:?}"
    );
    assert_eq!(
        sink.sent()[1].kafka_txn,
        1,
        "e2 went to the next transaction"
    );
    assert!(ended.confirmed >= Lsn(END2), "{}", ended.confirmed);
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "two commits of 2 s each"
    );
}

/// The running commit fails: the loop stops with it and confirms nothing of it.
#[tokio::test(start_paused = true)]
async fn a_failed_commit_stops_the_loop_and_confirms_nothing() {
    let cfg = memory_config("transactional_id = \"paused\"\ncommit_min_interval_ms = 0\n");
    let (sink, mut reports) = MemorySink::new(true, true, Duration::from_millis(500));
    sink.fail_next_commit();
    let script = Script(two_transactions(), Some(4));
    let ended = run(&cfg, &sink, &mut reports, script, |_, _| async {}).await;
    match ended.result {
        Err(RelayError::Transient(Transient::KafkaTransaction { .. })) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(ended.confirmed, Lsn::ZERO);
    assert!(sink.steps().contains(&Step::CommitEnded(0, false)));
}

/// Kafka takes nothing: the loop stops reading at the in-flight limit and lets the replication
/// connection go after `relay.backpressure_release_ms`, confirming nothing.
#[tokio::test(start_paused = true)]
async fn back_pressure_releases_the_connection_after_the_configured_wait() {
    let cfg = memory_config("[relay]\nmax_in_flight_records = 2\nbackpressure_release_ms = 5000\n");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let started = Instant::now();
    let ended = run(
        &cfg,
        &sink,
        &mut reports,
        rows(&["a", "b", "c", "d"]),
        |_, _| async {},
    )
    .await;
    let waited = started.elapsed();
    match ended.result {
        Err(RelayError::Transient(Transient::BackpressureReleased { .. })) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(sink.sent().len(), 2, "read past the in-flight limit");
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(7),
        "released after {waited:?}"
    );
    assert_eq!(ended.confirmed, Lsn::ZERO);
}

/// SIGTERM with the in-flight window full: the drain waits for the acknowledgements (not for
/// its timeout), confirms the transaction they complete and nothing of the open one.
#[tokio::test(start_paused = true)]
async fn sigterm_with_a_full_window_drains_and_confirms_what_kafka_acknowledged() {
    let cfg = memory_config("[relay]\nmax_in_flight_records = 3\nshutdown_timeout_ms = 20000\n");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let script = Script(
        VecDeque::from([
            begin(COMMIT),
            xlog(relation(100, "public", "outbox", &outbox_columns())),
            outbox_row_of("e1", "a"),
            outbox_row_of("e2", "b"),
            commit(COMMIT, END),
            begin(COMMIT2),
            outbox_row_of("e3", "a"),
            outbox_row_of("e4", "b"),
            commit(COMMIT2, END2),
            keepalive(),
        ]),
        None,
    );
    let started = Instant::now();
    let ended = run(&cfg, &sink, &mut reports, script, |applied, stop| {
        let sink = &sink;
        async move {
            until(sink, 3).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(sink.sent().len(), 3, "read past the in-flight limit");
            let _ = stop.send(true);
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(*applied.lock().unwrap(), Lsn::ZERO);
            sink.ack_all();
        }
    })
    .await;
    ended.result.unwrap();
    assert_eq!(
        ended.confirmed,
        Lsn(END),
        "the first transaction, not the open one"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the drain waited out its timeout: {:?}",
        started.elapsed()
    );
}

/// Reads a 70-row transaction while Kafka acknowledges every 100 ms; returns the most records
/// ever unacknowledged at once, and the loop's result after 8 s more (past
/// `backpressure_release_ms`).
async fn read_under(
    health: &crate::observe::health::Shared,
) -> (usize, Result<(), RelayError>, usize) {
    let cfg = memory_config("[relay]\nbackpressure_release_ms = 5000\n");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let names: Vec<String> = (0..70).map(|i| format!("k{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let Script(script, pause_before) = rows(&names);
    let session = Scripted {
        events: script,
        applied: Arc::new(Mutex::new(Lsn::ZERO)),
        pause_before,
        played: 0,
    };
    let mut carry = Carry::default();
    let conn = super::connection(&cfg, session, None);
    let mut p = Pipeline::new(&cfg, &sink, &mut reports, &mut carry, health, conn);
    // What this measures is the budget alone: the head rule (each partition's first record
    // waits for its report) would add waits of its own.
    p.heads = None;
    let (stop, mut shutdown) = watch::channel(false);
    let most = Arc::new(Mutex::new(0usize));
    let driver = {
        let (sink, most) = (&sink, most.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let pending = sink.pending();
                let mut m = most.lock().unwrap();
                *m = (*m).max(pending);
                drop(m);
                sink.ack_all();
                if sink.sent().len() >= 70 || Instant::now() >= deadline {
                    break;
                }
            }
            // Past the back-pressure release: the loop must still be running.
            tokio::time::sleep(Duration::from_secs(8)).await;
            let _ = stop.send(true);
        }
    };
    let (result, ()) = tokio::join!(p.run(&mut shutdown), driver);
    let most = *most.lock().unwrap();
    (most, result, sink.sent().len())
}

/// `relay.max_in_flight_bytes_total` held entirely by another source: this source still reads
/// (nothing of its own in flight), one turn at a time, each after its own acknowledgements, and
/// never releases its connection on the others' load. Without the budget it reads everything at
/// once.
#[tokio::test(start_paused = true)]
async fn a_budget_held_by_other_sources_slows_a_source_but_never_starves_it() {
    let budget = Arc::new(crate::sink::budget::Budget::new(100));
    let mut other = crate::sink::budget::Share::new(budget.clone());
    other.publish(1_000_000);
    let health = crate::observe::health::Shared::of_fleet(None, Some(budget.clone()));
    let (most, result, sent) = read_under(&health).await;
    result.unwrap();
    assert_eq!(sent, 70, "every record read despite the exhausted budget");
    assert!(
        most > 0 && most < 70,
        "one turn at a time, not all at once: {most}"
    );
    assert_eq!(
        budget.total(),
        1_000_000,
        "the ended pipeline withdrew its share"
    );

    let alone = crate::observe::health::Shared::new();
    let (most, result, sent) = read_under(&alone).await;
    result.unwrap();
    assert_eq!(
        (most, sent),
        (70, 70),
        "without the budget the loop reads it all at once"
    );
}

/// The head rule on the loop (issue 40, items 6 and 7): outside Kafka transactions a
/// partition's first record of this producer goes alone: the next record for that partition
/// (and, records going in source order, everything behind it) is handed over only after its
/// report. Mid-stream (every partition acknowledged before) nothing waits.
#[tokio::test(start_paused = true)]
async fn a_partitions_first_record_goes_alone() {
    let cfg = memory_config("");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let sink = sink.at_heads();
    let keys = ["a", "a", "a"];
    let ended = run(&cfg, &sink, &mut reports, rows(&keys), |_, stop| {
        let sink = &sink;
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(sink.sent().len(), 1, "the second record did not wait");
            sink.ack_all();
            until(sink, 3).await;
            sink.ack_all();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = stop.send(true);
        }
    })
    .await;
    ended.result.unwrap();
    assert!(ended.confirmed >= Lsn(END), "{:?}", ended.confirmed);

    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let ended = run(&cfg, &sink, &mut reports, rows(&keys), |_, stop| {
        let sink = &sink;
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(sink.sent().len(), 3, "mid-stream, nothing waits");
            sink.ack_all();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = stop.send(true);
        }
    })
    .await;
    ended.result.unwrap();
}
