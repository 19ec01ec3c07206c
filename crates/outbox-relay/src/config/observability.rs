//! `[http]`, `[monitor]` and `[heartbeat]`: the HTTP endpoint, the slot monitor's polling and
//! the heartbeat messages that prove end-to-end progress. Alert thresholds and their webhook
//! are in [`super::alerts`].

use super::InvalidOption;
use std::net::SocketAddr;

use serde::Deserialize;

use super::lenient::from_str_or_native;

/// `[http]`: one listener serving `/metrics` (Prometheus text), `/healthz` (the process is
/// alive) and `/readyz` (streaming and no critical alert; 503 otherwise, with the reasons).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Serve the endpoint. Default true.
    #[serde(
        default = "default_http_enabled",
        deserialize_with = "from_str_or_native"
    )]
    pub enabled: bool,
    /// Address and port to listen on. Default `127.0.0.1:9559` (loopback only: set
    /// `0.0.0.0:9559` for a scraper on another host). Port 0 picks a free port (logged as
    /// `http_listening`). If the address is in use the relay keeps relaying, logs
    /// `http_listen_failed` and retries every 10 s.
    #[serde(
        default = "default_http_listen",
        deserialize_with = "from_str_or_native"
    )]
    pub listen: SocketAddr,
}

fn default_http_enabled() -> bool {
    true
}
fn default_http_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9559))
}

/// `[monitor]`: the slot monitor queries `pg_replication_slots`, `pg_stat_replication_slots`
/// and `max_slot_wal_keep_size` on its own connection, so it keeps reporting while the stream
/// or Kafka is down.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// How often to query the slot and evaluate the alerts, in milliseconds. Default 5000;
    /// at least 100.
    #[serde(
        default = "default_monitor_poll_interval_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub poll_interval_ms: u64,
    /// How often to read the outbox tables' health (`pg_stat_user_tables`, size, and the age
    /// of the oldest row where `[[outbox]] created_at_column` is set), in milliseconds; read at
    /// the first poll after this much time. Default 30000.
    #[serde(
        default = "default_outbox_stats_interval_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub outbox_stats_interval_ms: u64,
}

fn default_monitor_poll_interval_ms() -> u64 {
    5_000
}
fn default_outbox_stats_interval_ms() -> u64 {
    30_000
}

impl MonitorConfig {
    pub(super) fn validate(&self) -> Result<(), InvalidOption> {
        if self.poll_interval_ms < 100 {
            return Err(InvalidOption::new(
                "monitor.poll_interval_ms",
                format!(
                    "monitor.poll_interval_ms = {} is too short: use at least 100",
                    self.poll_interval_ms
                ),
            ));
        }
        Ok(())
    }
}

/// `[heartbeat]`: every `interval_ms`, the relay commits `SELECT pg_logical_emit_message(true,
/// <prefix>, <json>)` on its own SQL connection. The message travels through the slot inside
/// BEGIN/COMMIT like any transaction (and is not published), so the slot's confirmed position
/// advances and `outbox_relay_heartbeat_age_seconds` proves end-to-end progress while the
/// outbox is quiet. Skipped on a standby. Logical messages with other prefixes are ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Write heartbeats. Default true (one tiny WAL record per interval).
    #[serde(
        default = "default_heartbeat_enabled",
        deserialize_with = "from_str_or_native"
    )]
    pub enabled: bool,
    /// Milliseconds between heartbeats. Default 10000; at least 100.
    #[serde(
        default = "default_heartbeat_interval_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub interval_ms: u64,
    /// Prefix of the logical messages. Default `outbox-relay.heartbeat`.
    #[serde(default = "default_heartbeat_prefix")]
    pub prefix: String,
}

fn default_heartbeat_enabled() -> bool {
    true
}
fn default_heartbeat_interval_ms() -> u64 {
    10_000
}
fn default_heartbeat_prefix() -> String {
    "outbox-relay.heartbeat".into()
}

impl HeartbeatConfig {
    pub(super) fn validate(&self) -> Result<(), InvalidOption> {
        if self.enabled && self.interval_ms < 100 {
            return Err(InvalidOption::new(
                "heartbeat.interval_ms",
                format!(
                    "heartbeat.interval_ms = {} is too short: use at least 100",
                    self.interval_ms
                ),
            ));
        }
        if self.prefix.is_empty() || self.prefix.len() > 200 {
            return Err(InvalidOption::new(
                "heartbeat.prefix",
                "heartbeat.prefix must be 1-200 characters",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;

    #[test]
    fn defaults_and_typed_environment_overrides() {
        let c = load("", &[]).unwrap();
        assert!(c.http.enabled && c.http.listen.ip().is_loopback());
        assert_eq!(c.http.listen.port(), 9559);
        assert_eq!(c.monitor.poll_interval_ms, 5000);
        assert!(c.heartbeat.enabled && c.heartbeat.prefix == "outbox-relay.heartbeat");
        assert_eq!(c.heartbeat.interval_ms, 10_000);

        let c = load(
            "[http]\nlisten = \"0.0.0.0:9000\"\n",
            &[
                ("OUTBOX_RELAY__HEARTBEAT__ENABLED", "false"),
                ("OUTBOX_RELAY__HEARTBEAT__INTERVAL_MS", "500"),
                ("OUTBOX_RELAY__MONITOR__POLL_INTERVAL_MS", "250"),
                ("OUTBOX_RELAY__HTTP__ENABLED", "false"),
            ],
        )
        .unwrap();
        assert_eq!(c.http.listen.port(), 9000);
        assert!(!c.http.enabled && !c.heartbeat.enabled);
        assert_eq!(c.heartbeat.interval_ms, 500);
        assert_eq!(c.monitor.poll_interval_ms, 250);
    }

    #[test]
    fn a_bad_listen_address_names_http_listen_in_the_file_and_in_the_environment() {
        let e = load("[http]\nlisten = \"not-an-address\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "http.listen = \"not-an-address\": invalid socket address syntax; use \
                        host:port such as 127.0.0.1:9559"
            ),
            "{e}"
        );
        let e = load("", &[("OUTBOX_RELAY__HTTP__LISTEN", "not-an-address")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("http.listen = \"not-an-address\" (from OUTBOX_RELAY__HTTP__LISTEN)"),
            "{e}"
        );
        assert!(e.contains("invalid socket address syntax"), "{e}");
        // A host name is not an address either.
        let e = load("[http]\nlisten = \"localhost:9559\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("http.listen = \"localhost:9559\""), "{e}");
    }

    #[test]
    fn intervals_and_prefix_are_validated_with_the_key_in_the_message() {
        for (toml, needle) in [
            ("[heartbeat]\ninterval_ms = 5\n", "heartbeat.interval_ms"),
            ("[heartbeat]\nprefix = \"\"\n", "heartbeat.prefix"),
            (
                "[monitor]\npoll_interval_ms = 99\n",
                "monitor.poll_interval_ms",
            ),
            (
                "[monitor]\npoll_interval_ms = \"often\"\n",
                "monitor.poll_interval_ms = \"often\"",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err().to_string();
            assert!(e.contains(needle), "{toml:?} -> {e}");
        }
        // A disabled heartbeat's interval is not checked.
        load("[heartbeat]\nenabled = false\ninterval_ms = 5\n", &[]).unwrap();
    }
}
