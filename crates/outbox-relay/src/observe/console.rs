//! The relay's console: its status document (`/status.json`): one entry per source, built from the process's
//! own metrics text and the sources' health (state, why it stopped, firing alerts since when).
//!
//! Invariant: `outbox-relay status` reads this document from the running relay (it no longer
//! parses `/metrics` itself), and the page draws it, so the terminal and the page cannot
//! disagree: both show what [`document`] computed from one rendering of the metrics.

use std::{collections::HashMap, time::SystemTime};

use relay_core::Lsn;
use serde::{Deserialize, Serialize};

use outbox_service::console::{
    View,
    history::{History, Reading},
    prom_text::{Sample, samples},
    unix,
};

use crate::{
    observe::health::{Shared, SourceHealth},
    observe::webhook::rfc3339,
    telemetry::metrics as m,
};

/// The whole document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RelayStatus {
    /// Always `relay`.
    pub kind: String,
    /// When it was computed, in seconds since the Unix epoch (the page's stale check).
    pub at: f64,
    pub version: String,
    pub sources: Vec<SourceStatus>,
}

/// One source (one database and slot); `name` is `None` in a single-database config.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SourceStatus {
    pub name: Option<String>,
    /// `streaming`, `passive` (another instance holds the slot), `stopped` or `waiting`.
    pub state: String,
    /// Why it is not streaming, when known.
    pub why: Option<String>,
    pub streaming: Option<bool>,
    pub ready: Option<bool>,
    pub slot_present: Option<bool>,
    /// Another session (another instance) holds the slot while this one does not stream.
    pub slot_held_elsewhere: bool,
    pub confirmed_lsn: Option<String>,
    pub server_lsn: Option<String>,
    pub lag_bytes: Option<f64>,
    pub lag_secs: Option<f64>,
    pub retained_wal_bytes: Option<f64>,
    pub max_slot_wal_keep_size_bytes: Option<f64>,
    pub safe_wal_size_bytes: Option<f64>,
    pub wal_status: Option<String>,
    /// Seconds until the slot is lost at the current rate; negative: the headroom does not
    /// shrink.
    pub loss_forecast_secs: Option<f64>,
    /// Acknowledged by Kafka since the process started (all topics).
    pub events_produced: Option<f64>,
    /// Over the last sampling interval of the history ring.
    pub events_per_sec: Option<f64>,
    pub inflight_events: Option<f64>,
    pub inflight_transactions: Option<f64>,
    pub inflight_bytes: Option<f64>,
    /// Seconds since the relay last confirmed a position to the slot.
    pub last_confirmation_age_secs: Option<f64>,
    pub heartbeat_age_secs: Option<f64>,
    /// The oldest row still in an outbox table (the oldest of the source's tables).
    pub oldest_row_age_secs: Option<f64>,
    /// Every built-in alert with its level (0 ok, 1 warning, 2 critical).
    pub alerts: Vec<AlertStatus>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AlertStatus {
    pub alert: String,
    pub level: f64,
    /// Set while it fires.
    pub summary: Option<String>,
    /// When it started firing (RFC 3339), while it fires.
    pub since: Option<String>,
}

/// The document for `sources` (name and health; one unnamed source in a single-database
/// config) from the metrics `text`; `rates` are the events per second by source name (`""` for
/// an unnamed one).
pub(crate) fn document(
    text: &str,
    sources: &[(Option<String>, SourceHealth)],
    rates: &HashMap<String, f64>,
) -> RelayStatus {
    RelayStatus {
        kind: "relay".into(),
        at: unix(SystemTime::now()),
        version: env!("CARGO_PKG_VERSION").into(),
        sources: sources
            .iter()
            .map(|(name, health)| {
                let mut s = SourceStatus::from_metrics(text, name.as_deref());
                s.merge(health);
                s.events_per_sec = rates.get(name.as_deref().unwrap_or_default()).copied();
                s
            })
            .collect(),
    }
}

