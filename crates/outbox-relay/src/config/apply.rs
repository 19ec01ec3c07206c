//! The applier's configuration (`outbox-relay apply --config applier.toml`): the consumer's
//! PostgreSQL, the Kafka topics and group, the bookkeeping tables, and one `[[handler]]` per
//! event type. Loaded like the relay's (file, then `OUTBOX_RELAY__SECTION__KEY` variables,
//! unknown keys rejected, secrets redacted); documented in docs/configuration.md ("The
//! applier").

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use relay_core::apply::{
    position::NewPartition,
    sql::{Statement, ValueType},
};
use serde::Deserialize;

use super::{
    ConfigError, InvalidOption, PgSslMode, Secret,
    lenient::{from_str_or_native, option_from_str_or_native},
    load,
    postgres::valid_identifier,
    secret::read_secret_file,
};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyConfig {
    /// The consumer's database, where the effects, the inbox and the offsets live.
    #[serde(default)]
    pub postgres: ApplyPostgres,
    /// The topics to read and the consumer group.
    pub kafka: ApplyKafka,
    /// Bookkeeping, batching and failure policy.
    pub apply: ApplySection,
    /// One entry per event type (`[[handler]]`).
    #[serde(default)]
    pub handler: Vec<Handler>,
    /// `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub http: ApplyHttp,
    /// Inbox cleanup.
    #[serde(default)]
    pub retention: ApplyRetention,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyRetention {
    /// How often the applier deletes this consumer's old inbox rows (in batches), after checking
    /// the retention against the topics' settings again; the first check is at start. In
    /// milliseconds; 0 = never (keep every claim, or clean up with your own job). Default 3600000.
    #[serde(
        default = "default_cleanup_interval",
        deserialize_with = "from_str_or_native"
    )]
    pub interval_ms: u64,
    /// Delete claims older than this, in milliseconds. Unset (default): the longest time any of
    /// the consumer's topics can replay a record (`retention.ms + segment.ms + 5 min`). A value
    /// shorter than that is refused (`outbox_inbox::decide`): at start the applier does not
    /// start, later (a topic's retention raised) the cleanup stops and says so.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub inbox_ms: Option<u64>,
    /// The replay window you guarantee for topics that keep records without a time bound
    /// (`retention.ms = -1` or compacted), in milliseconds. Without it those topics' claims are
    /// never deleted.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub replay_window_ms: Option<u64>,
    /// Rows per DELETE statement (each its own transaction), 1..=10000. Default 1000.
    #[serde(
        default = "default_cleanup_batch",
        deserialize_with = "from_str_or_native"
    )]
    pub batch_rows: u32,
}

fn default_cleanup_interval() -> u64 {
    3_600_000
}
fn default_cleanup_batch() -> u32 {
    1000
}

