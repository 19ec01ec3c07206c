//! Configuration: one TOML file, every key overridable from the environment.
//!
//! `OUTBOX_RELAY__<SECTION>__<KEY>=value` sets `[section] key = value` (for example
//! `OUTBOX_RELAY__POSTGRES__PASSWORD`). Unknown keys, in the file or the environment, are
//! rejected. Every error names the option (`http.listen = "x": ...`), and the environment
//! variable when the value came from one. Secrets (`postgres.password`,
//! `kafka.sasl_password`, every `kafka.properties` value, the webhook URL and authorization)
//! are never printed: [`Secret`] redacts itself in `Debug`.
//!
//! One file per section; each option is documented on its field there and in
//! `docs/configuration.md`. This file holds [`Config`], loading and the checks that span
//! sections.

mod alerts;
mod kafka;
mod kafka_security;
mod load;
mod observability;
mod postgres;
mod relay;
mod sources;

use std::time::Duration;

use relay_core::route::{MessageRoute, OutboxTable};
use serde::Deserialize;

pub use alerts::{AlertsConfig, ExtendedLevel, WebhookConfig, WebhookFormat};
pub use kafka::KafkaConfig;
pub use kafka_security::{KafkaSecurityProtocol, SaslMechanism};
pub use observability::{HeartbeatConfig, HttpConfig, MonitorConfig};
pub use outbox_service::config::{ConfigError, InvalidOption, Secret};
pub(crate) use outbox_service::postgres::valid_identifier;
pub use outbox_service::postgres::{PgConnection, PgSslMode};
pub use postgres::PostgresConfig;
// The shared loader's modules, under the names the sections' files use.
use outbox_service::config::{lenient, secret};
pub use relay::{Delivery, PoisonPolicy, RelayConfig};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to read the replication stream from.
    #[serde(default)]
    pub postgres: PostgresConfig,
    /// Where to produce.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// One entry per outbox table (`[[outbox]]`). Default: Debezium's `public.outbox` layout,
    /// unless the file has `[[message]]` sections and no `outbox` key: then no table.
    #[serde(default = "default_outbox")]
    pub outbox: Vec<OutboxTable>,
    /// One entry per logical-message prefix published like outbox rows (`[[message]]`): a
    /// table-less outbox (`pg_logical_emit_message(true, prefix, json)`). Default: none.
    #[serde(default)]
    pub message: Vec<MessageRoute>,
    /// Pipeline limits and behaviour.
    #[serde(default)]
    pub relay: RelayConfig,
    /// The HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub http: HttpConfig,
    /// The slot monitor (its own SQL connection).
    #[serde(default)]
    pub monitor: MonitorConfig,
    /// Built-in slot-lag alerts and their webhook notifications.
    #[serde(default)]
    pub alerts: AlertsConfig,
    /// Periodic heartbeat messages, so confirmations advance while the outbox is quiet.
    #[serde(default)]
    pub heartbeat: HeartbeatConfig,
    /// The `[source.<name>]` tables, each loaded as a config of its own over the top-level
    /// sections (docs/configuration.md, "Several databases"). Empty: the file describes one
    /// database, the top level itself.
    #[serde(skip)]
    pub sources: Vec<Config>,
    /// This config's source name, when it is one of [`sources`](Self::sources).
    #[serde(skip)]
    pub source: Option<String>,
    /// A source's settings as loaded (file and environment), hashed: a reload restarts the
    /// sources whose fingerprint changed.
    #[serde(skip)]
    pub(crate) fingerprint: u64,
}

fn default_outbox() -> Vec<OutboxTable> {
    vec![OutboxTable::default()]
}

/// A section's `Default` is what an empty section deserializes to, so the defaults are written
/// once, in the `default = "..."` functions beside each struct.
macro_rules! default_from_serde {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                toml::from_str("").expect("every field has a default")
            }
        }
    )*};
}
default_from_serde!(
    PostgresConfig,
    KafkaConfig,
    RelayConfig,
    HttpConfig,
    MonitorConfig,
    AlertsConfig,
    WebhookConfig,
    HeartbeatConfig
);