/// [`document`] as JSON, with the rates of `history`.
pub(crate) fn status_json(
    text: &str,
    sources: &[(Option<String>, SourceHealth)],
    history: &History,
) -> String {
    let rates = sources
        .iter()
        .filter_map(|(n, _)| {
            let key = n.clone().unwrap_or_default();
            history.rate(&key).map(|r| (key, r))
        })
        .collect();
    serde_json::to_string(&document(text, sources, &rates)).unwrap_or_else(|_| "{}".into())
}

/// One reading per source: lag and retained WAL in bytes, events produced.
pub(crate) fn readings(text: &str, names: &[Option<String>], now: f64) -> Vec<(String, Reading)> {
    names
        .iter()
        .map(|n| {
            let s = SourceStatus::from_metrics(text, n.as_deref());
            let r = Reading {
                t: now,
                a: s.lag_bytes.unwrap_or(0.0),
                b: s.retained_wal_bytes.unwrap_or(0.0),
                counter: s.events_produced.unwrap_or(0.0),
            };
            (n.clone().unwrap_or_default(), r)
        })
        .collect()
}

impl outbox_service::http::Readiness for Shared {
    fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>> {
        Shared::readiness(self, passive_ok)
    }
}

impl View for Shared {
    fn status_json(&self, metrics: &str, history: &History) -> String {
        status_json(metrics, &[(None, self.health())], history)
    }

    fn readings(&self, metrics: &str, now: f64) -> Vec<(String, Reading)> {
        readings(metrics, &[None], now)
    }
}

impl SourceStatus {
    /// The source's series of `text`: with `source`, those labelled with it; without, all.
    pub fn from_metrics(text: &str, source: Option<&str>) -> SourceStatus {
        let mut s = SourceStatus {
            name: source.map(str::to_string),
            ..Default::default()
        };
        let mine = |x: &Sample| source.is_none_or(|want| x.label("source") == Some(want));
        let lsn = |v: f64| Lsn(v as u64).to_string();
        for x in samples(text).filter(mine) {
            let v = x.value;
            match x.name {
                m::STREAMING => s.streaming = Some(v > 0.0),
                m::READY => s.ready = Some(v > 0.0),
                m::SLOT_PRESENT => s.slot_present = Some(v > 0.0),
                m::SLOT_CONFIRMED_FLUSH_LSN => s.confirmed_lsn = Some(lsn(v)),
                m::SERVER_WAL_LSN => s.server_lsn = Some(lsn(v)),
                m::SLOT_LAG_BYTES => s.lag_bytes = Some(v),
                m::SLOT_LAG_SECONDS => s.lag_secs = Some(v),
                m::SLOT_RETAINED_WAL_BYTES => s.retained_wal_bytes = Some(v),
                m::MAX_SLOT_WAL_KEEP_SIZE_BYTES if v >= 0.0 => {
                    s.max_slot_wal_keep_size_bytes = Some(v)
                }
                // -1: unlimited or unknown (the gauge's documented sentinel).
                m::SLOT_SAFE_WAL_SIZE_BYTES if v != -1.0 => s.safe_wal_size_bytes = Some(v),
                m::SLOT_WAL_STATUS if v > 0.0 => s.wal_status = x.label("status").map(Into::into),
                m::SLOT_LOSS_FORECAST_SECONDS => s.loss_forecast_secs = Some(v),
                m::EVENTS_PRODUCED => *s.events_produced.get_or_insert(0.0) += v,
                m::INFLIGHT_EVENTS => s.inflight_events = Some(v),
                m::INFLIGHT_TRANSACTIONS => s.inflight_transactions = Some(v),
                m::INFLIGHT_BYTES => s.inflight_bytes = Some(v),
                m::LAST_CONFIRMATION if v > 0.0 => {
                    s.last_confirmation_age_secs = Some((unix(SystemTime::now()) - v).max(0.0))
                }
                m::HEARTBEAT_AGE_SECONDS => s.heartbeat_age_secs = Some(v),
                m::OUTBOX_OLDEST_ROW_AGE => {
                    let o = s.oldest_row_age_secs.get_or_insert(v);
                    *o = o.max(v);
                }
                m::ALERT_LEVEL => {
                    if let Some(alert) = x.label("alert") {
                        s.alerts.push(AlertStatus {
                            alert: alert.into(),
                            level: v,
                            ..Default::default()
                        });
                    }
                }
                _ => {}
            }
        }
        s.state = match s.streaming {
            Some(true) => "streaming",
            _ => "waiting",
        }
        .into();
        s
    }

