//! The alerts that need history, against real servers: `slot_forecast` (when the slot is lost at
//! the current WAL rate, from `safe_wal_size`, or from `alerts.retained_wal_critical_bytes` when
//! `max_slot_wal_keep_size` is unlimited) and `stalled` (the stream is up, WAL grows, nothing
//! moves: the relay restarts its pipeline).
//!
//! The forecast test runs its own PostgreSQL cluster (port 28410) so that it can change
//! `max_slot_wal_keep_size`; the relay's Kafka is an address where nothing listens, so the slot
//! exists and never advances while the monitor reports. `long_transaction`: a large source
//! transaction that PostgreSQL is still decoding is not a stall.

mod limit_change;
mod long_transaction;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use crate::support::{
    TestDb, broker,
    cluster::PgCluster,
    connect, eventually,
    http::{Scrape, WebhookReceiver, relay_addr, scrape},
    kafka::consume_until_from,
    kafka_brokers,
    relay::Relay,
    writer,
};

const FORECAST_PG_PORT: u16 = 28410;
/// Nothing listens here: the relay creates its slot, then never streams.
const NO_KAFKA: &str = "127.0.0.1:28411";
const STALL_KAFKA_PORT: u16 = 28420;
const STALL_PROXY_PORT: u16 = 28424;
const MIB: f64 = (1 << 20) as f64;

async fn webhook(hook: &WebhookReceiver, fields: &[(&str, &str)]) -> serde_json::Value {
    hook.wait_for(fields, Duration::from_secs(40)).await
}

/// Writes WAL (unpublished rows, ~400 KiB a statement, throttled) until `stop` is set.
fn spawn_wal_writer(conninfo: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let c = connect(&conninfo).await;
        while !stop.load(Ordering::SeqCst) {
            c.batch_execute(
                "INSERT INTO business(note) SELECT repeat('x', 1900) FROM generate_series(1, 200)",
            )
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    })
}

