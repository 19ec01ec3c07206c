//! A long transaction that is still arriving is not a stall (docs/operations.md, "Stalled").
//!
//! One source transaction writes three million unpublished rows (a batch job), then its outbox
//! events. The relay asks for pgoutput `proto_version` 1, so PostgreSQL sends nothing of it
//! before its COMMIT: first the walsender decodes and spills the rows (falling far behind the
//! writer's one COPY), then it reads them all back and filters them out before the events go
//! out: the walsender is busy for several times `alerts.stalled_secs` (5-20 s here) before any
//! of it reaches the relay. Meanwhile other sessions keep writing WAL, and for seconds at a time
//! (between the keepalives the walsender still sends now and then) the relay receives nothing,
//! Kafka acknowledges nothing and the slot confirms nothing: the stall rule's other conditions
//! hold, and only "the walsender is busy decoding" (`pg_stat_activity.wait_event` empty or
//! `IO:*`) keeps it from firing. The test measures those windows itself and fails if the longest
//! is too short to prove anything. Without that guard the relay restarts its pipeline every
//! `stalled_secs`, re-decoding the transaction from the start each time, and the events never
//! arrive (tried: the test fails).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::SinkExt;
use outbox_relay::telemetry::events;
use relay_core::Lsn;

use crate::support::{
    TestDb, connect,
    http::{relay_addr, scrape},
    kafka,
    relay::Relay,
    writer,
};

const STALLED_SECS: u64 = 2;
/// Unpublished rows of the long transaction, in one COPY (~50 MiB of WAL): the writer is done
/// with them in a few seconds, the walsender (decoding, spilling, reading back) far later. A
/// machine that decodes them too fast to leave a quiet window of `STALLED_SECS + 1` gets a
/// second transaction of twice as many, and a third of four times as many.
const ROWS: u64 = 3_000_000;

/// One look at what the stall rule reads.
struct Sample {
    at: Instant,
    /// The slot's walsender is on the CPU or in an IO wait (`SlotState::walsender_decoding`).
    busy: bool,
    server_lsn: Lsn,
    /// What moves when the pipeline or the slot progresses: the slot's confirmed_flush_lsn, and
    /// the relay's received LSN, acknowledged events and events in flight.
    markers: [u64; 4],
}