    /// Adds what the source's health knows: its state, why, and each firing alert's summary and
    /// start.
    fn merge(&mut self, h: &SourceHealth) {
        self.state = h.state.into();
        self.why = h.why.clone();
        self.slot_held_elsewhere = h.state == "passive";
        for a in &h.alerts {
            let level = match a.severity {
                crate::observe::alert::Severity::Critical => 2.0,
                crate::observe::alert::Severity::Warning => 1.0,
            };
            let entry = match self.alerts.iter_mut().find(|x| x.alert == a.kind.as_str()) {
                Some(e) => e,
                None => {
                    self.alerts.push(AlertStatus {
                        alert: a.kind.as_str().into(),
                        ..Default::default()
                    });
                    self.alerts.last_mut().expect("just pushed")
                }
            };
            entry.level = entry.level.max(level);
            entry.summary = Some(a.summary.clone());
            entry.since = Some(rfc3339(a.since));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::alert::{Active, AlertKind, Severity};

    const TEXT: &str = "outbox_relay_streaming{source=\"a\"} 1\n\
        outbox_relay_slot_lag_bytes{source=\"a\"} 2048\n\
        outbox_relay_slot_confirmed_flush_lsn{source=\"a\"} 4294967297\n\
        outbox_relay_slot_wal_status{source=\"a\",status=\"reserved\"} 0\n\
        outbox_relay_slot_wal_status{source=\"a\",status=\"extended\"} 1\n\
        outbox_relay_alert_level{source=\"a\",alert=\"time_lag\"} 2\n\
        outbox_relay_outbox_oldest_row_age_seconds{source=\"a\",table=\"x\"} 3\n\
        outbox_relay_outbox_oldest_row_age_seconds{source=\"a\",table=\"y\"} 7\n\
        outbox_relay_streaming{source=\"b\"} 0\n";

    #[test]
    fn a_source_is_read_from_its_own_series() {
        let a = SourceStatus::from_metrics(TEXT, Some("a"));
        assert_eq!(a.state, "streaming");
        assert_eq!(a.lag_bytes, Some(2048.0));
        assert_eq!(a.confirmed_lsn.as_deref(), Some("1/1"));
        assert_eq!(a.wal_status.as_deref(), Some("extended"));
        assert_eq!(a.oldest_row_age_secs, Some(7.0));
        assert_eq!(
            (a.alerts[0].alert.as_str(), a.alerts[0].level),
            ("time_lag", 2.0)
        );
        let b = SourceStatus::from_metrics(TEXT, Some("b"));
        assert_eq!((b.state.as_str(), b.lag_bytes), ("waiting", None));
    }

    #[test]
    fn the_document_carries_health_and_rates_and_survives_json() {
        let health = SourceHealth {
            state: "stopped",
            why: Some("slot lost".into()),
            alerts: vec![Active {
                kind: AlertKind::TimeLag,
                severity: Severity::Critical,
                summary: "10 min behind".into(),
                action: "",
                since: SystemTime::UNIX_EPOCH,
                state: String::new(),
            }],
        };
        let rates = HashMap::from([("a".to_string(), 12.5)]);
        let d = document(TEXT, &[(Some("a".into()), health)], &rates);
        let s = &d.sources[0];
        assert_eq!(
            (s.state.as_str(), s.why.as_deref()),
            ("stopped", Some("slot lost"))
        );
        assert_eq!(s.events_per_sec, Some(12.5));
        assert_eq!(s.alerts[0].summary.as_deref(), Some("10 min behind"));
        assert_eq!(s.alerts[0].since.as_deref(), Some("1970-01-01T00:00:00Z"));
        let back: RelayStatus = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }
}