/// (`safe_wal_size`, server WAL position) of the test's slot.
async fn headroom(db: &TestDb) -> (Option<i64>, f64) {
    let r = db
        .client
        .query_one(
            "SELECT safe_wal_size, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 \
               FROM pg_replication_slots WHERE slot_name = $1",
            &[&db.name],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

fn forecast(m: &Scrape) -> f64 {
    m.value("outbox_relay_slot_loss_forecast_seconds", &[])
        .expect("the forecast gauge is scraped")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_forecast_says_when_the_slot_is_lost_at_the_current_wal_rate() {
    // Set with ALTER SYSTEM (not on the command line, which would override it) so that the
    // test can lift the limit later.
    let cluster = PgCluster::start(FORECAST_PG_PORT, "");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "forecast").await;
    keep_size(&db, "512MB").await;
    let hook = WebhookReceiver::start().await;
    let cfg = db
        .relay_config(&format!(
            "{}\n[http]\nlisten = \"127.0.0.1:0\"\n\n[monitor]\npoll_interval_ms = 250\n\n\
             [heartbeat]\nenabled = false\n\n[alerts]\nretained_wal_warning_bytes = 0\n\
             retained_wal_critical_bytes = 1073741824\nretained_wal_warning_ratio = 0\n\
             retained_wal_critical_ratio = 0\nslot_forecast_warning_secs = 100000\n\
             slot_forecast_critical_secs = 1\nslot_forecast_window_secs = 3\n\n\
             [alerts.webhook]\nurl = \"{}\"\nrepeat_interval_secs = 0\n",
            db.outbox_section(),
            hook.url
        ))
        .replace(&kafka_brokers(), NO_KAFKA);
    let mut relay = Relay::start(&db.name, &cfg);
    let addr = relay_addr(&relay).await;
    eventually("the relay's slot", Duration::from_secs(30), || async {
        db.slot_exists().await.then_some(())
    })
    .await;
    let m = scrape(addr).await;
    assert_eq!(forecast(&m), -1.0, "no WAL written: no forecast");

    // WAL grows and the slot keeps it: the headroom shrinks at the WAL rate.
    let stop = Arc::new(AtomicBool::new(false));
    let w = spawn_wal_writer(db.conninfo(), stop.clone());
    let (_, lsn0) = headroom(&db).await;
    let t0 = Instant::now();
    let fired = webhook(
        &hook,
        &[
            ("alert", "slot_forecast"),
            ("status", "firing"),
            ("severity", "warning"),
        ],
    )
    .await;
    let summary = fired["summary"].as_str().unwrap().to_string();
    assert!(
        summary.starts_with("at the current WAL rate the slot is invalidated in ~"),
        "{summary}"
    );
    // Compare with the test's own estimate: safe_wal_size / the WAL rate it measured.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (safe, lsn1) = headroom(&db).await;
    let rate = (lsn1 - lsn0) / t0.elapsed().as_secs_f64();
    let expected = safe.expect("safe_wal_size with a limit") as f64 / rate;
    let got = forecast(&scrape(addr).await);
    eprintln!(
        "slot_forecast: relay {got:.1} s, test estimate {expected:.1} s at {:.1} MiB/s",
        rate / MIB
    );
    assert!(
        got > 0.0 && got > expected / 4.0 && got < expected * 4.0,
        "forecast {got:.1} s, the test's estimate {expected:.1} s ({:.1} MiB/s, safe_wal_size \
         {:.0} MiB)",
        rate / MIB,
        safe.unwrap() as f64 / MIB
    );
    assert!(
        relay.log_text().contains(&format!(
            "{}: [warning] slot_forecast",
            events::ALERT_FIRING
        )),
        "{}",
        relay.log_text()
    );

    // No more WAL: once the window holds only a flat headroom the forecast is gone.
    stop.store(true, Ordering::SeqCst);
    w.await.unwrap();
    webhook(&hook, &[("alert", "slot_forecast"), ("status", "resolved")]).await;
    // The resolution may be an earlier one (on a loaded machine the writer's rate dips and the
    // alert flaps), so wait for the gauge itself: once the 3 s window holds no writer, a
    // little WAL is still written (checkpoints, autovacuum): a forecast of days, or none.
    eventually(
        "no forecast, or one of days, once WAL stopped",
        Duration::from_secs(30),
        || async {
            let f = forecast(&scrape(addr).await);
            (f == -1.0 || f > 100_000.0).then_some(())
        },
    )
    .await;

    // Unlimited max_slot_wal_keep_size: the headroom is alerts.retained_wal_critical_bytes.
    keep_size(&db, "-1").await;
    let stop = Arc::new(AtomicBool::new(false));
    let w = spawn_wal_writer(db.conninfo(), stop.clone());
    let what = "a slot_forecast firing towards retained_wal_critical_bytes";
    let body = eventually(what, Duration::from_secs(40), || async {
        hook.bodies().into_iter().find(|b| {
            b["alert"] == "slot_forecast"
                && b["status"] == "firing"
                && b["summary"]
                    .as_str()
                    .is_some_and(|s| s.contains("reaches alerts.retained_wal_critical_bytes in ~"))
        })
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    w.await.unwrap();
    assert!(
        body["summary"]
            .as_str()
            .unwrap()
            .starts_with("at the current WAL rate")
    );

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
    drop(cluster);
}

async fn keep_size(db: &TestDb, value: &str) {
    let set = format!("ALTER SYSTEM SET max_slot_wal_keep_size = '{value}'");
    for sql in [set.as_str(), "SELECT pg_reload_conf()"] {
        db.client.batch_execute(sql).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_is_up_while_nothing_moves_is_stalled_and_restarted() {
    // Kafka of its own behind a proxy: frozen, it holds every byte and closes nothing (a
    // half-open connection), so the relay's stream stays up while no acknowledgement comes.
    let (_broker, kafka) = broker::behind_proxy(STALL_KAFKA_PORT, STALL_PROXY_PORT).await;
    let brokers = format!("127.0.0.1:{STALL_PROXY_PORT}");
    let db = TestDb::new("stalled").await;
    let topic = db.topic("order");
    let hook = WebhookReceiver::start().await;
    let cfg = db
        .relay_config(&format!(
            "{}\n[http]\nlisten = \"127.0.0.1:0\"\n\n[monitor]\npoll_interval_ms = 250\n\n\
             [relay]\nmax_in_flight_records = 3\n\n[alerts]\nstalled_secs = 2\n\n\
             [alerts.webhook]\nurl = \"{}\"\nrepeat_interval_secs = 0\n",
            db.outbox_section(),
            hook.url
        ))
        .replace(&kafka_brokers(), &brokers);
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let addr = relay_addr(&relay).await;
    let first = writer::insert_event(&db.client, "order", "a", 0)
        .await
        .unwrap();
    consume_until_from(
        &brokers,
        std::slice::from_ref(&topic),
        Duration::from_secs(30),
        |r| r.iter().any(|r| r.header("id") == first.id),
    );
    assert!(
        !relay.log_text().contains(events::PIPELINE_STALLED),
        "streaming is not a stall"
    );

    // A steady stream of events: WAL grows, three records wait for Kafka, nothing moves.
    kafka.freeze();
    let stop = Arc::new(AtomicBool::new(false));
    let writer_task = {
        let (conninfo, stop) = (db.conninfo(), stop.clone());
        tokio::spawn(async move {
            let c = connect(&conninfo).await;
            let mut ids = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                ids.push(writer::insert_event(&c, "order", "a", 0).await.unwrap().id);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            ids
        })
    };
    relay
        .wait_log(events::PIPELINE_STALLED, Duration::from_secs(30))
        .await;
    let fired = webhook(&hook, &[("alert", "stalled"), ("status", "firing")]).await;
    assert!(
        fired["summary"]
            .as_str()
            .unwrap()
            .contains("nothing was received, acknowledged by Kafka or confirmed"),
        "{fired}"
    );
    let restarts = eventually(
        "a restart for the stall",
        Duration::from_secs(10),
        || async {
            scrape(addr)
                .await
                .value("outbox_relay_restarts_total", &[("reason", "stalled")])
                .filter(|v| *v >= 1.0)
        },
    )
    .await;
    assert!(restarts >= 1.0);
    assert!(
        relay.log_text().contains("the pipeline stalled"),
        "{}",
        relay.log_text()
    );

    // Kafka answers again: every event arrives and the alert resolves.
    kafka.thaw();
    stop.store(true, Ordering::SeqCst);
    let ids = writer_task.await.unwrap();
    assert!(ids.len() >= 5, "{} events written", ids.len());
    let (b, t) = (brokers.clone(), topic.clone());
    let want = ids.clone();
    let got = tokio::task::spawn_blocking(move || {
        consume_until_from(&b, &[t], Duration::from_secs(90), |r| {
            want.iter().all(|id| r.iter().any(|r| r.header("id") == id))
        })
    })
    .await
    .unwrap();
    for id in &ids {
        assert!(
            got.iter().any(|r| r.header("id") == id),
            "event {id} missing"
        );
    }
    webhook(&hook, &[("alert", "stalled"), ("status", "resolved")]).await;
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
