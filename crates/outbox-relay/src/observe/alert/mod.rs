//! The built-in alerts: pure threshold evaluation with fire/resolve transitions.
//!
//! Six alerts, each at one level at a time (ok, warning, critical):
//! - `retained_wal`: WAL the slot keeps on the server's disk (`pg_current_wal_lsn() -
//!   restart_lsn`), in bytes and as a fraction of `max_slot_wal_keep_size`;
//! - `time_lag`: age of the oldest WAL the slot has not confirmed;
//! - `wal_status`: `wal_status` leaving `reserved` (`extended` at a configurable level,
//!   `unreserved` and `lost` critical);
//! - `slot_forecast` and `stalled` ([`trend`]): when the slot is lost at the current WAL rate,
//!   and a stream that is up while nothing moves;
//! - `outbox_dead_tuples` ([`hygiene`]): dead tuples vacuum has not removed from an outbox table.
//!
//! Invariant: a change of level is exactly one [`Transition`], which the caller logs once and
//! notifies once; an unchanged level produces nothing. Nothing here reads a clock or does I/O:
//! the monitor passes observations and the time in, so every rule is unit-tested below.

use std::{fmt, time::Duration, time::SystemTime};

use relay_core::Lsn;

use crate::{
    config::AlertsConfig,
    postgres::slot::{SlotSnapshot, WalStatus},
    telemetry::events::{ALERT_FIRING, ALERT_RESOLVED},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlertKind {
    RetainedWal,
    TimeLag,
    WalStatus,
    SlotForecast,
    Stalled,
    OutboxDeadTuples,
}

/// How many alerts there are.
pub const ALERTS: usize = 6;

impl AlertKind {
    pub const ALL: [AlertKind; ALERTS] = [
        AlertKind::RetainedWal,
        AlertKind::TimeLag,
        AlertKind::WalStatus,
        AlertKind::SlotForecast,
        AlertKind::Stalled,
        AlertKind::OutboxDeadTuples,
    ];

    /// The `alert` label value and the name in logs and notifications.
    pub const fn as_str(self) -> &'static str {
        match self {
            AlertKind::RetainedWal => "retained_wal",
            AlertKind::TimeLag => "time_lag",
            AlertKind::WalStatus => "wal_status",
            AlertKind::SlotForecast => "slot_forecast",
            AlertKind::Stalled => "stalled",
            AlertKind::OutboxDeadTuples => "outbox_dead_tuples",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The label values of the alert series, for [`crate::telemetry::metrics::install`].
pub const LABELS: crate::telemetry::metrics::AlertLabels = crate::telemetry::metrics::AlertLabels {
    kinds: &KIND_NAMES,
    severities: &SEVERITY_NAMES,
};

const KIND_NAMES: [&str; ALERTS] = {
    let mut out = [""; ALERTS];
    let mut i = 0;
    while i < ALERTS {
        out[i] = AlertKind::ALL[i].as_str();
        i += 1;
    }
    out
};

const SEVERITY_NAMES: [&str; 2] = [Severity::Warning.as_str(), Severity::Critical.as_str()];

impl fmt::Display for AlertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 2] = [Severity::Warning, Severity::Critical];

    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// The value of the `outbox_relay_alert_level` gauge.
    pub fn gauge(level: Option<Severity>) -> f64 {
        match level {
            None => 0.0,
            Some(Severity::Warning) => 1.0,
            Some(Severity::Critical) => 2.0,
        }
    }
}

/// What the monitor measured, in the units the thresholds use.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// `pg_current_wal_lsn() - restart_lsn`; `None` when the slot is missing or lost.
    pub retained_wal_bytes: Option<u64>,
    /// The server's `max_slot_wal_keep_size` in bytes; `None` when unlimited (-1).
    pub max_slot_wal_keep_size: Option<u64>,
    /// Age of the oldest unconfirmed WAL; `None` when unknown (e.g. `outbox-relay status`).
    pub time_lag: Option<Duration>,
    pub wal_status: Option<WalStatus>,
    /// Why the slot was invalidated (`None` while usable), for the `wal_status` alert's text.
    pub invalidation: Option<relay_core::invalidation::Invalidation>,
    /// The slot's `confirmed_flush_lsn`, for the message of a lost slot.
    pub confirmed_flush: Option<Lsn>,
    /// Seconds until the slot's headroom is gone at the current rate; `None` when it does not
    /// shrink or is unknown (set by the monitor, from its history).
    pub seconds_to_loss: Option<f64>,
    /// The headroom of the forecast is `alerts.retained_wal_critical_bytes` (unlimited
    /// `max_slot_wal_keep_size`), not PostgreSQL's `safe_wal_size`.
    pub forecast_to_threshold: bool,
    /// The server sets `max_slot_wal_keep_size` but shows no `safe_wal_size`: the forecast's
    /// headroom is estimated as the limit minus the retained WAL (set by the monitor).
    pub forecast_estimated: bool,
    /// For how long the stream has been up with nothing moving (set by the monitor).
    pub stalled_for: Option<Duration>,
    /// The outbox table with the most dead tuples, from the last reading of their health.
    pub outbox_worst: Option<crate::observe::outbox_tables::TableHealth>,
}

impl Observation {
    /// The observation of one reading of the slot; `time_lag` comes from the monitor's history.
    pub(crate) fn of(snap: &SlotSnapshot, time_lag: Option<Duration>) -> Self {
        Observation {
            retained_wal_bytes: snap.retained_wal_bytes(),
            max_slot_wal_keep_size: snap.max_slot_wal_keep_size,
            time_lag,
            wal_status: snap.slot.as_ref().and_then(|s| s.wal_status.clone()),
            invalidation: snap.slot.as_ref().and_then(|s| s.invalidation()),
            confirmed_flush: snap.slot.as_ref().and_then(|s| s.confirmed_flush),
            seconds_to_loss: None,
            forecast_to_threshold: snap.max_slot_wal_keep_size.is_none(),
            forecast_estimated: false,
            stalled_for: None,
            outbox_worst: None,
        }
    }
}