impl Default for ApplyRetention {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyPostgres {
    /// Host name or IP address. Default `127.0.0.1`.
    #[serde(default = "default_host")]
    pub host: String,
    /// Port. Default 5432.
    #[serde(default = "default_port", deserialize_with = "from_str_or_native")]
    pub port: u16,
    /// Role; it needs to write the tables of `[apply]` and whatever the handlers touch.
    #[serde(default = "default_user")]
    pub user: String,
    /// Password. Prefer `OUTBOX_RELAY__POSTGRES__PASSWORD` or `password_file`.
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password (trailing newline ignored). Not together with `password`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// `disable` (default) or `verify-full` (needs `sslrootcert`).
    #[serde(default)]
    pub sslmode: PgSslMode,
    /// CA certificate (PEM) for `verify-full`.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// Database. Default `postgres`.
    #[serde(default = "default_database")]
    pub database: String,
    /// `application_name` of the connections. Default `outbox-relay-apply`.
    #[serde(default = "default_application_name")]
    pub application_name: String,
    /// Connect timeout in milliseconds. Default 10000.
    #[serde(
        default = "default_connect_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub connect_timeout_ms: u64,
    /// Connections applying records: at most this many partitions are applied at the same
    /// time (plus one connection for positions). Default 4.
    #[serde(default = "default_pool", deserialize_with = "from_str_or_native")]
    pub pool_size: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyKafka {
    /// Bootstrap servers, `host:port[,host:port]`. Default `127.0.0.1:9092`.
    #[serde(default = "default_brokers")]
    pub brokers: String,
    /// Consumer group: instances with the same group share the partitions. Required.
    pub group_id: String,
    /// Topics to read. Set this or `topic_pattern`.
    #[serde(default)]
    pub topics: Vec<String>,
    /// A regular expression (librdkafka's, anchored with `^`) of topics to read, new ones
    /// included as they appear. Set this or `topics`.
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// Where a partition with no position in the offsets table starts: `earliest` (default:
    /// a new applier applies every event still in the topic, which is what a read model built
    /// from the events needs; librdkafka's and Java's own default, the newest record, would
    /// silently leave out everything written before the first start) or `latest`.
    #[serde(default)]
    pub start: StartAt,
    /// The group's session timeout in milliseconds: a crashed instance's partitions move to
    /// the others after this long. Default 10000.
    #[serde(
        default = "default_session_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub session_timeout_ms: u64,
    /// Extra librdkafka consumer properties (security: `security.protocol`, `sasl.*`,
    /// `ssl.ca.location`; values are secrets, never logged). The applier sets `group.id`,
    /// `isolation.level = read_committed`, `enable.auto.offset.store = false` and
    /// `auto.offset.reset = error` itself; those cannot be overridden.
    #[serde(default)]
    pub properties: std::collections::BTreeMap<String, Secret>,
}

/// `kafka.start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartAt {
    #[default]
    Earliest,
    Latest,
}

impl From<StartAt> for NewPartition {
    fn from(s: StartAt) -> NewPartition {
        match s {
            StartAt::Earliest => NewPartition::Earliest,
            StartAt::Latest => NewPartition::Latest,
        }
    }
}

/// `apply.on_failure`: what a record that cannot be applied does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Its partition stops (the others go on), with the reason in the log, `/readyz`, the
    /// metrics and `status`; nothing after it is applied until an operator acts.
    #[default]
    Halt,
    /// It goes to the dead-letter table, with the error, in the transaction that moves the
    /// position past it; its claim is kept so a redelivery is absorbed.
    DeadLetter,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplySection {
    /// The consumer's name in the inbox, the offsets and the dead-letter tables (independent of
    /// the group id, so a group can be renamed without re-applying anything). Required.
    pub consumer: String,
    /// The inbox table (migrations/0003_inbox.sql layout). Default `public.inbox`.
    #[serde(default = "default_inbox")]
    pub inbox_table: String,
    /// The positions table. Default `public.outbox_apply_offsets`.
    #[serde(default = "default_offsets")]
    pub offsets_table: String,
    /// The dead-letter table. Default `public.outbox_apply_dead_letter`.
    #[serde(default = "default_dead_letter")]
    pub dead_letter_table: String,
    /// The header holding the event id (the claim). Default `id` (the relay's and Debezium's).
    #[serde(default = "default_id_header")]
    pub event_id_header: String,
    /// The header holding the event type (which handler). Default `eventType`.
    #[serde(default = "default_type_header")]
    pub event_type_header: String,
    /// `halt` (default) or `dead-letter`.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Event types that are claimed and not applied (no handler needed).
    #[serde(default)]
    pub ignore_types: Vec<String>,
    /// Records of one partition applied in one transaction, at most. Default 100.
    #[serde(default = "default_batch", deserialize_with = "from_str_or_native")]
    pub batch_records: usize,
    /// How long a transaction waits for more records of its partition before it runs, in
    /// milliseconds. Default 0: a transaction takes the records already read and runs; under
    /// load, records pile up while one runs, so the next takes up to `batch_records` anyway
    /// (a wait only adds latency at low rates: docs/benchmarks.md, "The consumer half").
    #[serde(
        default = "default_batch_wait",
        deserialize_with = "from_str_or_native"
    )]
    pub batch_wait_ms: u64,
    /// Time limit of each handler statement (`SET LOCAL statement_timeout`), in milliseconds;
    /// 0 = none. A handler over it is a definite failure (`on_failure`). Default 10000.
    #[serde(
        default = "default_statement_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub statement_timeout_ms: u64,
    /// First wait before a transaction is retried after a transient error, in milliseconds;
    /// doubled per retry up to `retry_backoff_max_ms`. Default 100.
    #[serde(default = "default_backoff", deserialize_with = "from_str_or_native")]
    pub retry_backoff_initial_ms: u64,
    /// Longest wait between retries, in milliseconds. Default 10000.
    #[serde(
        default = "default_backoff_max",
        deserialize_with = "from_str_or_native"
    )]
    pub retry_backoff_max_ms: u64,
    /// On SIGTERM, how long the open transactions may take to finish before they are rolled
    /// back, in milliseconds. Default 10000.
    #[serde(default = "default_shutdown", deserialize_with = "from_str_or_native")]
    pub shutdown_timeout_ms: u64,
}

