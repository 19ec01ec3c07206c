//! `[alerts]` and `[alerts.webhook]`: thresholds of the built-in slot alerts and where their
//! notifications are sent.

use super::InvalidOption;
use std::time::Duration;

use serde::Deserialize;

use super::{
    lenient::{from_str_or_native, option_from_str_or_native},
    secret::Secret,
};

/// `[alerts]`: thresholds of the built-in alerts. Each alert is ok, warning or critical; a
/// change is logged once (`alert_firing` / `alert_resolved`), shown in
/// `outbox_relay_alert_level`, fails `/readyz` when critical, and is sent to the webhook.
/// A threshold of 0 is off. See docs/operations.md for what each alert means.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// `retained_wal` warning: WAL kept by the slot (`pg_current_wal_lsn() - restart_lsn`)
    /// reaches this many bytes. Default 1073741824 (1 GiB).
    #[serde(
        default = "default_retained_wal_warning_bytes",
        deserialize_with = "from_str_or_native"
    )]
    pub retained_wal_warning_bytes: u64,
    /// `retained_wal` critical, in bytes. Default 10737418240 (10 GiB).
    #[serde(
        default = "default_retained_wal_critical_bytes",
        deserialize_with = "from_str_or_native"
    )]
    pub retained_wal_critical_bytes: u64,
    /// `retained_wal` warning as a fraction (0..1) of the server's `max_slot_wal_keep_size`;
    /// applies only when that is set (not -1). Default 0.5.
    #[serde(
        default = "default_retained_wal_warning_ratio",
        deserialize_with = "from_str_or_native"
    )]
    pub retained_wal_warning_ratio: f64,
    /// `retained_wal` critical as a fraction of `max_slot_wal_keep_size`. Default 0.8.
    #[serde(
        default = "default_retained_wal_critical_ratio",
        deserialize_with = "from_str_or_native"
    )]
    pub retained_wal_critical_ratio: f64,
    /// `time_lag` warning: the oldest WAL the slot has not confirmed is this many seconds
    /// old. Default 300.
    #[serde(
        default = "default_time_lag_warning_secs",
        deserialize_with = "from_str_or_native"
    )]
    pub time_lag_warning_secs: u64,
    /// `time_lag` critical, in seconds. Default 1800.
    #[serde(
        default = "default_time_lag_critical_secs",
        deserialize_with = "from_str_or_native"
    )]
    pub time_lag_critical_secs: u64,
    /// Level of the `wal_status` alert when `wal_status = extended` (the slot keeps WAL
    /// beyond `max_wal_size`): `off`, `warning` or `critical`. Default `warning`.
    /// `unreserved` and `lost` are always critical; `lost` also stops the relay.
    #[serde(default)]
    pub wal_status_extended: ExtendedLevel,
    /// `slot_forecast` warning: at the rate the slot's headroom shrinks (the WAL it does not
    /// release), it is lost in at most this many seconds. The headroom is PostgreSQL's
    /// `safe_wal_size`; when `max_slot_wal_keep_size` is unlimited, the WAL left until
    /// `retained_wal_critical_bytes`. Default 3600.
    #[serde(
        default = "default_slot_forecast_warning_secs",
        deserialize_with = "from_str_or_native"
    )]
    pub slot_forecast_warning_secs: u64,
    /// `slot_forecast` critical, in seconds. Default 900.
    #[serde(
        default = "default_slot_forecast_critical_secs",
        deserialize_with = "from_str_or_native"
    )]
    pub slot_forecast_critical_secs: u64,
    /// The rate of the forecast is measured over this many seconds of monitor polls
    /// (least-squares slope); no forecast until the polls span the whole window. Default 300.
    #[serde(
        default = "default_slot_forecast_window_secs",
        deserialize_with = "from_str_or_native"
    )]
    pub slot_forecast_window_secs: u64,
    /// `stalled`: the replication stream is open and the server writes WAL, but for this many
    /// seconds the relay received nothing, Kafka acknowledged nothing and the slot confirmed
    /// nothing (a large transaction still being decoded or sent is not a stall). The alert
    /// fires and the pipeline is restarted from the last confirmed LSN. Default 300; 0 = off.
    /// Keep it above `relay.status_interval_ms` and below `relay.backpressure_release_ms`
    /// if the latter should never be reached first.
    #[serde(
        default = "default_stalled_secs",
        deserialize_with = "from_str_or_native"
    )]
    pub stalled_secs: u64,
    /// `outbox_dead_tuples` warning: an outbox table (all partitions together) holds this many
    /// dead tuples (`pg_stat_user_tables.n_dead_tup`) that vacuum has not removed yet.
    /// Default 1000000.
    #[serde(
        default = "default_outbox_dead_tuples_warning",
        deserialize_with = "from_str_or_native"
    )]
    pub outbox_dead_tuples_warning: u64,
    /// `outbox_dead_tuples` critical. Default 10000000.
    #[serde(
        default = "default_outbox_dead_tuples_critical",
        deserialize_with = "from_str_or_native"
    )]
    pub outbox_dead_tuples_critical: u64,
    /// Where to send notifications (`[alerts.webhook]`). Off unless `url` is set.
    #[serde(default)]
    pub webhook: WebhookConfig,
}

