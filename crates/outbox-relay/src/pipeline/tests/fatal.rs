//! A fatal producer error seen at the loop's tick before the report that explains it
//! (`Pipeline::after_fatal`), on tokio's paused clock: the refusal is what stops the relay,
//! and without a report the fatal error does, after a bounded wait.

use rdkafka::error::RDKafkaErrorCode;
use tokio::time::Instant;

use super::{
    memory::MemorySink,
    paused::{memory_config, rows, run, until},
    *,
};
use crate::error::{Definite, Transient};

/// Under the gapless guarantee librdkafka raises the fatal error when the broker refuses the
/// batch, and the refused record's report reaches the loop a moment later, possibly after a
/// tick: the relay still stops naming the record (definite, poison policy), not with a
/// restartable producer error that would run into it again.
#[tokio::test(start_paused = true)]
async fn a_refusal_reported_after_the_fatal_error_stops_the_relay_naming_it() {
    let cfg = memory_config("");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let ended = run(&cfg, &sink, &mut reports, rows(&["a", "b"]), |_, _| {
        let sink = &sink;
        async move {
            until(sink, 2).await;
            sink.raise_fatal("GaplessGuarantee: Message size too large");
            // A tick (every second) sees the fatal error before the report.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            sink.report(
                |i, _| i == 0,
                Some(refused_with(RDKafkaErrorCode::MessageSizeTooLarge)),
            );
        }
    })
    .await;
    match ended.result {
        Err(RelayError::Definite(Definite::DeliveryRefused {
            change: Some(change),
            ..
        })) => assert_eq!(change.seq, 0, "{change:?}"),
        other => panic!("not the refusal naming the record: {other:?}"),
    }
    assert_eq!(ended.confirmed, Lsn::ZERO, "confirmed past the refusal");
}

/// No report comes: the fatal error stops the loop once the reports had 2 s.
#[tokio::test(start_paused = true)]
async fn a_fatal_error_without_its_reports_stops_the_loop_within_a_tick_and_two_seconds() {
    let cfg = memory_config("");
    let (sink, mut reports) = MemorySink::new(false, false, Duration::ZERO);
    let raised = std::sync::Mutex::new(None);
    let ended = run(&cfg, &sink, &mut reports, rows(&["a"]), |_, _| {
        let (sink, raised) = (&sink, &raised);
        async move {
            until(sink, 1).await;
            sink.raise_fatal("fatal for the test");
            *raised.lock().unwrap() = Some(Instant::now());
        }
    })
    .await;
    let waited = raised.lock().unwrap().unwrap().elapsed();
    match ended.result {
        Err(RelayError::Transient(Transient::Delivery { topic, code, .. })) => {
            assert_eq!((topic.as_str(), code.as_str()), ("*", "fatal for the test"));
        }
        other => panic!("not the fatal error: {other:?}"),
    }
    assert!(
        waited >= Duration::from_secs(2)
            && waited <= Duration::from_secs(3) + Duration::from_millis(50),
        "stopped {waited:?} after the fatal error"
    );
    assert_eq!(sink.pending(), 1, "the record is still unreported");
    assert_eq!(ended.confirmed, Lsn::ZERO);
}
