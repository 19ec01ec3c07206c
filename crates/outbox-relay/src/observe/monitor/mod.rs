//! The slot monitor: every `monitor.poll_interval_ms` it reads the slot from PostgreSQL on its
//! own SQL connection ([`crate::postgres::slot`]), publishes gauges, evaluates the alerts and notifies.
//!
//! ```text
//! pg_replication_slots, pg_stat_replication_slots, max_slot_wal_keep_size, pg_current_wal_lsn()
//!     ─▶ SlotSnapshot ─▶ gauges ─▶ alert::Alerts ─▶ log line, alert gauges, /readyz, webhook
//!                                                    └─ wal_status = lost ─▶ supervisor stops
//!                  └─ trend::Trends (headroom window, stall markers) ─▶ slot_forecast, stalled
//!                                                    └─ stalled ─▶ supervisor restarts the attempt
//! ```
//!
//! Invariants:
//! - It never uses the replication connection, so it keeps reporting while the stream is down,
//!   while Kafka is down, and while the server is a standby waiting for the slot.
//! - `wal_status = lost` (or an `invalidation_reason`) is reported to the supervisor as a
//!   definite error, once: the relay stops and never re-creates the slot, because a re-created
//!   slot starts at "now" and silently skips every event in the gap.
//! - Time lag needs no clock on the server: [`WalClock`] remembers when the monitor first saw
//!   the server's WAL pass each position, so the age of the oldest unconfirmed WAL is known to
//!   within one poll interval (a lower bound while the first sample is not yet confirmed).

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use relay_core::{Lsn, headroom::Basis};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    observe::alert::{AlertKind, Alerts, Observation, Severity},
    observe::health::Shared,
    observe::webhook::{Dispatcher, Repeater},
    postgres::control::{self, describe_pg},
    postgres::publication,
    postgres::slot::{self, SlotSnapshot, WalStatus},
    telemetry::events::{PIPELINE_STALLED, PUBLICATION_DRIFT, SLOT_LOST, SLOT_MONITOR_FAILED},
    telemetry::metrics as m,
};

mod clock;
mod tables;
mod trend;

use self::clock::{CounterMirror, WalClock};

/// What the monitor task needs from `run`.
pub(crate) struct MonitorTask {
    pub(crate) cfg: Arc<Config>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) webhook: Option<Dispatcher>,
    /// Receives the definite error when the slot is lost.
    pub(crate) fatal: mpsc::Sender<RelayError>,
    /// Fired after the first poll, successful or not.
    pub(crate) first_poll: Option<oneshot::Sender<()>>,
}

struct Monitor {
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    alerts: Alerts,
    clock: WalClock,
    trends: trend::Trends,
    repeater: Repeater,
    webhook: Option<Dispatcher>,
    fatal: Option<mpsc::Sender<RelayError>>,
    spill: [CounterMirror; 5],
    started: SystemTime,
    last_heartbeat: Option<SystemTime>,
    conn: Option<(Client, i32)>,
    last_error: Option<String>,
    /// The last good health reading of each outbox table ([`tables`]).
    tables: Vec<crate::observe::outbox_tables::TableHealth>,
    tables_read: Option<Instant>,
    tables_error: Option<String>,
}

impl MonitorTask {
    /// Polls until `shutdown` flips to true. Returns the webhook dispatcher for a final flush.
    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Option<Dispatcher> {
        let interval = Duration::from_millis(self.cfg.monitor.poll_interval_ms);
        let mut mon = Monitor {
            alerts: Alerts::new(self.cfg.alerts.clone()),
            repeater: Repeater::new(self.cfg.alerts.webhook.repeat_interval()),
            cfg: self.cfg,
            shared: self.shared,
            clock: WalClock::default(),
            trends: trend::Trends::new(Instant::now()),
            webhook: self.webhook,
            fatal: Some(self.fatal),
            spill: Default::default(),
            started: SystemTime::now(),
            last_heartbeat: None,
            conn: None,
            last_error: None,
            tables: Vec::new(),
            tables_read: None,
            tables_error: None,
        };
        loop {
            // A poll may wait for an unreachable server (connect timeout): never delay a stop.
            let stopped = tokio::select! {
                _ = mon.poll() => false,
                _ = shutdown.changed() => true,
            };
            if stopped {
                return mon.webhook;
            }
            if let Some(tx) = self.first_poll.take() {
                let _ = tx.send(());
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return mon.webhook,
            }
            if *shutdown.borrow() {
                return mon.webhook;
            }
        }
    }
}