fn default_retained_wal_warning_bytes() -> u64 {
    1 << 30
}
fn default_retained_wal_critical_bytes() -> u64 {
    10 << 30
}
fn default_retained_wal_warning_ratio() -> f64 {
    0.5
}
fn default_retained_wal_critical_ratio() -> f64 {
    0.8
}
fn default_time_lag_warning_secs() -> u64 {
    300
}
fn default_time_lag_critical_secs() -> u64 {
    1800
}
fn default_slot_forecast_warning_secs() -> u64 {
    3600
}
fn default_slot_forecast_critical_secs() -> u64 {
    900
}
fn default_slot_forecast_window_secs() -> u64 {
    300
}
fn default_stalled_secs() -> u64 {
    300
}
fn default_outbox_dead_tuples_warning() -> u64 {
    1_000_000
}
fn default_outbox_dead_tuples_critical() -> u64 {
    10_000_000
}

/// See [`AlertsConfig::wal_status_extended`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExtendedLevel {
    Off,
    #[default]
    Warning,
    Critical,
}

/// `[alerts.webhook]`: an HTTP POST on every change of an alert's level, repeated while it
/// fires. Plain HTTP only (no TLS yet): point it at Alertmanager, or at a local forwarder for
/// HTTPS endpoints such as Slack.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `http://host[:port]/path`. Unset (default): no notifications. Treated as a secret
    /// (Slack-style URLs embed a token): logs show only the host and port.
    #[serde(default)]
    pub url: Option<Secret>,
    /// Body: `json` (default; one plain JSON object per notification), `alertmanager` (a JSON
    /// array for Alertmanager's `POST /api/v2/alerts`), or `slack` (`{"text": ...}`, Slack and
    /// Mattermost incoming webhooks).
    #[serde(default)]
    pub format: WebhookFormat,
    /// Re-send a firing alert this often, in seconds. Default 60 for `alertmanager` (keep it
    /// below Alertmanager's `resolve_timeout`, 5 min by default), 14400 (4 h) otherwise.
    /// 0 = never repeat.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub repeat_interval_secs: Option<u64>,
    /// Timeout of one POST, in milliseconds. Failed POSTs are retried twice. Default 5000.
    #[serde(
        default = "default_webhook_timeout_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub timeout_ms: u64,
    /// Value of the `Authorization` header (e.g. `Bearer <token>`). Default none. Secret.
    #[serde(default)]
    pub authorization: Option<Secret>,
}

fn default_webhook_timeout_ms() -> u64 {
    5_000
}

/// See [`WebhookConfig::format`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    #[default]
    Json,
    Alertmanager,
    Slack,
}

impl WebhookConfig {
    /// The repeat interval, with the default of the format; `None` = never repeat.
    pub fn repeat_interval(&self) -> Option<Duration> {
        let secs = self.repeat_interval_secs.unwrap_or(match self.format {
            WebhookFormat::Alertmanager => 60,
            _ => 4 * 3600,
        });
        (secs > 0).then(|| Duration::from_secs(secs))
    }
}

