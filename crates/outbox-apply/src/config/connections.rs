//! The applier's connections: `[postgres]` (the consumer's database), `[kafka]` (the topics
//! and the group) and `[http]`.

use std::{fmt, net::SocketAddr, ops::Deref};

use relay_core::apply::position::NewPartition;
use serde::Deserialize;

use outbox_service::postgres::PgConnection;

use outbox_service::config::{Secret, lenient::from_str_or_native};

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyPostgres {
    /// The server, role, password, TLS, database, `application_name` and connect timeout: the
    /// keys of `[postgres]` both programs share, taken from the table by the loader
    /// ([`PgConnection::take`]); `cfg.postgres.host` reads through to them.
    #[serde(skip, default = "apply_connection")]
    pub connection: PgConnection,
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

/// The applier's `application_name` when the file sets none.
pub(super) const APPLICATION_NAME: &str = "outbox-relay-apply";

fn apply_connection() -> PgConnection {
    PgConnection::defaults(APPLICATION_NAME)
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

/// The keys flat, in the order `check-config` printed them when they were all fields here.
impl fmt::Debug for ApplyPostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ApplyPostgres");
        self.connection.debug_server(&mut d);
        self.connection.debug_naming(&mut d);
        d.field("pool_size", &self.pool_size).finish()
    }
}

impl Deref for ApplyPostgres {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

impl Default for ApplyHttp {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}