impl Monitor {
    async fn poll(&mut self) {
        match self.read().await {
            Ok(snap) => {
                self.last_error = None;
                metrics::gauge!(m::MONITOR_UP).set(1.0);
                self.read_outbox_tables().await;
                self.publish(&snap);
                self.check_publication().await;
            }
            Err(e) => {
                self.conn = None;
                metrics::gauge!(m::MONITOR_UP).set(0.0);
                metrics::counter!(m::MONITOR_ERRORS).increment(1);
                if self.last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(error = %e, "{SLOT_MONITOR_FAILED}: retrying every poll interval");
                    self.last_error = Some(e);
                }
            }
        }
        metrics::gauge!(m::READY).set(if self.shared.readiness(false).is_ok() {
            1.0
        } else {
            0.0
        });
    }

    /// Once the relay has streamed (preflight created or checked the publication), a
    /// publication that stops listing an outbox table stops the relay: its events would
    /// silently never arrive.
    async fn check_publication(&mut self) {
        if !self.shared.streaming() {
            return;
        }
        let Some((client, _)) = self.conn.as_ref() else {
            return;
        };
        match publication::publication_covers_outbox(client, &self.cfg).await {
            Err(e @ RelayError::Definite(Definite::Precondition(_))) => {
                if let Some(fatal) = self.fatal.take() {
                    tracing::error!(error = %e, "{PUBLICATION_DRIFT}: stopping");
                    let _ = fatal.try_send(e);
                }
            }
            Err(e) => tracing::debug!(error = %e, "publication check failed; retried next poll"),
            Ok(()) => {}
        }
    }

    async fn read(&mut self) -> Result<SlotSnapshot, String> {
        if self.conn.as_ref().is_none_or(|(c, _)| c.is_closed()) {
            let client = control::connect(&self.cfg)
                .await
                .map_err(|e| e.to_string())?;
            let version = slot::server_version(&client)
                .await
                .map_err(|e| describe_pg(&e))?;
            self.conn = Some((client, version));
        }
        let (client, version) = self.conn.as_ref().expect("connected above");
        slot::query(client, &self.cfg.postgres.slot, *version)
            .await
            .map_err(|e| format!("cannot read replication slot state: {}", describe_pg(&e)))
    }

    fn publish(&mut self, snap: &SlotSnapshot) {
        let now = Instant::now();
        let set = |name: &'static str, v: f64| metrics::gauge!(name).set(v);
        set(
            m::MAX_SLOT_WAL_KEEP_SIZE_BYTES,
            snap.max_slot_wal_keep_size.map_or(-1.0, |b| b as f64),
        );
        if let Some(lsn) = snap.server_lsn {
            set(m::SERVER_WAL_LSN, lsn.0 as f64);
            self.clock.observe(now, lsn);
        }
        set(m::SLOT_PRESENT, if snap.slot.is_some() { 1.0 } else { 0.0 });
        let mut time_lag = None;
        self.shared
            .set_wal_at_risk(snap.slot.as_ref().is_some_and(|s| {
                matches!(s.wal_status, Some(WalStatus::Unreserved | WalStatus::Lost))
            }));
        if let Some(s) = &snap.slot {
            set(m::SLOT_ACTIVE, if s.active { 1.0 } else { 0.0 });
            for status in m::WAL_STATUSES {
                let on = s
                    .wal_status
                    .as_ref()
                    .is_some_and(|w| w.to_string() == *status);
                metrics::gauge!(m::SLOT_WAL_STATUS, "status" => *status).set(if on {
                    1.0
                } else {
                    0.0
                });
            }
            let why = s.invalidation();
            for reason in m::INVALIDATION_REASONS {
                let on = why.as_ref().is_some_and(|w| w.label() == *reason);
                metrics::gauge!(m::SLOT_INVALIDATED, "reason" => *reason).set(if on {
                    1.0
                } else {
                    0.0
                });
            }
            set(
                m::SLOT_INACTIVE_SINCE,
                s.inactive_since.map_or(-1.0, |t| t as f64),
            );
            set(
                m::SLOT_SAFE_WAL_SIZE_BYTES,
                s.safe_wal_size.map_or(-1.0, |b| b as f64),
            );
            if let Some(c) = s.confirmed_flush {
                set(m::SLOT_CONFIRMED_FLUSH_LSN, c.0 as f64);
                let lag = self.clock.lag(c, now);
                set(m::SLOT_LAG_SECONDS, lag.as_secs_f64());
                time_lag = Some(lag);
                self.heartbeat_age(c);
            }
            if let Some(b) = snap.lag_bytes() {
                set(m::SLOT_LAG_BYTES, b as f64);
            }
            if let Some(b) = snap.retained_wal_bytes() {
                set(m::SLOT_RETAINED_WAL_BYTES, b as f64);
            }
            if let Some(st) = s.stats {
                for (i, (name, v)) in [
                    (m::SLOT_SPILLED_TRANSACTIONS, st.spill_txns),
                    (m::SLOT_SPILL_WRITES, st.spill_count),
                    (m::SLOT_SPILLED_BYTES, st.spill_bytes),
                    (m::SLOT_DECODED_TRANSACTIONS, st.total_txns),
                    (m::SLOT_DECODED_BYTES, st.total_bytes),
                ]
                .into_iter()
                .enumerate()
                {
                    metrics::counter!(name).increment(self.spill[i].increment(v));
                }
            }
        }
        let trend = self.trends.observe(
            &self.cfg.alerts,
            snap,
            self.shared.streaming(),
            self.shared.pipeline_markers(),
            now,
        );
        set(
            m::SLOT_LOSS_FORECAST_SECONDS,
            trend.seconds_to_loss.unwrap_or(-1.0),
        );
        self.evaluate(snap, time_lag, trend);
    }

    /// `outbox_relay_heartbeat_age_seconds`: since the newest confirmed heartbeat was written
    /// (since start until the first one is confirmed).
    fn heartbeat_age(&mut self, confirmed: Lsn) {
        if !self.cfg.heartbeat.enabled {
            return;
        }
        if let Some(at) = self.shared.heartbeats_confirmed(confirmed) {
            self.last_heartbeat = Some(at);
        }
        let since = self.last_heartbeat.unwrap_or(self.started);
        let age = SystemTime::now().duration_since(since).unwrap_or_default();
        metrics::gauge!(m::HEARTBEAT_AGE_SECONDS).set(age.as_secs_f64());
    }

    fn evaluate(&mut self, snap: &SlotSnapshot, time_lag: Option<Duration>, trend: trend::Trend) {
        let slot = &self.cfg.postgres.slot;
        let obs = Observation {
            seconds_to_loss: trend.seconds_to_loss,
            forecast_to_threshold: matches!(trend.basis, Some(Basis::Threshold { .. })),
            forecast_estimated: matches!(trend.basis, Some(Basis::EstimatedFromLimit { .. })),
            stalled_for: trend.stalled_for,
            outbox_worst: crate::observe::outbox_tables::worst(&self.tables).cloned(),
            ..Observation::of(snap, time_lag)
        };
        let transitions = self.alerts.observe(&obs, SystemTime::now());
        for t in &transitions {
            metrics::gauge!(m::ALERT_LEVEL, "alert" => t.kind.as_str()).set(Severity::gauge(t.to));
            let msg = t.message();
            match t.to {
                None => tracing::info!(slot = %slot, alert = t.kind.as_str(), "{msg}"),
                Some(sev) => {
                    metrics::counter!(m::ALERTS_FIRED, "alert" => t.kind.as_str(), "severity" => sev.as_str())
                        .increment(1);
                    if sev == Severity::Critical {
                        tracing::error!(slot = %slot, alert = t.kind.as_str(), severity = sev.as_str(), "{msg}");
                    } else {
                        tracing::warn!(slot = %slot, alert = t.kind.as_str(), severity = sev.as_str(), "{msg}");
                    }
                }
            }
        }
        let active = self.alerts.active();
        if let Some(w) = &self.webhook {
            for n in self.repeater.due(&transitions, &active, Instant::now()) {
                w.send(n);
            }
        }
        self.shared.set_alerts(active);
        if transitions
            .iter()
            .any(|t| t.kind == AlertKind::Stalled && t.to.is_some())
        {
            tracing::warn!(slot = %slot, stalled_secs = self.cfg.alerts.stalled_secs, "{PIPELINE_STALLED}: restarting the pipeline from the last confirmed LSN");
            self.shared.request_restart();
            self.trends.restarted();
        }

        if let Some(s) = snap.slot.as_ref()
            && let Some(why) = s.invalidation()
            && let Some(fatal) = self.fatal.take()
        {
            tracing::error!(slot = %slot, reason = why.label(), "{SLOT_LOST}: the slot monitor found the slot invalidated; stopping");
            let _ = fatal.try_send(RelayError::from(Definite::Precondition(
                crate::postgres::slot::lost_message(slot, &why, s.confirmed_flush),
            )));
        }
    }
}
