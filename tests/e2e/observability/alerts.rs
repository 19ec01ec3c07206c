//! The slot alerts that need a PostgreSQL cluster of their own (a small
//! `max_slot_wal_keep_size`): the retained-WAL alert of a stopped relay's backlog, fired (log
//! line, metric, webhook) and resolved after catch-up; a lost slot, critical, stopping the relay
//! and never re-created but by `setup --recreate-slot`.

use std::time::{Duration, Instant};

use outbox_relay::telemetry::events;

use super::{config, status, without_kafka};
use crate::support::{
    TestDb,
    cluster::PgCluster,
    http::{WebhookReceiver, relay_addr, scrape},
    kafka,
    relay::Relay,
    writer,
};

const MIB: f64 = (1 << 20) as f64;

/// Fills WAL with rows of an unpublished table until the slot retains at least `bytes`.
async fn write_wal_until_retained(db: &TestDb, bytes: f64) -> f64 {
    for _ in 0..40 {
        db.client
            .batch_execute(
                "INSERT INTO business(note) SELECT repeat('x', 1900) FROM generate_series(1, 2000)",
            )
            .await
            .unwrap();
        let retained = db.retained_wal().await;
        if retained >= bytes {
            return retained;
        }
    }
    panic!("could not make the slot retain {bytes} bytes");
}

