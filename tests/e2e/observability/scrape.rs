//! A healthy relay's scrape: it parses, every sample has a type, every metric docs/operations.md
//! names is there (but those of other setups, listed), and the values describe the relay;
//! `outbox-relay status` exits 0.

use std::time::Duration;

use outbox_relay::telemetry::events;

use super::{config, status};
use crate::support::{
    TestDb, eventually,
    http::{self, Scrape, free_port, relay_addr, scrape},
    kafka,
    relay::Relay,
    repo_root, writer,
};

/// The test [`super::metrics_scrape_parses_and_holds_every_documented_metric`].
pub(super) async fn holds_every_documented_metric() {
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
    writer::insert_orders(&db.client, 5, |i| format!("a-{i}")).await;
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
    let text = status(&relay, 0);
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
