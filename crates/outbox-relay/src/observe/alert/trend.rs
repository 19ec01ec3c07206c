//! The alerts that need the monitor's history: `slot_forecast` (when the slot is lost at the
//! current rate, [`relay_core::forecast`]) and `stalled` (the stream is up and nothing moves,
//! [`relay_core::stall`]). The monitor measures; these only compare with the thresholds.

use std::time::Duration;

use super::{AlertKind, Finding, Observation, Severity, human_duration, secs_text};
use crate::config::AlertsConfig;

const ACTION_FORECAST: &str = "the slot does not release WAL as fast as the server writes it: \
     check that outbox-relay streams and Kafka accepts writes (/readyz, outbox_relay_streaming, \
     the relay log); buy time with ALTER SYSTEM SET max_slot_wal_keep_size = '<larger>'; \
     SELECT pg_reload_conf() (docs/operations.md#slot-forecast)";
const ACTION_STALLED: &str = "outbox-relay restarts the pipeline from the last confirmed LSN; \
     if the alert returns, check the Kafka brokers and the network to them, and the \
     walsender of the slot in pg_stat_activity (docs/operations.md#stalled)";

/// `~14 min`, `~45 s`, `~2.5 h`: forecasts are rough, so is their text.
pub(crate) fn approx(secs: f64) -> String {
    if secs < 90.0 {
        format!("~{:.0} s", secs.max(0.0))
    } else if secs < 5400.0 {
        format!("~{:.0} min", secs / 60.0)
    } else {
        format!("~{:.1} h", secs / 3600.0)
    }
}

pub(super) fn slot_forecast(cfg: &AlertsConfig, obs: &Observation) -> Finding {
    let kind = AlertKind::SlotForecast;
    let Some(left) = obs.seconds_to_loss.filter(|s| s.is_finite()) else {
        return Finding {
            kind,
            level: None,
            summary: "the slot's headroom does not shrink: no loss forecast".into(),
            action: ACTION_FORECAST,
            state: String::new(),
        };
    };
    let under = |limit: u64| limit > 0 && left <= limit as f64;
    let level = if under(cfg.slot_forecast_critical_secs) {
        Some(Severity::Critical)
    } else if under(cfg.slot_forecast_warning_secs) {
        Some(Severity::Warning)
    } else {
        None
    };
    let what = if obs.forecast_to_threshold {
        "the slot's retained WAL reaches alerts.retained_wal_critical_bytes"
    } else if obs.forecast_estimated {
        "the slot is invalidated (the server shows no safe_wal_size: the headroom is \
         max_slot_wal_keep_size minus the retained WAL)"
    } else {
        "the slot is invalidated"
    };
    Finding {
        kind,
        level,
        summary: format!(
            "at the current WAL rate {what} in {} (warning under {}, critical under {})",
            approx(left),
            secs_text(cfg.slot_forecast_warning_secs),
            secs_text(cfg.slot_forecast_critical_secs)
        ),
        action: ACTION_FORECAST,
        state: String::new(),
    }
}

pub(super) fn stalled(cfg: &AlertsConfig, obs: &Observation) -> Finding {
    let kind = AlertKind::Stalled;
    let level = obs
        .stalled_for
        .filter(|d| cfg.stalled_secs > 0 && *d >= Duration::from_secs(cfg.stalled_secs))
        .map(|_| Severity::Warning);
    let summary = match obs.stalled_for {
        Some(d) if level.is_some() => format!(
            "the replication stream is open and the server writes WAL, but for {} nothing was \
             received, acknowledged by Kafka or confirmed (limit {})",
            human_duration(d),
            secs_text(cfg.stalled_secs)
        ),
        _ => "the pipeline moves (or the stream is closed, or no WAL is written)".into(),
    };
    Finding {
        kind,
        level,
        summary,
        action: ACTION_STALLED,
        state: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> AlertsConfig {
        AlertsConfig {
            slot_forecast_warning_secs: 3600,
            slot_forecast_critical_secs: 900,
            stalled_secs: 60,
            ..AlertsConfig::default()
        }
    }

    #[test]
    fn forecast_levels_and_message() {
        let at = |s: Option<f64>, to_threshold| {
            slot_forecast(
                &cfg(),
                &Observation {
                    seconds_to_loss: s,
                    forecast_to_threshold: to_threshold,
                    ..Observation::default()
                },
            )
        };
        assert_eq!(at(None, false).level, None);
        assert_eq!(at(Some(f64::INFINITY), false).level, None);
        assert_eq!(at(Some(3601.0), false).level, None);
        assert_eq!(at(Some(3600.0), false).level, Some(Severity::Warning));
        let f = at(Some(840.0), false);
        assert_eq!(f.level, Some(Severity::Critical));
        assert!(
            f.summary
                .starts_with("at the current WAL rate the slot is invalidated in ~14 min"),
            "{}",
            f.summary
        );
        let f = at(Some(30.0), true);
        assert!(
            f.summary
                .contains("reaches alerts.retained_wal_critical_bytes in ~30 s")
        );
        let off = AlertsConfig {
            slot_forecast_warning_secs: 0,
            slot_forecast_critical_secs: 0,
            ..cfg()
        };
        let o = Observation {
            seconds_to_loss: Some(0.0),
            ..Observation::default()
        };
        assert_eq!(slot_forecast(&off, &o).level, None, "0 = off");
    }

    #[test]
    fn stalled_fires_at_the_limit_only() {
        let at = |d: Option<u64>| {
            stalled(
                &cfg(),
                &Observation {
                    stalled_for: d.map(Duration::from_secs),
                    ..Observation::default()
                },
            )
        };
        assert_eq!(at(None).level, None);
        assert_eq!(at(Some(59)).level, None);
        let f = at(Some(60));
        assert_eq!(f.level, Some(Severity::Warning));
        assert!(
            f.summary.contains("for 1m 0s nothing was received"),
            "{}",
            f.summary
        );
        assert_eq!(approx(5400.0), "~1.5 h");
    }
}
