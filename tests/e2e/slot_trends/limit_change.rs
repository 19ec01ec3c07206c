//! `slot_forecast` across a change of `max_slot_wal_keep_size` (relay_core::headroom): setting
//! the limit while the relay keeps up is no collapse (the reported case fired "[critical]
//! slot_forecast … in ~0 s" one poll later), and lowering it under what a stuck slot retains is
//! critical at once, not after a new window has filled.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use super::{NO_KAFKA, keep_size, spawn_wal_writer};
use crate::support::{
    TestDb,
    cluster::PgCluster,
    connect, eventually,
    http::{relay_addr, scrape},
    kafka_brokers,
    relay::Relay,
    writer,
};

const LIMIT_PG_PORT: u16 = 28430;
const LOWERED_PG_PORT: u16 = 28431;

/// The monitor's fast poll, a forecast window of `window` s and the default forecast levels
/// (warning under 1 h, critical under 15 min).
fn alerts(db: &TestDb, window: u64) -> String {
    db.relay_config(&format!(
        "{}\n[http]\nlisten = \"127.0.0.1:0\"\n\n[monitor]\npoll_interval_ms = 250\n\n\
         [alerts]\nslot_forecast_window_secs = {window}\n",
        db.outbox_section()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setting_the_limit_while_the_relay_keeps_up_is_no_forecast() {
    let cluster = PgCluster::start(LIMIT_PG_PORT, "");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "limitset").await;
    keep_size(&db, "-1").await;
    let mut relay = Relay::streaming(&db.name, &alerts(&db, 10)).await;
    let addr = relay_addr(&relay).await;

    // A trickle of events the relay keeps up with, before and after the change.
    let stop = Arc::new(AtomicBool::new(false));
    let conninfo = db.conninfo();
    let flag = stop.clone();
    let w = tokio::spawn(async move {
        let c = connect(&conninfo).await;
        let mut n = 0;
        while !flag.load(Ordering::SeqCst) {
            writer::insert_event(&c, "order", &format!("o-{}", n % 7), n)
                .await
                .unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        n
    });
    // A full window under the unlimited setting (the headroom is the 1 GiB default threshold).
    tokio::time::sleep(Duration::from_secs(12)).await;
    keep_size(&db, "96MB").await;
    let changed = Instant::now();
    // The monitor reads the new limit (the gauge), then a whole new window passes.
    eventually(
        "the relay reads the new limit",
        Duration::from_secs(10),
        || async {
            let m = scrape(addr).await;
            (m.value("outbox_relay_server_max_slot_wal_keep_size_bytes", &[])
                == Some((96 << 20) as f64))
            .then_some(())
        },
    )
    .await;
    while changed.elapsed() < Duration::from_secs(14) {
        let f = scrape(addr)
            .await
            .value("outbox_relay_slot_loss_forecast_seconds", &[])
            .unwrap();
        assert!(
            f == -1.0 || f > 3600.0,
            "a relay that keeps up is forecast to lose its slot in {f} s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let written = w.await.unwrap();
    assert!(written > 100, "the writer wrote {written} events");
    let log = relay.log_text();
    assert!(
        !log.contains(&format!(
            "{}: [critical] slot_forecast",
            events::ALERT_FIRING
        )) && !log.contains(&format!(
            "{}: [warning] slot_forecast",
            events::ALERT_FIRING
        )),
        "no slot_forecast alert while the relay keeps up:\n{log}"
    );
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_limit_under_what_a_stuck_slot_retains_is_critical_at_once() {
    let cluster = PgCluster::start(LOWERED_PG_PORT, "");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "limitlow").await;
    keep_size(&db, "-1").await;
    // Kafka unreachable: the slot exists and never advances. The default 300 s window: without
    // the restart rule no forecast would come for 270 s after the change.
    let cfg = alerts(&db, 300).replace(&kafka_brokers(), NO_KAFKA);
    let mut relay = Relay::start(&db.name, &cfg);
    let addr = relay_addr(&relay).await;
    eventually("the relay's slot", Duration::from_secs(30), || async {
        db.slot_exists().await.then_some(())
    })
    .await;
    // ~40 MiB of WAL the slot retains.
    let stop = Arc::new(AtomicBool::new(false));
    let w = spawn_wal_writer(db.conninfo(), stop.clone());
    eventually("40 MiB retained", Duration::from_secs(60), || async {
        (db.retained_wal().await > 40.0 * (1 << 20) as f64).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    w.await.unwrap();
    // Lowered to 48 MB: under 16 MiB left, lost at the next segments.
    keep_size(&db, "48MB").await;
    let changed = Instant::now();
    relay
        .wait_log(
            &format!("{}: [critical] slot_forecast", events::ALERT_FIRING),
            Duration::from_secs(20),
        )
        .await;
    assert!(
        changed.elapsed() < Duration::from_secs(20),
        "critical within a few polls, not after the window"
    );
    let f = scrape(addr)
        .await
        .value("outbox_relay_slot_loss_forecast_seconds", &[])
        .unwrap();
    assert_eq!(f, 0.0, "lost now");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
    drop(cluster);
}
