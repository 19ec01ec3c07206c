//! The alerts on the slot's state in one reading: `retained_wal`, `time_lag`, `wal_status`.

use super::{AlertKind, Finding, Observation, Severity, human_bytes, human_duration, secs_text};
use crate::{
    config::{AlertsConfig, ExtendedLevel},
    postgres::slot::WalStatus,
};

const ACTION_RETAINED_WAL: &str = "make sure outbox-relay is streaming (/readyz, \
     outbox_relay_streaming) and Kafka accepts writes; until it catches up keep enough free \
     space for pg_wal, or raise max_slot_wal_keep_size (docs/operations.md#retained-wal)";
const ACTION_TIME_LAG: &str = "check the relay log for pipeline_restart and Kafka errors and the \
     health of the Kafka cluster; events are delayed, not lost (docs/operations.md#time-lag)";
const ACTION_EXTENDED: &str = "the slot holds WAL beyond max_wal_size; restore the relay's \
     throughput before PostgreSQL marks it unreserved (docs/operations.md#wal-status)";
const ACTION_UNRESERVED: &str = "PostgreSQL removes WAL this slot still needs at the next \
     checkpoint and then invalidates it: restore streaming now, or buy time with ALTER SYSTEM \
     SET max_slot_wal_keep_size = '<larger>'; SELECT pg_reload_conf() \
     (docs/operations.md#wal-status)";
const ACTION_LOST: &str = "the slot is unusable: outbox-relay stops and will not re-create it; \
     run `outbox-relay setup --recreate-slot --heal`, which re-publishes the gap from the outbox table \
     (docs/operations.md#slot-lost)";

pub(super) fn retained_wal(cfg: &AlertsConfig, obs: &Observation) -> Finding {
    let kind = AlertKind::RetainedWal;
    let Some(retained) = obs.retained_wal_bytes else {
        return Finding {
            kind,
            level: None,
            summary: "retained WAL unknown (slot missing or lost)".into(),
            action: ACTION_RETAINED_WAL,
            state: String::new(),
        };
    };
    let by_bytes = |limit: u64| limit > 0 && retained >= limit;
    let ratio = obs
        .max_slot_wal_keep_size
        .filter(|m| *m > 0)
        .map(|max| retained as f64 / max as f64);
    let by_ratio = |limit: f64| limit > 0.0 && ratio.is_some_and(|r| r >= limit);
    let level = if by_bytes(cfg.retained_wal_critical_bytes)
        || by_ratio(cfg.retained_wal_critical_ratio)
    {
        Some(Severity::Critical)
    } else if by_bytes(cfg.retained_wal_warning_bytes) || by_ratio(cfg.retained_wal_warning_ratio) {
        Some(Severity::Warning)
    } else {
        None
    };
    let of_max = match (ratio, obs.max_slot_wal_keep_size) {
        (Some(r), Some(max)) => format!(
            ", {:.0}% of max_slot_wal_keep_size {}",
            r * 100.0,
            human_bytes(max)
        ),
        _ => ", max_slot_wal_keep_size unlimited".into(),
    };
    let limits = format!(
        "warning at {}, critical at {}",
        limit_text(
            cfg.retained_wal_warning_bytes,
            cfg.retained_wal_warning_ratio
        ),
        limit_text(
            cfg.retained_wal_critical_bytes,
            cfg.retained_wal_critical_ratio
        )
    );
    Finding {
        kind,
        level,
        summary: format!(
            "the slot retains {} of WAL{of_max} ({limits})",
            human_bytes(retained)
        ),
        action: ACTION_RETAINED_WAL,
        state: String::new(),
    }
}

fn limit_text(bytes: u64, ratio: f64) -> String {
    match (bytes > 0, ratio > 0.0) {
        (true, true) => format!("{} or {:.0}%", human_bytes(bytes), ratio * 100.0),
        (true, false) => human_bytes(bytes),
        (false, true) => format!("{:.0}%", ratio * 100.0),
        (false, false) => "off".into(),
    }
}

pub(super) fn time_lag(cfg: &AlertsConfig, obs: &Observation) -> Finding {
    let kind = AlertKind::TimeLag;
    let Some(lag) = obs.time_lag else {
        return Finding {
            kind,
            level: None,
            summary: "time lag unknown".into(),
            action: ACTION_TIME_LAG,
            state: String::new(),
        };
    };
    let secs = lag.as_secs_f64();
    let over = |limit: u64| limit > 0 && secs >= limit as f64;
    let level = if over(cfg.time_lag_critical_secs) {
        Some(Severity::Critical)
    } else if over(cfg.time_lag_warning_secs) {
        Some(Severity::Warning)
    } else {
        None
    };
    Finding {
        kind,
        level,
        summary: format!(
            "the oldest unconfirmed WAL is {} old (warning at {}, critical at {})",
            human_duration(lag),
            secs_text(cfg.time_lag_warning_secs),
            secs_text(cfg.time_lag_critical_secs)
        ),
        action: ACTION_TIME_LAG,
        state: String::new(),
    }
}

pub(super) fn wal_status(cfg: &AlertsConfig, obs: &Observation) -> Finding {
    let kind = AlertKind::WalStatus;
    let (level, action) = match &obs.wal_status {
        Some(WalStatus::Extended) => (
            match cfg.wal_status_extended {
                ExtendedLevel::Off => None,
                ExtendedLevel::Warning => Some(Severity::Warning),
                ExtendedLevel::Critical => Some(Severity::Critical),
            },
            ACTION_EXTENDED,
        ),
        Some(WalStatus::Unreserved) => (Some(Severity::Critical), ACTION_UNRESERVED),
        Some(WalStatus::Lost) => (Some(Severity::Critical), ACTION_LOST),
        Some(WalStatus::Reserved) | Some(WalStatus::Other(_)) | None => (None, ACTION_EXTENDED),
    };
    let summary = match &obs.wal_status {
        Some(WalStatus::Lost) => {
            let why = obs
                .invalidation
                .clone()
                .unwrap_or(relay_core::invalidation::Invalidation::WalRemoved);
            format!(
                "the slot was invalidated (wal_status = lost, reason {why}): {}, so events \
                 committed after {} may never reach Kafka; {}",
                why.what_happened(),
                obs.confirmed_flush
                    .map_or("its confirmed_flush_lsn".to_string(), |l| l.to_string()),
                why.prevention()
            )
        }
        Some(s) => format!("wal_status = {s}"),
        None => "wal_status unknown (slot missing)".into(),
    };
    Finding {
        kind,
        level,
        summary,
        action,
        state: obs
            .wal_status
            .as_ref()
            .map_or(String::new(), |s| s.to_string()),
    }
}