impl AlertsConfig {
    pub(super) fn validate(&self) -> Result<(), InvalidOption> {
        for (key, v) in [
            (
                "retained_wal_warning_ratio",
                self.retained_wal_warning_ratio,
            ),
            (
                "retained_wal_critical_ratio",
                self.retained_wal_critical_ratio,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(InvalidOption::new(
                    format!("alerts.{key}"),
                    format!(
                        "alerts.{key} = {v}: use a fraction of max_slot_wal_keep_size between 0 \
                     (off) and 1"
                    ),
                ));
            }
        }
        for (what, warning, critical) in [
            (
                "retained_wal_*_bytes",
                self.retained_wal_warning_bytes as f64,
                self.retained_wal_critical_bytes as f64,
            ),
            (
                "retained_wal_*_ratio",
                self.retained_wal_warning_ratio,
                self.retained_wal_critical_ratio,
            ),
            (
                "time_lag_*_secs",
                self.time_lag_warning_secs as f64,
                self.time_lag_critical_secs as f64,
            ),
            (
                "outbox_dead_tuples_*",
                self.outbox_dead_tuples_warning as f64,
                self.outbox_dead_tuples_critical as f64,
            ),
        ] {
            if warning > 0.0 && critical > 0.0 && warning > critical {
                return Err(InvalidOption::new(
                    format!("alerts.{what}"),
                    format!(
                        "alerts.{what}: the warning threshold ({warning}) is above the critical one \
                     ({critical})"
                    ),
                ));
            }
        }
        // A forecast fires when the time left falls *below* the threshold: warning >= critical.
        if self.slot_forecast_warning_secs > 0
            && self.slot_forecast_critical_secs > self.slot_forecast_warning_secs
        {
            return Err(InvalidOption::new(
                "alerts.slot_forecast_critical_secs",
                format!(
                    "alerts.slot_forecast_*_secs: the critical threshold ({}) is above the warning \
                 one ({}); the forecast warns first, when more time is left",
                    self.slot_forecast_critical_secs, self.slot_forecast_warning_secs
                ),
            ));
        }
        if self.slot_forecast_window_secs == 0 {
            return Err(InvalidOption::new(
                "alerts.slot_forecast_window_secs",
                "alerts.slot_forecast_window_secs = 0: the WAL rate needs a window of \
                 at least one second (default 300)",
            ));
        }
        if let Some(url) = &self.webhook.url
            && let Err(e) = crate::telemetry::http_client::Target::parse(url.expose())
        {
            return Err(InvalidOption::new(
                "alerts.webhook.url",
                format!("alerts.webhook.url: {e}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;
    use super::*;

    #[test]
    fn defaults_and_typed_overrides() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.alerts.retained_wal_warning_bytes, 1 << 30);
        assert_eq!(c.alerts.retained_wal_critical_ratio, 0.8);
        assert_eq!(c.alerts.wal_status_extended, ExtendedLevel::Warning);
        assert!(c.alerts.webhook.url.is_none());
        assert_eq!(
            c.alerts.webhook.repeat_interval(),
            Some(Duration::from_secs(4 * 3600))
        );

        let c = load(
            "[alerts]\nretained_wal_warning_ratio = 0.25\n\
             time_lag_warning_secs = 1\n[alerts.webhook]\nurl = \"http://am:9093/api/v2/alerts\"\n\
             format = \"alertmanager\"\n",
            &[
                ("OUTBOX_RELAY__ALERTS__RETAINED_WAL_CRITICAL_RATIO", "0.5"),
                ("OUTBOX_RELAY__ALERTS__WAL_STATUS_EXTENDED", "critical"),
                ("OUTBOX_RELAY__ALERTS__WEBHOOK__REPEAT_INTERVAL_SECS", "0"),
            ],
        )
        .unwrap();
        assert_eq!(c.alerts.retained_wal_warning_ratio, 0.25);
        assert_eq!(c.alerts.retained_wal_critical_ratio, 0.5);
        assert_eq!(c.alerts.time_lag_warning_secs, 1);
        assert_eq!(c.alerts.wal_status_extended, ExtendedLevel::Critical);
        assert_eq!(c.alerts.webhook.format, WebhookFormat::Alertmanager);
        assert_eq!(c.alerts.webhook.repeat_interval(), None);
        let c = load("[alerts.webhook]\nformat = \"alertmanager\"\n", &[]).unwrap();
        assert_eq!(
            c.alerts.webhook.repeat_interval(),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn options_are_validated_with_the_key_in_the_message() {
        for (toml, needle) in [
            (
                "[alerts]\nretained_wal_warning_ratio = 1.5\n",
                "alerts.retained_wal_warning_ratio",
            ),
            (
                "[alerts]\ntime_lag_warning_secs = 90\ntime_lag_critical_secs = 60\n",
                "alerts.time_lag_*_secs",
            ),
            (
                "[alerts.webhook]\nurl = \"https://hooks.slack.com/x\"\n",
                "alerts.webhook.url",
            ),
            (
                "[alerts.webhook]\nurl = \"not a url\"\n",
                "alerts.webhook.url",
            ),
            (
                "[alerts.webhook]\nformat = \"teams\"\n",
                "alerts.webhook.format = \"teams\"",
            ),
            (
                "[alerts.webhook]\nsecret = \"x\"\n",
                "alerts.webhook.secret",
            ),
            (
                "[alerts]\nslot_forecast_warning_secs = 60\nslot_forecast_critical_secs = 90\n",
                "alerts.slot_forecast_*_secs",
            ),
            (
                "[alerts]\nslot_forecast_window_secs = 0\n",
                "alerts.slot_forecast_window_secs",
            ),
            (
                "[alerts]\nwal_status_extended = \"loud\"\n",
                "alerts.wal_status_extended = \"loud\"",
            ),
            (
                "[alerts]\nretained_wal_warning_ratio = \"half\"\n",
                "alerts.retained_wal_warning_ratio = \"half\"",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err().to_string();
            assert!(e.contains(needle), "{toml:?} -> {e}");
        }
    }

    #[test]
    fn webhook_url_and_authorization_are_secrets() {
        let c = load(
            "[alerts.webhook]\nurl = \"http://h:1/T0KEN\"\nauthorization = \"Bearer s3cr3t\"\n",
            &[],
        )
        .unwrap();
        let dump = format!("{c:?}");
        assert!(
            !dump.contains("T0KEN") && !dump.contains("s3cr3t"),
            "{dump}"
        );
        // Nor in the error of a bad URL.
        let e = load("[alerts.webhook]\nurl = \"https://h/T0KEN\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(!e.contains("T0KEN"), "{e}");
    }
}