async fn sample(c: &tokio_postgres::Client, slot: &str, addr: std::net::SocketAddr) -> Sample {
    let r = c
        .query_one(
            "SELECT pg_current_wal_lsn()::text, s.confirmed_flush_lsn::text, \
                    (SELECT coalesce(a.wait_event_type || ':' || a.wait_event, 'running') \
                       FROM pg_stat_activity a WHERE a.pid = s.active_pid) \
               FROM pg_replication_slots s WHERE s.slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    let lsn = |s: Option<String>| s.map_or(Lsn(0), |s| s.parse().unwrap());
    let wait: Option<String> = r.get(2);
    let m = scrape(addr).await;
    let num = |v: Option<f64>| v.unwrap_or(0.0) as u64;
    Sample {
        at: Instant::now(),
        busy: wait.is_some_and(|w| w == "running" || w.starts_with("IO:")),
        server_lsn: lsn(r.get(0)),
        markers: [
            lsn(r.get(1)).0,
            num(m.value("outbox_relay_received_lsn", &[])),
            num(m.sum("outbox_relay_events_produced_total")),
            num(m.value("outbox_relay_inflight_events", &[])),
        ],
    }
}

/// The longest run of samples in which no marker moved while the server's WAL grew, and how
/// many of its samples saw the walsender busy.
fn longest_quiet(samples: &[Sample]) -> (Duration, usize, usize) {
    let mut best = (Duration::ZERO, 0, 0);
    let mut start = 0;
    for i in 0..samples.len() {
        if samples[i].markers != samples[start].markers {
            start = i;
        }
        let run = &samples[start..=i];
        let grew = samples[i].server_lsn > samples[start].server_lsn;
        let quiet = samples[i].at - samples[start].at;
        if grew && quiet > best.0 {
            best = (quiet, run.iter().filter(|s| s.busy).count(), run.len());
        }
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_transaction_still_being_decoded_is_not_a_stall() {
    let db = TestDb::new("longtx").await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE ledger (n bigint, note text); \
             ALTER DATABASE {} SET wal_sender_timeout = '60s'",
            db.name
        ))
        .await
        .unwrap();
    // PostgreSQL's default wal_sender_timeout (the test stack runs 10 s): a busy walsender asks
    // for a reply, whose confirmation moves a marker, after half of it. No heartbeat: its
    // transactions, decoded between the ledger's rows, would move the markers too.
    let cfg = db.relay_config(&format!(
        "{}\n[http]\nlisten = \"127.0.0.1:0\"\n\n[monitor]\npoll_interval_ms = 250\n\n\
         [heartbeat]\nenabled = false\n\n[alerts]\nstalled_secs = {STALLED_SECS}\n",
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let addr = relay_addr(&relay).await;
    let mut written = vec![
        writer::insert_event(&db.client, "order", "a", 0)
            .await
            .unwrap(),
    ];

    let stop = Arc::new(AtomicBool::new(false));
    // Other sessions: unpublished WAL, so the server's position keeps growing.
    let traffic = {
        let (conninfo, stop) = (db.conninfo(), stop.clone());
        tokio::spawn(async move {
            let c = connect(&conninfo).await;
            while !stop.load(Ordering::SeqCst) {
                c.batch_execute("INSERT INTO business(note) VALUES ('other traffic')")
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampler = {
        let (conninfo, slot, stop) = (db.conninfo(), db.name.clone(), stop.clone());
        let samples = samples.clone();
        tokio::spawn(async move {
            let c = connect(&conninfo).await;
            while !stop.load(Ordering::SeqCst) {
                let s = sample(&c, &slot, addr).await;
                samples.lock().unwrap().push(s);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let mut c = connect(&db.conninfo()).await;
    let min_quiet = Duration::from_secs(STALLED_SECS + 1);
    let mut rows = ROWS;
    let (t0, wal, committed) = loop {
        let lsn0 = db.current_wal_lsn().await;
        let t0 = Instant::now();
        let tx = c.transaction().await.unwrap();
        let text: String = (0..rows).map(|n| format!("{n}\n")).collect();
        let sink = tx.copy_in("COPY ledger (n) FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from(text)).await.unwrap();
        sink.as_mut().finish().await.unwrap();
        for _ in 0..3 {
            written.push(writer::insert_event(&tx, "order", "a", 0).await.unwrap());
        }
        tx.commit().await.unwrap();
        let wal = db.current_wal_lsn().await.0 - lsn0.0;
        let committed = t0.elapsed();
        // Until this transaction is decoded (its events in Kafka), its quiet windows may grow.
        kafka::consume(
            vec![db.topic("order")],
            Duration::from_secs(60),
            written.len(),
        )
        .await;
        let (quiet, _, _) = longest_quiet(&samples.lock().unwrap());
        if quiet >= min_quiet || rows >= 4 * ROWS {
            break (t0, wal, committed);
        }
        eprintln!(
            "long transaction of {rows} rows: nothing moved for only {quiet:.1?}; once more \
             with {} rows",
            2 * rows
        );
        rows *= 2;
    };
    written.push(
        writer::insert_event(&db.client, "order", "a", 0)
            .await
            .unwrap(),
    );

    let figures = db
        .check_order_topic(
            "slot_trends::long_transaction",
            &written,
            Duration::from_secs(60),
        )
        .await;
    let arrived = t0.elapsed();
    stop.store(true, Ordering::SeqCst);
    traffic.await.unwrap();
    sampler.await.unwrap();
    let (quiet, busy, n) = longest_quiet(&samples.lock().unwrap());
    eprintln!(
        "long transaction: {:.0} MiB of WAL, committed after {committed:.1?}, every event in \
         Kafka after {arrived:.1?}; nothing moved for {quiet:.1?} while WAL grew ({busy} of \
         {n} samples saw the walsender busy)",
        wal as f64 / (1 << 20) as f64
    );
    // Otherwise the test proves nothing: the stall rule, polled every 250 ms, fires after
    // STALLED_SECS of such a window unless the walsender is busy (ROWS doubled twice was not
    // enough on this machine: raise ROWS). Even the walsender sends a keepalive now and then while it decodes (its
    // confirmation moves a marker), so the windows last a few seconds, not the whole decoding.
    assert!(
        quiet >= min_quiet,
        "nothing moved for only {quiet:?}: the transaction was decoded too fast to exercise \
         the rule (stalled_secs = {STALLED_SECS})"
    );
    let log = relay.log_text();
    let stalls: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(events::PIPELINE_STALLED))
        .collect();
    assert!(
        stalls.is_empty(),
        "a busy walsender is not a stall: {stalls:#?}"
    );
    let m = scrape(addr).await;
    assert_eq!(
        m.value("outbox_relay_restarts_total", &[("reason", "stalled")]),
        Some(0.0)
    );
    for severity in ["warning", "critical"] {
        let fired = [("alert", "stalled"), ("severity", severity)];
        assert_eq!(
            m.value("outbox_relay_alerts_fired_total", &fired),
            Some(0.0)
        );
    }
    assert_eq!(
        (figures.lost, figures.order_violations, figures.unexpected),
        (0, 0, 0),
        "every event arrives, in order: {figures:?}"
    );
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