impl Config {
    /// Loads `path` (if given), applies `OUTBOX_RELAY__*` variables from `env`, validates.
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let cfg = load::from_file_and_environment(path, env)?;
        cfg.validate().map_err(ConfigError::Invalid)?;
        Ok(cfg)
    }

    /// The checks a deserializer cannot make; each message names the option.
    fn validate(&self) -> Result<(), InvalidOption> {
        self.postgres.validate()?;
        if self.outbox.is_empty() && self.message.is_empty() {
            return Err(InvalidOption::new(
                "outbox",
                "outbox: at least one [[outbox]] table or [[message]] prefix is required",
            ));
        }
        let mut prefixes = std::collections::HashSet::new();
        for (i, m) in self.message.iter().enumerate() {
            m.validate().map_err(|e| {
                InvalidOption::new(
                    format!("message[{i}]"),
                    format!("message[{i}]: {}", e.to_string().replace("outbox ", "")),
                )
            })?;
            if !prefixes.insert(m.prefix.as_str()) {
                return Err(InvalidOption::new(
                    format!("message[{i}].prefix"),
                    format!(
                        "message[{i}].prefix = {:?}: the prefix is configured twice",
                        m.prefix
                    ),
                ));
            }
            if m.prefix == self.heartbeat.prefix {
                return Err(InvalidOption::new(
                    format!("message[{i}].prefix"),
                    format!(
                        "message[{i}].prefix = {:?} is heartbeat.prefix: heartbeats are never \
                     published; choose another prefix for one of them",
                        m.prefix
                    ),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (i, t) in self.outbox.iter().enumerate() {
            t.validate().map_err(|e| {
                InvalidOption::new(format!("outbox[{i}]"), format!("outbox[{i}]: {e}"))
            })?;
            if !seen.insert(t.qualified_name()) {
                return Err(InvalidOption::new(
                    format!("outbox[{i}].table"),
                    format!(
                        "outbox[{i}].table = {:?}: the table is configured twice",
                        t.table
                    ),
                ));
            }
        }
        self.kafka.validate()?;
        self.relay.validate()?;
        if self.relay.delivery == Delivery::ExactlyOnce && self.kafka.transactional_id.is_none() {
            return Err(InvalidOption::new(
                "relay.delivery",
                "relay.delivery = \"exactly-once\" requires kafka.transactional_id (the id \
                 shared by the instances of this slot, e.g. \"outbox-relay-<slot>\"): exactly-once \
                 needs Kafka transactions",
            ));
        }
        self.alerts.validate()?;
        self.monitor.validate()?;
        self.heartbeat.validate()?;
        sources::validate(&self.sources)
    }

    /// The configs of the databases this process relays: the sources, or the config itself
    /// when it has none.
    pub fn streams(&self) -> Vec<&Config> {
        if self.sources.is_empty() {
            vec![self]
        } else {
            self.sources.iter().collect()
        }
    }

    /// The PostgreSQL password, from `postgres.password_file` or `postgres.password`.
    pub fn postgres_password(&self) -> Result<Option<Secret>, ConfigError> {
        self.postgres.password()
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.relay.shutdown_timeout_ms)
    }
}

#[cfg(test)]
mod docs;

#[cfg(test)]
pub(crate) mod test_support {
    use super::{Config, ConfigError};

    /// Loads `toml` from a file (removed after), with `env` as the environment.
    pub(crate) fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("relay.toml");
        std::fs::write(&p, toml).unwrap();
        Config::load(
            Some(&p),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::load;
    use super::*;

    /// A refused value is a typed error naming its option, not only a sentence mentioning it.
    #[test]
    fn validation_errors_name_the_option() {
        let outbox = "[[outbox]]\ntable = \"public.outbox\"\n";
        for (toml, option) in [
            (
                "[relay]\nmax_in_flight_bytes = 0\n",
                "relay.max_in_flight_bytes",
            ),
            (
                "[relay]\nmax_in_flight_records = 0\n",
                "relay.max_in_flight_records",
            ),
            (
                "[kafka]\ntransaction_producers = 3\n",
                "kafka.transaction_producers",
            ),
            (
                "[kafka]\nproperties = { acks = \"1\" }\n",
                r#"kafka.properties."acks""#,
            ),
            ("[postgres]\nslot = \"Bad-Name\"\n", "postgres.slot"),
            (
                "[monitor]\npoll_interval_ms = 5\n",
                "monitor.poll_interval_ms",
            ),
            ("[relay]\ndelivery = \"exactly-once\"\n", "relay.delivery"),
            ("[[outbox]]\ntable = \"public.outbox\"\n", "outbox[1].table"),
        ] {
            match load(&format!("{outbox}{toml}"), &[]) {
                Err(ConfigError::Invalid(e)) => {
                    assert_eq!(e.option, option, "{toml:?}: {e}");
                    assert!(e.to_string().contains(option), "{toml:?}: {e}");
                }
                other => panic!("{toml:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn empty_file_gives_debezium_compatible_defaults() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.outbox, vec![OutboxTable::default()]);
        assert_eq!(c.postgres.port, 5432);
        assert_eq!(c.kafka.message_timeout_ms, 0);
        assert!(!c.postgres.create_slot);
        assert_eq!(c.shutdown_timeout(), Duration::from_secs(30));
    }

    #[test]
    fn no_file_is_the_same_as_an_empty_one() {
        let c = Config::load(None, []).unwrap();
        assert_eq!(c.outbox, vec![OutboxTable::default()]);
        let e = Config::load(Some(std::path::Path::new("/nonexistent/relay.toml")), [])
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/relay.toml"), "{e}");
    }

    #[test]
    fn outbox_tables_are_checked_and_named_by_position() {
        let two = "[[outbox]]\ntable = \"public.a\"\n[[outbox]]\ntable = \"public.a\"\n";
        let e = load(two, &[]).unwrap_err().to_string();
        assert!(
            e.contains("outbox[1].table = \"public.a\"") && e.contains("twice"),
            "{e}"
        );
        let e = load(
            "[[outbox]]\n[[outbox]]\ntable = \"public.b\"\nkey_column = \"\"\n",
            &[],
        );
        let e = e.unwrap_err().to_string();
        assert!(e.contains("outbox[1]: outbox key_column is empty"), "{e}");
        let e = load("[[outbox]]\ntable = \"public.a.b\"\n", &[]).unwrap_err();
        assert!(
            e.to_string().contains("outbox[0]: outbox table name"),
            "{e}"
        );
        let e = load("outbox = []\n", &[]).unwrap_err();
        assert!(e.to_string().contains("at least one [[outbox]]"), "{e}");
    }

    #[test]
    fn debezium_topic_routing_is_read_from_toml_and_checked_at_load() {
        let section = |extra: &str, regex: &str| {
            format!(
                "[[outbox]]\n{extra}[outbox.debezium]\n\"route.by.field\" = \"kind\"\n\
                 \"route.topic.regex\" = '{regex}'\n\"route.topic.replacement\" = 'e.${{k}}'\n"
            )
        };
        let c = load(&section("", r"(?<k>\w+)\.v1"), &[]).unwrap();
        let d = c.outbox[0].debezium.as_ref().unwrap();
        assert_eq!(d.route_topic_regex.as_deref(), Some(r"(?<k>\w+)\.v1"));
        let e = load(&section("topic = \"t\"\n", "(?<k>.*)"), &[]);
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("outbox[0]: outbox topic = \"t\"") && e.contains("both"),
            "{e}"
        );
        let e = load(&section("", "(?<k>.*)(?=x)"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("outbox[0]: debezium.\"route.topic.regex\"") && e.contains("lookahead"),
            "{e}"
        );
        let e = load(&section("", "(?<j>.*)"), &[]).unwrap_err().to_string();
        assert!(e.contains("no group named \"k\""), "{e}");
    }

    #[test]
    fn message_sections_alone_need_no_outbox_table() {
        let c = load("[[message]]\nprefix = \"outbox\"\n", &[]).unwrap();
        assert!(c.outbox.is_empty());
        assert_eq!(c.message[0].prefix, "outbox");
        assert_eq!(c.message[0].topic, "outbox.event.{aggregatetype}");
        // Both, when the file says both.
        let c = load("[[outbox]]\n[[message]]\nprefix = \"m\"\n", &[]).unwrap();
        assert_eq!((c.outbox.len(), c.message.len()), (1, 1));
        let c = load("outbox = []\n[[message]]\nprefix = \"m\"\n", &[]).unwrap();
        assert!(c.outbox.is_empty());
    }

    #[test]
    fn message_sections_are_checked_and_named_by_position() {
        let two = "[[message]]\nprefix = \"a\"\n[[message]]\nprefix = \"a\"\n";
        let e = load(two, &[]).unwrap_err().to_string();
        assert!(
            e.contains("message[1].prefix = \"a\"") && e.contains("twice"),
            "{e}"
        );
        let e = load("[[message]]\nprefix = \"\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("message[0]: prefix is empty"), "{e}");
        let e = load("[[message]]\nprefix = \"outbox-relay.heartbeat\"\n", &[]);
        let e = e.unwrap_err().to_string();
        assert!(e.contains("heartbeat.prefix"), "{e}");
        let e = load("[[message]]\nprefix = \"a\"\ntable = \"x\"\n", &[]);
        let e = e.unwrap_err().to_string();
        assert!(e.contains("message[0].table: unknown field"), "{e}");
        let e = load("[[message]]\ntopic = \"t\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("message[0]") && e.contains("prefix"), "{e}");
    }
}
