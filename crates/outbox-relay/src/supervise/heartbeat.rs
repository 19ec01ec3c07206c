//! The heartbeat: every `heartbeat.interval_ms`, one transactional logical message on the
//! relay's own SQL connection to the slot's database:
//!
//! ```sql
//! SELECT pg_logical_emit_message(true, '<heartbeat.prefix>', '{"slot":…,"at":…}')
//! ```
//!
//! Invariants:
//! - The message is transactional, so it reaches the relay inside BEGIN/COMMIT, in commit
//!   order, like any transaction without outbox rows: confirming past it is exactly as safe as
//!   confirming any other transaction, and it lets `confirmed_flush_lsn` advance on a database
//!   whose outbox is quiet. The pipeline publishes no logical message, whatever its prefix.
//! - The message LSN is handed to [`Shared`], so the monitor can tell when the slot confirmed
//!   it (`outbox_relay_heartbeat_age_seconds`, end-to-end proof of progress).
//! - Nothing is written on a standby (read-only): with `postgres.primary_host` the heartbeat
//!   goes to its primary, whose WAL reaches the standby's slot. Failures are counted and
//!   logged once per distinct error, and never stop the relay.

use std::{sync::Arc, time::Duration, time::SystemTime};

use relay_core::Lsn;
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::{
    config::Config,
    observe::health::Shared,
    observe::webhook::rfc3339,
    postgres::control::{self, describe_pg},
    telemetry::events::{HEARTBEAT_FAILED, HEARTBEAT_SKIPPED, HEARTBEAT_WRITTEN},
    telemetry::metrics as m,
};

/// Writes one heartbeat; `Ok(None)` on a standby.
pub(crate) async fn beat(client: &Client, prefix: &str, slot: &str) -> Result<Option<Lsn>, String> {
    let payload = serde_json::json!({ "slot": slot, "at": rfc3339(SystemTime::now()) }).to_string();
    let row = client
        .query_one(
            "SELECT CASE WHEN pg_is_in_recovery() THEN NULL \
                    ELSE pg_logical_emit_message(true, $1::text, $2::text)::text END",
            &[&prefix, &payload],
        )
        .await
        .map_err(|e| describe_pg(&e))?;
    match row.get::<_, Option<String>>(0) {
        None => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|e| format!("{e}")),
    }
}

/// Writes heartbeats until `shutdown` flips to true.
pub(crate) async fn run(
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let hb = &cfg.heartbeat;
    let mut tick = tokio::time::interval(Duration::from_millis(hb.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client: Option<Client> = None;
    // The standby's primary (postgres.primary_host), connected when first needed.
    let mut primary: Option<Client> = None;
    let mut last_error: Option<String> = None;
    let mut standby_logged = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if client.as_ref().is_none_or(Client::is_closed) {
            client = control::connect(&cfg)
                .await
                .map_err(|e| e.to_string())
                .map_or_else(
                    |e| {
                        failed(&mut last_error, e);
                        None
                    },
                    Some,
                );
        }
        let Some(c) = client.as_ref() else { continue };
        let at = SystemTime::now();
        match beat(c, &hb.prefix, &cfg.postgres.slot).await {
            Ok(Some(lsn)) => {
                shared.heartbeat_written(at, lsn);
                metrics::counter!(m::HEARTBEATS, "result" => "ok").increment(1);
                last_error = None;
                tracing::trace!(lsn = %lsn, "{HEARTBEAT_WRITTEN}");
            }
            // A standby is read-only: the heartbeat goes to its primary when one is configured
            // (its WAL reaches the standby's slot by replication), else it is skipped.
            Ok(None) if cfg.postgres.primary_host.is_some() => {
                if primary.as_ref().is_none_or(Client::is_closed) {
                    primary = match control::connect_primary(&cfg).await {
                        Some(Ok(p)) => Some(p),
                        Some(Err(e)) => {
                            failed(&mut last_error, format!("the primary: {e}"));
                            None
                        }
                        None => None,
                    };
                }
                let Some(p) = primary.as_ref() else { continue };
                match beat(p, &hb.prefix, &cfg.postgres.slot).await {
                    Ok(Some(lsn)) => {
                        shared.heartbeat_written(at, lsn);
                        metrics::counter!(m::HEARTBEATS, "result" => "ok").increment(1);
                        last_error = None;
                        tracing::trace!(lsn = %lsn, "{HEARTBEAT_WRITTEN}: on the primary");
                    }
                    Ok(None) => failed(
                        &mut last_error,
                        "postgres.primary_host is a standby too: point it at the primary".into(),
                    ),
                    Err(e) => {
                        primary = None;
                        failed(&mut last_error, format!("on the primary: {e}"));
                    }
                }
            }
            Ok(None) => {
                if !standby_logged {
                    tracing::info!(
                        "{HEARTBEAT_SKIPPED}: the server is a standby (read-only) and \
                         postgres.primary_host is not set"
                    );
                    standby_logged = true;
                }
            }
            Err(e) => {
                client = None;
                failed(
                    &mut last_error,
                    format!(
                        "{e}; the role needs EXECUTE on pg_logical_emit_message, or set \
                         heartbeat.enabled = false"
                    ),
                );
            }
        }
    }
}

fn failed(last: &mut Option<String>, e: String) {
    metrics::counter!(m::HEARTBEATS, "result" => "error").increment(1);
    if last.as_deref() != Some(e.as_str()) {
        tracing::warn!(error = %e, "{HEARTBEAT_FAILED}: retrying every interval");
        *last = Some(e);
    }
}