/// The value's type as a handler's `:value` parameter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueAs {
    /// JSON (a value that is not JSON is a definite failure).
    #[default]
    Jsonb,
    /// UTF-8 text (a value that is not UTF-8 is a definite failure).
    Text,
    /// The bytes as they are.
    Bytea,
}

impl From<ValueAs> for ValueType {
    fn from(v: ValueAs) -> ValueType {
        match v {
            ValueAs::Jsonb => ValueType::Jsonb,
            ValueAs::Text => ValueType::Text,
            ValueAs::Bytea => ValueType::Bytea,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handler {
    /// The event type (the `apply.event_type_header` value) this handler applies.
    pub event_type: String,
    /// One SQL statement, run only when the claim is new, with named parameters `:key`,
    /// `:value`, `:headers`, `:topic`, `:partition`, `:offset`, `:timestamp`, `:event_id`,
    /// `:event_type` (e.g. `SELECT apply_balance(:value)`). Prepared by `apply setup`.
    pub sql: String,
    /// `jsonb` (default), `text` or `bytea`: the type of `:value`.
    #[serde(default)]
    pub value: ValueAs,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyHttp {
    /// Serve the endpoint. Default true.
    #[serde(default = "default_true", deserialize_with = "from_str_or_native")]
    pub enabled: bool,
    /// Address and port. Default `127.0.0.1:9560` (the relay's default port + 1, so both can
    /// run on one host).
    #[serde(default = "default_listen", deserialize_with = "from_str_or_native")]
    pub listen: SocketAddr,
}

fn default_host() -> String {
    "127.0.0.1".into()
}
fn default_port() -> u16 {
    5432
}
fn default_user() -> String {
    "postgres".into()
}
fn default_database() -> String {
    "postgres".into()
}
fn default_application_name() -> String {
    "outbox-relay-apply".into()
}
fn default_connect_ms() -> u64 {
    10_000
}
fn default_pool() -> usize {
    4
}
fn default_brokers() -> String {
    "127.0.0.1:9092".into()
}
fn default_session_ms() -> u64 {
    10_000
}
fn default_inbox() -> String {
    "public.inbox".into()
}
fn default_offsets() -> String {
    "public.outbox_apply_offsets".into()
}
fn default_dead_letter() -> String {
    "public.outbox_apply_dead_letter".into()
}
fn default_id_header() -> String {
    "id".into()
}
fn default_type_header() -> String {
    "eventType".into()
}
fn default_batch() -> usize {
    100
}
fn default_batch_wait() -> u64 {
    0
}
fn default_statement_ms() -> u64 {
    10_000
}
fn default_backoff() -> u64 {
    100
}
fn default_backoff_max() -> u64 {
    10_000
}
fn default_shutdown() -> u64 {
    10_000
}
fn default_true() -> bool {
    true
}
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9560))
}

impl Default for ApplyPostgres {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}
impl Default for ApplyHttp {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

impl ApplyConfig {
    /// Loads `toml` through a file of its own (tests run in parallel: one file per call).
    #[cfg(test)]
    pub(crate) fn from_test_toml(toml: &str) -> Result<ApplyConfig, String> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("apply-config-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, toml).map_err(|e| e.to_string())?;
        let cfg = ApplyConfig::load(Some(&path), std::iter::empty()).map_err(|e| e.to_string());
        let _ = std::fs::remove_file(&path);
        cfg
    }

    /// Loads `path` (if given), applies `OUTBOX_RELAY__*` variables from `env`, validates.
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ApplyConfig, ConfigError> {
        let cfg: ApplyConfig = load::load_as(
            path,
            env,
            &[("handler", |v| v.clone().try_into::<Handler>().map(drop))],
        )?;
        cfg.validate().map_err(ConfigError::Invalid)?;
        Ok(cfg)
    }

    /// The password, from `password_file` or `password`.
    pub fn postgres_password(&self) -> Result<Option<Secret>, ConfigError> {
        match &self.postgres.password_file {
            Some(p) => read_secret_file("postgres.password_file", p).map(Some),
            None => Ok(self.postgres.password.clone()),
        }
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.apply.shutdown_timeout_ms)
    }

    /// The handler of `event_type`, if one is configured.
    pub fn handler_of(&self, event_type: &str) -> Option<(usize, &Handler)> {
        self.handler
            .iter()
            .enumerate()
            .find(|(_, h)| h.event_type == event_type)
    }

