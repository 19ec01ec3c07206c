//! With Kafka down the slot monitor goes on: a growing lag, a critical `time_lag` alert,
//! `/readyz` failing with the reason, and `outbox-relay status` exiting 4.

use std::{net::SocketAddr, time::Duration};

use outbox_relay::telemetry::events;

use super::{config, status, without_kafka};
use crate::support::{
    TestDb, eventually,
    http::{self, free_port, relay_addr, scrape},
    relay::Relay,
    writer,
};

/// The test [`super::with_kafka_down_the_monitor_reports_growing_lag_and_readyz_fails`].
pub(super) async fn lag_grows_and_readyz_fails() {
    let db = TestDb::new("kafkadown").await;
    let port = free_port();
    let (cfg, dead_kafka) = without_kafka(config(
        &db,
        &format!("127.0.0.1:{port}"),
        "[heartbeat]\nenabled = false\n\n[alerts]\ntime_lag_warning_secs = 1\ntime_lag_critical_secs = 3\n",
    ));
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
    writer::insert_orders(&db.client, 20, |i| format!("a-{}", i % 3)).await;
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
    let text = status(&relay, 4);
    assert!(
        text.contains("NOT streaming") && text.contains("CRITICAL time_lag"),
        "{text}"
    );

    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
