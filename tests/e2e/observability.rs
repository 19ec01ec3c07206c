//! Slot-lag alerting and observability against real servers: the retained-WAL alert of a
//! stopped relay fires (log line, metric, webhook) and resolves after catch-up; a lost slot is
//! critical, stops the relay and is never re-created; the heartbeat keeps `confirmed_flush_lsn`
//! moving while only other tables are written; with Kafka down the monitor still reports a
//! growing lag and `/readyz` fails; and a scrape holds every metric docs/operations.md names.
//! `outbox-relay status` is checked along the way (exit 0 healthy, 4 critical).
//!
//! Tests that need other server settings (a small `max_slot_wal_keep_size`) start their own
//! PostgreSQL cluster on a dedicated port.

use std::{
    net::SocketAddr,
    process::Output,
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use crate::support::{
    TestDb,
    cluster::PgCluster,
    eventually,
    http::{self, Scrape, WebhookReceiver, free_port, relay_addr, scrape},
    kafka,
    relay::Relay,
    repo_root, writer,
};

const MIB: f64 = (1 << 20) as f64;

/// `[[outbox]]`, a fast monitor and the HTTP endpoint on `listen`, then `extra`.
fn config(db: &TestDb, listen: &str, extra: &str) -> String {
    db.relay_config(&format!(
        "{}\n[http]\nlisten = \"{listen}\"\n\n[monitor]\npoll_interval_ms = 300\n\n{extra}",
        db.outbox_section()
    ))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

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
    let what = format!("a webhook with {fields:?}");
    eventually(&what, Duration::from_secs(30), || async {
        hook.bodies()
            .into_iter()
            .find(|b| fields.iter().all(|(k, v)| b[*k] == *v))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_wal_alert_fires_for_a_stopped_relays_backlog_and_resolves_after_catch_up() {
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
    let mut written = Vec::new();
    for i in 0..3 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a-{i}"), 0)
                .await
                .unwrap(),
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_slot_is_critical_stops_the_relay_and_is_never_recreated() {
    // max_slot_wal_keep_size below one segment: a checkpoint after a WAL switch invalidates an
    // inactive slot that is behind.
    let cluster = PgCluster::start(25472, "-c max_slot_wal_keep_size=1MB");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "walost").await;
    let hook = WebhookReceiver::start().await;
    let dead_kafka = format!("127.0.0.1:{}", free_port());
    // Kafka is unreachable, so the relay never streams and the slot falls behind; the long
    // restart backoff makes sure it is the monitor, not a new attempt, that notices the loss.
    let cfg = config(
        &db,
        "127.0.0.1:0",
        &format!(
            "[relay]\nrestart_backoff_initial_ms = 40000\nrestart_backoff_max_ms = 60000\n\n\
             [alerts.webhook]\nurl = \"{}\"\nformat = \"json\"\n",
            hook.url
        ),
    )
    .replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 500\n");
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
    let out = relay.status();
    let text = stdout(&out);
    println!("{text}");
    assert_eq!(out.status.code(), Some(4), "{text}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_keeps_confirmed_flush_up_while_only_other_tables_are_written() {
    let db = TestDb::new("heartbeat").await;
    let cfg = config(&db, "127.0.0.1:0", "[heartbeat]\ninterval_ms = 300\n");
    let mut relay = Relay::start(&db.name, &cfg);
    let started = Instant::now();
    let addr = relay_addr(&relay).await;
    relay
        .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
        .await;

    // Other applications' logical messages, transactional or not, pass through unpublished.
    db.client
        .batch_execute(
            "SELECT pg_logical_emit_message(true, 'another-app', 'x');
             SELECT pg_logical_emit_message(false, 'another-app', 'y');",
        )
        .await
        .unwrap();

    // Writes to an unpublished table only: every position is confirmed within seconds.
    let start = db.confirmed_flush().await.unwrap();
    for _ in 0..10 {
        for _ in 0..10 {
            db.client
                .execute("INSERT INTO business(note) VALUES ('other table')", &[])
                .await
                .unwrap();
        }
        let written = db.current_wal_lsn().await;
        db.wait_confirmed(written, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(db.confirmed_flush().await.unwrap() > start);

    // Heartbeats were written and confirmed end to end, recently: the age counts from the
    // relay's start until a heartbeat is confirmed, so after 6 s a small age proves it.
    tokio::time::sleep_until((started + Duration::from_secs(6)).into()).await;
    let m = eventually(
        "a recent confirmed heartbeat",
        Duration::from_secs(10),
        || async {
            let m = scrape(addr).await;
            let age = m.value("outbox_relay_heartbeat_age_seconds", &[])?;
            (age < 2.0).then_some(m)
        },
    )
    .await;
    let beats = m
        .value("outbox_relay_heartbeats_total", &[("result", "ok")])
        .unwrap();
    assert!(beats >= 10.0, "{beats} heartbeats in > 5 s at 300 ms");
    assert_eq!(
        m.value("outbox_relay_heartbeats_total", &[("result", "error")]),
        Some(0.0)
    );

    // Only outbox rows are published: one event, one record; no heartbeat, no foreign message.
    let w = writer::insert_event(&db.client, "order", "a-1", 0)
        .await
        .unwrap();
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = kafka::consume(vec![db.topic("order")], Duration::from_secs(3), 2).await;
    assert_eq!((got.len(), again.len()), (1, 1), "{again:?}");
    assert_eq!(again[0].header("id"), w.id);
    let log = relay.log_text();
    assert!(!log.contains(events::PIPELINE_RESTART), "{log}");

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kafka_down_the_monitor_reports_growing_lag_and_readyz_fails() {
    let db = TestDb::new("kafkadown").await;
    let port = free_port();
    let dead_kafka = format!("127.0.0.1:{}", free_port());
    let cfg = config(
        &db,
        &format!("127.0.0.1:{port}"),
        "[heartbeat]\nenabled = false\n\n[alerts]\ntime_lag_warning_secs = 1\ntime_lag_critical_secs = 3\n",
    )
    .replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 500\n");
    let env = [("OUTBOX_RELAY__KAFKA__BROKERS", dead_kafka.as_str())];
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &env);
    let addr: SocketAddr = relay_addr(&relay).await;
    assert_eq!(addr.port(), port);
    relay
        .wait_log("kafka_unreachable", Duration::from_secs(60))
        .await;

    assert_eq!(http::get(addr, "/healthz").await, (200, "ok\n".to_string()));
    let (code, body) = http::get(addr, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("not streaming"), "{body}");

    let before = eventually("the slot's lag", Duration::from_secs(10), || async {
        scrape(addr).await.value("outbox_relay_slot_lag_bytes", &[])
    })
    .await;
    for i in 0..20 {
        writer::insert_event(&db.client, "order", &format!("a-{}", i % 3), 0)
            .await
            .unwrap();
    }
    let after = eventually("a growing lag", Duration::from_secs(10), || async {
        let lag = scrape(addr)
            .await
            .value("outbox_relay_slot_lag_bytes", &[])?;
        (lag > before + 2000.0).then_some(lag)
    })
    .await;
    assert!(after > before);

    let m = eventually(
        "a critical time_lag alert",
        Duration::from_secs(20),
        || async {
            let m = scrape(addr).await;
            (m.value("outbox_relay_alert_level", &[("alert", "time_lag")])? == 2.0).then_some(m)
        },
    )
    .await;
    assert!(m.value("outbox_relay_slot_lag_seconds", &[]).unwrap() >= 3.0);
    assert_eq!(m.value("outbox_relay_streaming", &[]), Some(0.0));
    assert_eq!(m.value("outbox_relay_slot_active", &[]), Some(0.0));
    assert_eq!(m.value("outbox_relay_ready", &[]), Some(0.0));
    assert_eq!(m.value("outbox_relay_slot_monitor_up", &[]), Some(1.0));
    assert!(
        m.value(
            "outbox_relay_restarts_total",
            &[("reason", "kafka_unreachable")]
        )
        .unwrap()
            >= 1.0
    );
    let (code, body) = http::get(addr, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("critical alert time_lag"), "{body}");
    let log = relay.log_text();
    let fired = events::ALERT_FIRING;
    assert!(
        log.contains(&format!("{fired}: [warning] time_lag")),
        "{log}"
    );
    assert!(
        log.contains(&format!("{fired}: [critical] time_lag (was warning)")),
        "{log}"
    );

    // `status` reads the running relay's view: the time-lag alert is critical.
    let out = relay.status();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("NOT streaming") && text.contains("CRITICAL time_lag"),
        "{text}"
    );

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scrape_parses_and_holds_every_documented_metric() {
    let db = TestDb::new("scrape").await;
    let port = free_port();
    // created_at_column: the oldest-row gauge exists only with it.
    let cfg = config(
        &db,
        &format!("127.0.0.1:{port}"),
        "[heartbeat]\ninterval_ms = 300\n",
    )
    .replace(
        &db.outbox_section(),
        &format!(
            "{}created_at_column = \"created_at\"\n",
            db.outbox_section()
        ),
    );
    let mut relay = Relay::start(&db.name, &cfg);
    let addr = relay_addr(&relay).await;
    relay
        .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
        .await;
    for i in 0..5 {
        writer::insert_event(&db.client, "order", &format!("a-{i}"), 0)
            .await
            .unwrap();
    }
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 5).await;
    assert_eq!(got.len(), 5);

    // The decoding statistics come from pg_stat_replication_slots, which PostgreSQL 14 fills
    // through its statistics collector, some time after the transactions were decoded.
    let m: Scrape = eventually(
        "a scrape with the events, a heartbeat and the slot's decoding statistics",
        Duration::from_secs(30),
        || async {
            let m = scrape(addr).await;
            let produced = m.sum("outbox_relay_events_produced_total")?;
            m.value("outbox_relay_heartbeat_age_seconds", &[])?;
            let decoded = m.value("outbox_relay_slot_decoded_transactions_total", &[])?;
            (produced >= 5.0 && decoded >= 5.0).then_some(m)
        },
    )
    .await;

    // Every sample belongs to a typed family; every documented metric is there.
    for s in &m.samples {
        assert!(m.family_of(&s.name).is_some(), "{} has no # TYPE", s.name);
    }
    let doc = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap();
    let mut documented = std::collections::BTreeSet::new();
    for (i, _) in doc.match_indices("outbox_relay_") {
        let name: String = doc[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if name.len() > "outbox_relay_".len() {
            documented.insert(name);
        }
    }
    assert!(documented.len() >= 30, "{documented:?}");
    // The checkpoint commit histogram has a sample only once a Kafka transaction committed.
    // The applier's metrics (`outbox_relay_apply_*`) are its own process's: tests/e2e/applier.rs.
    // `outbox_relay_source_stopped` exists with `[source.<name>]` tables: tests/e2e/sources/failures.rs.
    let transactional = cfg.contains("transactional_id");
    let missing: Vec<_> = documented
        .iter()
        .filter(|n| !n.starts_with("outbox_relay_apply_"))
        .filter(|n| n.as_str() != "outbox_relay_source_stopped")
        .filter(|n| !m.types.contains_key(n.as_str()))
        .filter(|n| transactional || n.as_str() != "outbox_relay_checkpoint_commit_seconds")
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not scraped: {missing:?}"
    );

    // Values that describe this healthy relay.
    assert_eq!(m.types["outbox_relay_commit_to_ack_seconds"], "histogram");
    assert!(
        m.value("outbox_relay_commit_to_ack_seconds_count", &[])
            .unwrap()
            >= 5.0
    );
    assert_eq!(m.types["outbox_relay_events_produced_total"], "counter");
    let topic = db.topic("order");
    assert_eq!(
        m.value(
            "outbox_relay_events_produced_total",
            &[("topic", topic.as_str())]
        ),
        Some(5.0),
        "events are counted per topic"
    );
    for (name, want) in [
        ("outbox_relay_streaming", 1.0),
        ("outbox_relay_ready", 1.0),
        ("outbox_relay_slot_present", 1.0),
        ("outbox_relay_slot_active", 1.0),
        ("outbox_relay_slot_monitor_up", 1.0),
        ("outbox_relay_server_max_slot_wal_keep_size_bytes", -1.0),
        ("outbox_relay_slot_safe_wal_size_bytes", -1.0),
    ] {
        assert_eq!(m.value(name, &[]), Some(want), "{name}");
    }
    assert_eq!(
        m.value("outbox_relay_slot_wal_status", &[("status", "reserved")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("outbox_relay_slot_wal_status", &[("status", "lost")]),
        Some(0.0)
    );
    for alert in ["retained_wal", "time_lag", "wal_status"] {
        assert_eq!(
            m.value("outbox_relay_alert_level", &[("alert", alert)]),
            Some(0.0)
        );
    }
    assert!(
        m.value("outbox_relay_slot_decoded_transactions_total", &[])
            .unwrap()
            >= 5.0
    );
    let lag = m.value("outbox_relay_slot_lag_bytes", &[]).unwrap();
    assert!((0.0..(1 << 20) as f64).contains(&lag), "{lag}");

    assert_eq!(
        http::get(addr, "/readyz").await,
        (200, "ready\n".to_string())
    );
    assert_eq!(http::get(addr, "/nope").await.0, 404);

    // `status` on a healthy relay: exit 0, the relay's own view included.
    let out = relay.status();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for needle in [
        format!("slot \"{}\"", db.name),
        "wal_status reserved".into(),
        "streaming, ready".into(),
        "alerts           none".into(),
        "result: OK".into(),
    ] {
        assert!(text.contains(&needle), "{needle:?} missing:\n{text}");
    }
    println!("{text}");

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