/// The verdict on one alert for one observation.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: AlertKind,
    pub level: Option<Severity>,
    /// What is wrong (or, at level ok, what was measured), one sentence without a full stop.
    pub summary: String,
    /// What to do, for a level other than ok.
    pub action: &'static str,
    /// A discrete state whose change is news even at the same level (the `wal_status` value:
    /// `unreserved` → `lost` stays critical); empty for the measured alerts.
    pub state: String,
}

/// A change of level (or of discrete state) of one alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub kind: AlertKind,
    pub from: Option<Severity>,
    pub to: Option<Severity>,
    pub summary: String,
    pub action: &'static str,
    /// When the alert started firing (kept across escalation), or `None` once resolved.
    pub since: Option<SystemTime>,
}

impl Transition {
    pub fn is_resolved(&self) -> bool {
        self.to.is_none()
    }

    /// The one log line of this transition.
    pub fn message(&self) -> String {
        match (self.from, self.to) {
            (_, None) => format!("{ALERT_RESOLVED}: {}: {}", self.kind, self.summary),
            (from, Some(to)) => {
                let was = match from {
                    Some(f) => format!(" (was {})", f.as_str()),
                    None => String::new(),
                };
                format!(
                    "{ALERT_FIRING}: [{}] {}{was}: {}. What to do: {}",
                    to.as_str(),
                    self.kind,
                    self.summary,
                    self.action
                )
            }
        }
    }
}

/// A currently firing alert, for repeat notifications and `/readyz`.
#[derive(Debug, Clone, PartialEq)]
pub struct Active {
    pub kind: AlertKind,
    pub severity: Severity,
    pub summary: String,
    pub action: &'static str,
    pub since: SystemTime,
    pub state: String,
}

/// Evaluates every alert for one observation, without state (used by `outbox-relay status`).
pub fn evaluate(cfg: &AlertsConfig, obs: &Observation) -> [Finding; ALERTS] {
    [
        slot_state::retained_wal(cfg, obs),
        slot_state::time_lag(cfg, obs),
        slot_state::wal_status(cfg, obs),
        trend::slot_forecast(cfg, obs),
        trend::stalled(cfg, obs),
        hygiene::outbox_dead_tuples(cfg, obs),
    ]
}

fn secs_text(s: u64) -> String {
    if s == 0 {
        "off".into()
    } else {
        human_duration(Duration::from_secs(s))
    }
}

/// The alerts' state across observations.
#[derive(Debug)]
pub struct Alerts {
    cfg: AlertsConfig,
    current: [Option<Active>; ALERTS],
    /// The `slot_forecast` estimate (seconds) of its last transition: a firing forecast whose
    /// estimate falls below half of it is news at the same level (a loss coming much sooner
    /// than the last notification said).
    forecast_sent: Option<f64>,
}

impl Alerts {
    pub fn new(cfg: AlertsConfig) -> Self {
        Self {
            cfg,
            current: std::array::from_fn(|_| None),
            forecast_sent: None,
        }
    }

    /// Applies one observation; returns the transitions (empty when nothing changed level).
    pub fn observe(&mut self, obs: &Observation, now: SystemTime) -> Vec<Transition> {
        let mut out = Vec::new();
        for f in evaluate(&self.cfg, obs) {
            let slot = &mut self.current[f.kind.index()];
            let from = slot.as_ref().map(|a| a.severity);
            let mut state_changed = slot.as_ref().is_some_and(|a| a.state != f.state);
            if f.kind == AlertKind::SlotForecast {
                let halved = match (self.forecast_sent, obs.seconds_to_loss) {
                    (Some(sent), Some(now)) => now < sent / 2.0,
                    _ => false,
                };
                state_changed |= halved && f.level.is_some() && from == f.level;
                if f.level.is_none() {
                    self.forecast_sent = None;
                } else if from != f.level || state_changed {
                    self.forecast_sent = obs.seconds_to_loss;
                }
            }
            match (from, f.level) {
                (None, None) => {}
                (Some(_), None) => {
                    *slot = None;
                    out.push(Transition {
                        kind: f.kind,
                        from,
                        to: None,
                        summary: f.summary,
                        action: f.action,
                        since: None,
                    });
                }
                (from, Some(to)) => {
                    let since = slot.as_ref().map_or(now, |a| a.since);
                    *slot = Some(Active {
                        kind: f.kind,
                        severity: to,
                        summary: f.summary.clone(),
                        action: f.action,
                        since,
                        state: f.state,
                    });
                    if from != Some(to) || state_changed {
                        out.push(Transition {
                            kind: f.kind,
                            from,
                            to: Some(to),
                            summary: f.summary,
                            action: f.action,
                            since: Some(since),
                        });
                    }
                }
            }
        }
        out
    }

    /// The firing alerts, with their latest summaries.
    pub fn active(&self) -> Vec<Active> {
        self.current.iter().flatten().cloned().collect()
    }

    pub fn level(&self, kind: AlertKind) -> Option<Severity> {
        self.current[kind.index()].as_ref().map(|a| a.severity)
    }
}

/// `1536` → `1.5 KiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `Duration::from_secs(3725)` → `1h 2m 5s`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m {}s", s / 3600, s % 3600 / 60, s % 60),
    }
}

mod hygiene;
mod slot_state;
mod trend;

pub(crate) use trend::approx;

#[cfg(test)]
mod tests;