    fn validate(&self) -> Result<(), InvalidOption> {
        let bad = |key: &str, why: String| Err(InvalidOption::new(key, format!("{key}: {why}")));
        let k = &self.kafka;
        match (k.topics.is_empty(), &k.topic_pattern) {
            (true, None) => {
                return bad(
                    "kafka.topics",
                    "set kafka.topics or kafka.topic_pattern".into(),
                );
            }
            (false, Some(_)) => {
                return bad(
                    "kafka.topic_pattern",
                    "set kafka.topics or kafka.topic_pattern, not both".into(),
                );
            }
            _ => {}
        }
        if k.group_id.trim().is_empty() {
            return bad("kafka.group_id", "must not be empty".into());
        }
        if self.apply.consumer.trim().is_empty() {
            return bad(
                "apply.consumer",
                "must not be empty: it names the claims in the inbox".into(),
            );
        }
        for (key, table) in [
            ("apply.inbox_table", &self.apply.inbox_table),
            ("apply.offsets_table", &self.apply.offsets_table),
            ("apply.dead_letter_table", &self.apply.dead_letter_table),
        ] {
            let parts: Vec<&str> = table.split('.').collect();
            if parts.len() != 2 || !parts.iter().all(|p| valid_identifier(p)) {
                return bad(
                    key,
                    format!("{table:?}: write schema.table with plain lower-case identifiers"),
                );
            }
        }
        if self.apply.batch_records == 0 {
            return bad("apply.batch_records", "must be at least 1".into());
        }
        if self.postgres.pool_size == 0 {
            return bad("postgres.pool_size", "must be at least 1".into());
        }
        if self.postgres.sslmode == PgSslMode::VerifyFull && self.postgres.sslrootcert.is_none() {
            return bad(
                "postgres.sslrootcert",
                "sslmode = \"verify-full\" needs the CA file".into(),
            );
        }
        if self.postgres.password.is_some() && self.postgres.password_file.is_some() {
            return bad(
                "postgres.password",
                "set password or password_file, not both".into(),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for (i, h) in self.handler.iter().enumerate() {
            if !seen.insert(h.event_type.as_str()) {
                return bad(
                    &format!("handler[{i}].event_type"),
                    format!("{:?} has two handlers; keep one", h.event_type),
                );
            }
            if self.apply.ignore_types.contains(&h.event_type) {
                return bad(
                    &format!("handler[{i}].event_type"),
                    format!(
                        "{:?} is also in apply.ignore_types; it cannot be both",
                        h.event_type
                    ),
                );
            }
            if let Err(e) = Statement::parse(&h.sql, h.value.into()) {
                return bad(&format!("handler[{i}].sql"), e.to_string());
            }
        }
        if self.handler.is_empty() && self.apply.ignore_types.is_empty() {
            return bad("handler", "at least one [[handler]] is needed".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[kafka]\ngroup_id = \"g\"\ntopics = [\"t\"]\n[apply]\nconsumer = \"c\"\n\
                       [[handler]]\nevent_type = \"E\"\nsql = \"SELECT :value\"\n";

    fn load(toml: &str) -> Result<ApplyConfig, String> {
        ApplyConfig::from_test_toml(toml)
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = load(MIN).unwrap();
        assert_eq!(c.kafka.start, StartAt::Earliest);
        assert_eq!(c.apply.on_failure, OnFailure::Halt);
        assert_eq!(c.apply.offsets_table, "public.outbox_apply_offsets");
        assert_eq!(c.http.listen.port(), 9560);
        assert_eq!(c.handler[0].value, ValueAs::Jsonb);
    }

    #[test]
    fn mistakes_name_their_key() {
        for (toml, needle) in [
            (
                MIN.replace("topics = [\"t\"]\n", ""),
                "kafka.topics: set kafka.topics or",
            ),
            (
                MIN.replace("consumer = \"c\"", "consumer = \"c\"\nbatch = 3"),
                "apply.batch: unknown field",
            ),
            (
                MIN.replace("public.inbox", "x")
                    .replace("[apply]\n", "[apply]\ninbox_table = \"inbox\"\n"),
                "apply.inbox_table: \"inbox\": write schema.table",
            ),
            (
                format!("{MIN}[[handler]]\nevent_type = \"E\"\nsql = \"SELECT 1\"\n"),
                "handler[1].event_type",
            ),
            (
                MIN.replace("SELECT :value", "SELECT :vaule"),
                "handler[0].sql: unknown parameter :vaule",
            ),
            (
                MIN.replace("[kafka]\n", "[kafka]\nstart = \"newest\"\n"),
                "kafka.start = \"newest\"",
            ),
        ] {
            let e = load(&toml).unwrap_err();
            assert!(e.contains(needle), "{toml}\n -> {e}\n wanted {needle}");
        }
    }
}