async fn slot_row(db: &TestDb) -> Option<(Option<String>, Option<String>)> {
    db.client
        .query_opt(
            "SELECT wal_status, restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&db.name],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// Waits for a webhook body with these fields.
async fn webhook(hook: &WebhookReceiver, fields: &[(&str, &str)]) -> serde_json::Value {
    hook.wait_for(fields, Duration::from_secs(30)).await
}

/// The test
/// [`super::retained_wal_alert_fires_for_a_stopped_relays_backlog_and_resolves_after_catch_up`].
pub(super) async fn retained_wal_fires_and_resolves() {
    // 64 MiB of WAL may be kept for the slot; warning at 25% (16 MiB).
    let cluster = PgCluster::start(25471, "-c max_slot_wal_keep_size=64MB");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "walalert").await;
    let hook = WebhookReceiver::start().await;
    let cfg = config(
        &db,
        "127.0.0.1:0",
        &format!(
            "[heartbeat]\ninterval_ms = 300\n\n[alerts]\nretained_wal_warning_bytes = 0\n\
             retained_wal_critical_bytes = 0\nretained_wal_warning_ratio = 0.25\n\
             retained_wal_critical_ratio = 0.9\n\n[alerts.webhook]\nurl = \"{}\"\n\
             repeat_interval_secs = 0\n",
            hook.url
        ),
    );

    let mut relay = Relay::streaming(&db.name, &cfg).await;
    assert!(relay.terminate(Duration::from_secs(30)).success());
    assert!(
        !relay.log_text().contains(events::ALERT_FIRING),
        "no alert while caught up:\n{}",
        relay.log_text()
    );

    // While the relay is stopped: three events and > 16 MiB of WAL in another table.
    writer::insert_orders(&db.client, 3, |i| format!("a-{i}")).await;
    let retained = write_wal_until_retained(&db, 20.0 * MIB).await;

    // Restarted, the relay reports the backlog it starts from, then catches up.
    let mut relay = Relay::start(&db.name, &cfg);
    let addr = relay_addr(&relay).await;
    let firing = format!("{}: [warning] retained_wal", events::ALERT_FIRING);
    relay.wait_log(&firing, Duration::from_secs(30)).await;
    let log = relay.log_text();
    let line = log.lines().find(|l| l.contains(&firing)).unwrap();
    assert!(
        line.contains("of max_slot_wal_keep_size 64.0 MiB") && line.contains("What to do:"),
        "the line says what is wrong and what to do: {line}"
    );
    let fired = webhook(
        &hook,
        &[
            ("alert", "retained_wal"),
            ("status", "firing"),
            ("severity", "warning"),
        ],
    )
    .await;
    assert_eq!(fired["slot"], db.name.as_str());
    assert!(
        fired["action"]
            .as_str()
            .unwrap()
            .contains("max_slot_wal_keep_size")
    );

    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 3).await;
    assert_eq!(got.len(), 3, "the backlog's events arrive");

    // restart_lsn moves once the relay confirmed past a running-xacts record (checkpoints
    // write one): then the retained WAL drops below the threshold and the alert resolves.
    let deadline = Instant::now() + Duration::from_secs(120);
    let resolved = format!("{}: retained_wal", events::ALERT_RESOLVED);
    while !relay.log_text().contains(&resolved) {
        assert!(
            Instant::now() < deadline,
            "retained_wal never resolved; log:\n{}",
            relay.log_text()
        );
        db.client.batch_execute("CHECKPOINT").await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    webhook(&hook, &[("alert", "retained_wal"), ("status", "resolved")]).await;
    let m = scrape(addr).await;
    assert_eq!(
        m.value("outbox_relay_alert_level", &[("alert", "retained_wal")]),
        Some(0.0)
    );
    assert_eq!(
        m.value(
            "outbox_relay_alerts_fired_total",
            &[("alert", "retained_wal"), ("severity", "warning")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.value("outbox_relay_server_max_slot_wal_keep_size_bytes", &[]),
        Some(64.0 * MIB)
    );
    let now_retained = m
        .value("outbox_relay_slot_retained_wal_bytes", &[])
        .unwrap();
    assert!(
        now_retained < 16.0 * MIB && now_retained < retained,
        "{now_retained}"
    );
    let notifications = m
        .value(
            "outbox_relay_webhook_notifications_total",
            &[("result", "ok")],
        )
        .unwrap();
    assert!(notifications >= 2.0, "{notifications}");

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}

/// The test [`super::lost_slot_is_critical_stops_the_relay_and_is_never_recreated`].
pub(super) async fn lost_slot_stops_the_relay() {
    // max_slot_wal_keep_size below one segment: a checkpoint after a WAL switch invalidates an
    // inactive slot that is behind.
    let cluster = PgCluster::start(25472, "-c max_slot_wal_keep_size=1MB");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "walost").await;
    let hook = WebhookReceiver::start().await;
    // Kafka is unreachable, so the relay never streams and the slot falls behind; the long
    // restart backoff makes sure it is the monitor, not a new attempt, that notices the loss.
    let (cfg, dead_kafka) = without_kafka(config(
        &db,
        "127.0.0.1:0",
        &format!(
            "[relay]\nrestart_backoff_initial_ms = 40000\nrestart_backoff_max_ms = 60000\n\n\
             [alerts.webhook]\nurl = \"{}\"\nformat = \"json\"\n",
            hook.url
        ),
    ));
    let env = [("OUTBOX_RELAY__KAFKA__BROKERS", dead_kafka.as_str())];
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &env);
    let addr = relay_addr(&relay).await;
    relay
        .wait_log("kafka_unreachable", Duration::from_secs(60))
        .await;
    let m = scrape(addr).await;
    assert_eq!(m.value("outbox_relay_slot_present", &[]), Some(1.0));
    assert_eq!(
        m.value("outbox_relay_slot_wal_status", &[("status", "reserved")]),
        Some(1.0)
    );

    assert!(
        db.write_wal_until_slot_lost(30).await,
        "the slot never reached wal_status = lost"
    );
    let lost_at = Instant::now();

    let exit = relay
        .wait(Duration::from_secs(30))
        .expect("the relay must exit when its slot is lost");
    let log = relay.log_text();
    assert!(
        lost_at.elapsed() < Duration::from_secs(15),
        "the monitor stops the relay within a few polls"
    );
    assert_eq!(exit.code(), Some(3), "a definite error; log:\n{log}");
    assert!(log.contains(events::SLOT_LOST), "{log}");
    let critical = format!("{}: [critical] wal_status", events::ALERT_FIRING);
    let firing = log
        .lines()
        .rfind(|l| l.contains(&critical))
        .unwrap_or_else(|| panic!("no critical wal_status alert:\n{log}"));
    assert!(
        firing.contains("the slot was invalidated (wal_status = lost, reason wal_removed)")
            && firing.contains("removed WAL it still needed")
            && firing.contains("max_slot_wal_keep_size")
            && firing.contains("--recreate-slot"),
        "{firing}"
    );
    let last = log.lines().last().unwrap();
    assert!(
        last.contains("wal_status = lost") && last.contains("will not re-create the slot"),
        "the exit error is clear: {last}"
    );
    // The critical notification left before the process exited.
    let n = webhook(&hook, &[("alert", "wal_status"), ("severity", "critical")]).await;
    assert!(
        hook.bodies()
            .iter()
            .any(|b| b["alert"] == "wal_status" && b["summary"].as_str().unwrap().contains("lost")),
        "{n}"
    );

    // Not re-created: still there, still lost.
    assert_eq!(slot_row(&db).await, Some((Some("lost".into()), None)));

    // `status` says so and exits 4.
    let text = status(&relay, 4);
    println!("{text}");
    assert!(
        text.contains("wal_status lost")
            && text.contains("CRITICAL wal_status")
            && text.ends_with("result: CRITICAL\n"),
        "{text}"
    );

    // A new start (with create_slot = true) refuses too and leaves the slot alone.
    let (exit, log) = Relay::once(&db.name, &cfg, &["run"], &env);
    assert_eq!(exit.code(), Some(3), "{log}");
    assert!(log.contains("will not re-create"), "{log}");
    assert_eq!(slot_row(&db).await, Some((Some("lost".into()), None)));

    // Only the explicit operator command re-creates it, and it states the gap.
    // (setup also checks Kafka: point it at the real broker.)
    let brokers = crate::support::kafka_brokers();
    let mut setup_env = env.to_vec();
    setup_env.push(("OUTBOX_RELAY__KAFKA__BROKERS", brokers.as_str()));
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup", "--recreate-slot"], &setup_env);
    assert_eq!(exit.code(), Some(0), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains(events::SLOT_RECREATED))
        .unwrap_or_else(|| panic!("no slot_recreated line:\n{log}"));
    assert!(
        line.contains("gap_from=") && line.contains("gap_to="),
        "{line}"
    );
    let (wal_status, _) = slot_row(&db).await.expect("the slot exists again");
    assert_ne!(wal_status.as_deref(), Some("lost"));
    db.cleanup().await;
}
