//! The applier's connections: `[postgres]` (the consumer's database), `[kafka]` (the topics
//! and the group) and `[http]`.

use std::{net::SocketAddr, path::PathBuf};

use relay_core::apply::position::NewPartition;
use serde::Deserialize;

use super::super::{PgSslMode, Secret, lenient::from_str_or_native};

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
    /// included as they appear (within `pattern_refresh_ms`). Set this or `topics`.
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// How often, in milliseconds, the consumer re-reads the cluster's topic list, so that a
    /// topic created after the start and matching `topic_pattern` joins the subscription.
    /// Default 10000 (librdkafka's own default, 300000, would leave a new topic unread for up
    /// to five minutes).
    #[serde(
        default = "default_pattern_refresh_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub pattern_refresh_ms: u64,
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

fn default_pattern_refresh_ms() -> u64 {
    10_000
}

fn default_session_ms() -> u64 {
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
