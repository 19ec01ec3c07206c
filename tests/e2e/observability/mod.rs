//! Slot-lag alerting and observability against real servers: the retained-WAL alert of a
//! stopped relay fires (log line, metric, webhook) and resolves after catch-up; a lost slot is
//! critical, stops the relay and is never re-created; the heartbeat keeps `confirmed_flush_lsn`
//! moving while only other tables are written; with Kafka down the monitor still reports a
//! growing lag and `/readyz` fails; and a scrape holds every metric docs/operations.md names.
//! `outbox-relay status` is checked along the way (exit 0 healthy, 4 critical).
//!
//! Tests that need other server settings (a small `max_slot_wal_keep_size`) start their own
//! PostgreSQL cluster on a dedicated port.
//!
//! The tests are listed here, each running its scenario from the file of its concern (so their
//! names stay `observability::<name>`): [`alerts`] (on clusters of their own), [`heartbeat`],
//! [`kafka_down`] and [`scrape`].

mod alerts;
mod heartbeat;
mod kafka_down;
mod scrape;

use crate::support::{TestDb, http::free_port, relay::Relay};

/// `[[outbox]]`, a fast monitor and the HTTP endpoint on `listen`, then `extra`.
fn config(db: &TestDb, listen: &str, extra: &str) -> String {
    db.relay_config(&format!(
        "{}\n[http]\nlisten = \"{listen}\"\n\n[monitor]\npoll_interval_ms = 300\n\n{extra}",
        db.outbox_section()
    ))
}

/// Runs `outbox-relay status` on `relay`'s config: its output, once its exit code is `code`.
fn status(relay: &Relay, code: i32) -> String {
    let out = relay.status();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(code), "{text}");
    text
}

/// `cfg` with Kafka at an address where nothing listens (returned, for
/// `OUTBOX_RELAY__KAFKA__BROKERS`), each connection attempt given up after 500 ms.
fn without_kafka(cfg: String) -> (String, String) {
    let dead_kafka = format!("127.0.0.1:{}", free_port());
    let cfg = cfg.replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 500\n");
    (cfg, dead_kafka)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_wal_alert_fires_for_a_stopped_relays_backlog_and_resolves_after_catch_up() {
    alerts::retained_wal_fires_and_resolves().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_slot_is_critical_stops_the_relay_and_is_never_recreated() {
    alerts::lost_slot_stops_the_relay().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_keeps_confirmed_flush_up_while_only_other_tables_are_written() {
    heartbeat::keeps_confirmed_flush_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kafka_down_the_monitor_reports_growing_lag_and_readyz_fails() {
    kafka_down::lag_grows_and_readyz_fails().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scrape_parses_and_holds_every_documented_metric() {
    scrape::holds_every_documented_metric().await;
}
