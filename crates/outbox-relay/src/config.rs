//! Configuration: one TOML file, every key overridable from the environment.
//!
//! `OUTBOX_RELAY__<SECTION>__<KEY>=value` sets `[section] key = value` (for example
//! `OUTBOX_RELAY__POSTGRES__PASSWORD`). Unknown keys, in the file or the environment, are
//! rejected. Secrets (`postgres.password`, `kafka.sasl_password`, every `kafka.properties`
//! value, the webhook URL and authorization) are never printed: [`Secret`] redacts itself in
//! `Debug`.
//! Every option is documented here and in `docs/configuration.md`.

use std::{collections::BTreeMap, fmt, path::PathBuf, str::FromStr, time::Duration};

use relay_core::route::OutboxTable;
use serde::{Deserialize, Deserializer, de};

/// Prefix of environment variables that override the file.
pub const ENV_PREFIX: &str = "OUTBOX_RELAY__";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to read the replication stream from.
    #[serde(default)]
    pub postgres: PostgresConfig,
    /// Where to produce.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// One entry per outbox table (`[[outbox]]`). Default: Debezium's `public.outbox` layout.
    #[serde(default = "default_outbox")]
    pub outbox: Vec<OutboxTable>,
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
}

fn default_outbox() -> Vec<OutboxTable> {
    vec![OutboxTable::default()]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Host name or IP address of the primary. Default `127.0.0.1`.
    #[serde(default = "d::host")]
    pub host: String,
    /// Port. Default 5432.
    #[serde(default = "d::port", deserialize_with = "flex")]
    pub port: u16,
    /// Role to connect as. It needs the REPLICATION attribute (see docs/security.md).
    #[serde(default = "d::user")]
    pub user: String,
    /// Password. Prefer the environment (`OUTBOX_RELAY__POSTGRES__PASSWORD`) or `password_file`.
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password (trailing newline ignored). Takes precedence over `password`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// TLS to PostgreSQL, for both the replication and the control connection: `disable`
    /// (default) or `verify-full` (encrypt, check the server certificate against
    /// `sslrootcert` and its name against `host`).
    #[serde(default)]
    pub sslmode: PgSslMode,
    /// CA certificate file (PEM) that signed the server certificate; required by
    /// `verify-full`.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// Database holding the outbox table(s). Default `postgres`.
    #[serde(default = "d::database")]
    pub database: String,
    /// Logical replication slot (pgoutput). Default `outbox_relay`.
    #[serde(default = "d::slot")]
    pub slot: String,
    /// Publication listing the outbox table(s). Default `outbox_relay`.
    #[serde(default = "d::publication")]
    pub publication: String,
    /// Create the publication at start (`FOR TABLE <outbox tables> WITH (publish = 'insert')`)
    /// when it does not exist. Default true.
    #[serde(default = "d::yes", deserialize_with = "flex")]
    pub create_publication: bool,
    /// Create the slot at start when it does not exist. Default **false**: a slot that
    /// disappeared means events written since are lost to the relay, so `run` refuses and says
    /// so; create it once with `outbox-relay setup`.
    #[serde(default, deserialize_with = "flex")]
    pub create_slot: bool,
    /// The PostgreSQL system identifier the relay must stream from (`SELECT system_identifier
    /// FROM pg_control_system()`, or the `systemid` of IDENTIFY_SYSTEM). When set, a server
    /// with another identifier (a restored backup, another cluster at the same address) is
    /// refused. Unset: the first server seen by the process is pinned until it exits.
    #[serde(default)]
    pub system_identifier: Option<String>,
    /// Create the slot as a failover slot (`failover => true`, PostgreSQL 17+), so standbys
    /// with `sync_replication_slots = on` keep a copy that survives promotion. Default false.
    #[serde(default, deserialize_with = "flex")]
    pub failover_slot: bool,
    /// `application_name` of the connections (shown in pg_stat_replication). Default `outbox-relay`.
    #[serde(default = "d::application_name")]
    pub application_name: String,
    /// Connect timeout in milliseconds. Default 10000.
    #[serde(default = "d::connect_timeout_ms", deserialize_with = "flex")]
    pub connect_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma-separated. Default `127.0.0.1:9092`.
    #[serde(default = "d::brokers")]
    pub brokers: String,
    /// `linger.ms`: how long the producer waits to fill a batch. Default 20: fewer, larger
    /// produce requests; at a steady 10k events/s this lowered the relay's CPU per event by about
    /// a fifth and its p99 (docs/benchmarks.md), for ~8 ms more p50. 5 is the Kafka 4 client
    /// default.
    #[serde(default = "d::linger_ms", deserialize_with = "flex")]
    pub linger_ms: u64,
    /// `compression.type`: none, gzip, snappy or lz4. Default lz4.
    #[serde(default = "d::compression")]
    pub compression: String,
    /// `message.timeout.ms`. Default 0 = never give up: a timed-out message would leave a gap
    /// that a retry could only fill out of order, so the relay waits for Kafka instead (and
    /// stops reading PostgreSQL while it waits; alert on slot lag). A non-zero value makes a
    /// timeout restart the pipeline from the last confirmed LSN.
    #[serde(default, deserialize_with = "flex")]
    pub message_timeout_ms: u64,
    /// Timeout in milliseconds for the startup check that the brokers answer. Default 10000.
    #[serde(default = "d::connect_timeout_ms", deserialize_with = "flex")]
    pub connect_timeout_ms: u64,
    /// `security.protocol`: `plaintext` (default), `ssl` (TLS), `sasl_plaintext` (SASL
    /// authentication without encryption: with PLAIN the password crosses the network in
    /// clear) or `sasl_ssl` (SASL over TLS; recommended). Upper case (`SASL_SSL`) is accepted.
    #[serde(default)]
    pub security_protocol: KafkaSecurityProtocol,
    /// `sasl.mechanisms`: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`. Required by the `sasl_*`
    /// protocols, refused by the others.
    #[serde(default)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// `sasl.username`. Required by the `sasl_*` protocols.
    #[serde(default)]
    pub sasl_username: Option<String>,
    /// `sasl.password`. Prefer the environment (`OUTBOX_RELAY__KAFKA__SASL_PASSWORD`) or
    /// `sasl_password_file`. Secret. One of the two is required by the `sasl_*` protocols.
    #[serde(default)]
    pub sasl_password: Option<Secret>,
    /// File holding the SASL password (trailing newline ignored), read each time the producer
    /// is built (at start and on every pipeline restart, so a rotated password is picked up).
    /// Not together with `sasl_password`.
    #[serde(default)]
    pub sasl_password_file: Option<PathBuf>,
    /// `ssl.ca.location`: PEM file with the CA certificate(s) that signed the brokers'
    /// certificates, for `ssl` and `sasl_ssl`. Unset: the system's CA store. The broker's
    /// certificate must also name the host in `brokers` (librdkafka checks it).
    #[serde(default)]
    pub ssl_ca_location: Option<PathBuf>,
    /// Zombie fencing: a Kafka `transactional.id` shared by every instance that streams from
    /// this slot (e.g. `"outbox-relay-<slot>"`). The instance that acquires the slot calls
    /// `InitProducerId`, which fences every earlier producer with that id: an instance that
    /// lost the slot without noticing (cut off from PostgreSQL and Kafka, then back on Kafka
    /// only) can no longer write a record, and its unfinished transaction is aborted. Records
    /// are written in Kafka transactions committed every `transaction_interval_ms`, and an
    /// LSN is confirmed only after the transaction holding its records committed. Consumers
    /// must read with `isolation.level=read_committed` (librdkafka's default; the Java
    /// client's default is `read_uncommitted`) to skip aborted records. Delivery stays
    /// at-least-once. The principal needs WRITE and DESCRIBE on the transactional id
    /// (docs/security.md). Default: none (idempotent producer, no transactions).
    #[serde(default)]
    pub transactional_id: Option<String>,
    /// With `transactional_id`: milliseconds between commits of the open Kafka transaction,
    /// 10..=10000. Read-committed consumers see a record up to this much later; shorter costs
    /// more commits. Default 100.
    #[serde(default = "d::transaction_interval_ms", deserialize_with = "flex")]
    pub transaction_interval_ms: u64,
    /// Extra librdkafka producer properties (ssl.* for client certificates, batch.size...).
    /// Properties that would break ordering or durability (`enable.idempotence`, `acks`,
    /// `partitioner`, `max.in.flight.requests.per.connection`, `retries`,
    /// `queuing.strategy`) are rejected; so are keys with a first-class
    /// option above (`security.protocol`, `sasl.mechanism(s)`, `sasl.username`,
    /// `sasl.password`, `ssl.ca.location`, `transactional.id`, ...).
    #[serde(default)]
    pub properties: BTreeMap<String, Secret>,
}

/// See [`KafkaConfig::security_protocol`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KafkaSecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl KafkaSecurityProtocol {
    /// The librdkafka value of `security.protocol`.
    pub fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }
    pub fn is_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
    pub fn is_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
}

impl FromStr for KafkaSecurityProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "plaintext" => Ok(Self::Plaintext),
            "ssl" => Ok(Self::Ssl),
            "sasl_plaintext" => Ok(Self::SaslPlaintext),
            "sasl_ssl" => Ok(Self::SaslSsl),
            _ => Err(format!(
                "unknown security protocol {s:?}: use plaintext, ssl, sasl_plaintext or sasl_ssl"
            )),
        }
    }
}

/// See [`KafkaConfig::sasl_mechanism`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// The librdkafka value of `sasl.mechanisms`.
    pub fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl FromStr for SaslMechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().replace('_', "-").as_str() {
            "PLAIN" => Ok(Self::Plain),
            "SCRAM-SHA-256" => Ok(Self::ScramSha256),
            "SCRAM-SHA-512" => Ok(Self::ScramSha512),
            _ => Err(format!(
                "unknown SASL mechanism {s:?}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 \
                 (GSSAPI and OAUTHBEARER are not supported)"
            )),
        }
    }
}

/// Deserializes a string through `FromStr` (case-insensitive enums with a helpful error).
macro_rules! deserialize_from_str {
    ($($t:ty),*) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(de::Error::custom)
            }
        }
    )*};
}
deserialize_from_str!(KafkaSecurityProtocol, SaslMechanism);

impl KafkaConfig {
    /// The SASL password, from `sasl_password_file` or `sasl_password`.
    pub fn sasl_password(&self) -> Result<Option<Secret>, ConfigError> {
        match &self.sasl_password_file {
            Some(p) => read_secret_file("kafka.sasl_password_file", p).map(Some),
            None => Ok(self.sasl_password.clone()),
        }
    }

    fn validate(&self) -> Result<(), String> {
        let protocol = self.security_protocol;
        let named = format!("kafka.security_protocol = \"{}\"", protocol.as_librdkafka());
        if self.sasl_password.is_some() && self.sasl_password_file.is_some() {
            return Err("set kafka.sasl_password or kafka.sasl_password_file, not both".into());
        }
        if protocol.is_sasl() {
            if self.sasl_mechanism.is_none() {
                return Err(format!(
                    "{named} needs kafka.sasl_mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 \
                     (the one the broker's listener enables)"
                ));
            }
            if self.sasl_username.as_deref().is_none_or(str::is_empty) {
                return Err(format!("{named} needs kafka.sasl_username"));
            }
            if self.sasl_password.is_none() && self.sasl_password_file.is_none() {
                return Err(format!(
                    "{named} needs a password: set OUTBOX_RELAY__KAFKA__SASL_PASSWORD, \
                     kafka.sasl_password_file or kafka.sasl_password"
                ));
            }
        } else {
            let set: Vec<&str> = [
                ("kafka.sasl_mechanism", self.sasl_mechanism.is_some()),
                ("kafka.sasl_username", self.sasl_username.is_some()),
                ("kafka.sasl_password", self.sasl_password.is_some()),
                (
                    "kafka.sasl_password_file",
                    self.sasl_password_file.is_some(),
                ),
            ]
            .into_iter()
            .filter_map(|(k, on)| on.then_some(k))
            .collect();
            if !set.is_empty() {
                let suggestion = if protocol.is_tls() {
                    "\"sasl_ssl\""
                } else {
                    "\"sasl_ssl\" (or \"sasl_plaintext\" without TLS)"
                };
                return Err(format!(
                    "{} only appl{} to SASL, but {named}: set kafka.security_protocol = \
                     {suggestion}, or remove {}",
                    set.join(", "),
                    if set.len() == 1 { "ies" } else { "y" },
                    if set.len() == 1 { "it" } else { "them" },
                ));
            }
        }
        if self.transactional_id.as_deref() == Some("") {
            return Err(
                "kafka.transactional_id is empty: set an id shared by the instances of \
                 this slot, e.g. \"outbox-relay-<slot>\", or remove it"
                    .into(),
            );
        }
        if !(10..=10_000).contains(&self.transaction_interval_ms) {
            return Err(format!(
                "kafka.transaction_interval_ms = {} is out of range: use 10..=10000 (below \
                 Kafka's transaction.timeout.ms)",
                self.transaction_interval_ms
            ));
        }
        if self.ssl_ca_location.is_some() && !protocol.is_tls() {
            return Err(format!(
                "kafka.ssl_ca_location only applies to TLS, but {named}: set \
                 kafka.security_protocol = \"ssl\" or \"sasl_ssl\", or remove it"
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Most outbox records handed to Kafka and not yet acknowledged. When reached, the relay
    /// stops reading the replication stream (PostgreSQL keeps the WAL) until acks arrive.
    /// Default 10000: at 150k events/s that is ~70 ms of acknowledgements, enough for a local
    /// broker, and it halves the relay's peak memory during a catch-up compared with 50000
    /// (docs/benchmarks.md). Raise it for brokers with high round-trip times.
    #[serde(default = "d::max_in_flight_records", deserialize_with = "flex")]
    pub max_in_flight_records: u64,
    /// Most payload bytes in flight, same rule. Default 67108864 (64 MiB).
    #[serde(default = "d::max_in_flight_bytes", deserialize_with = "flex")]
    pub max_in_flight_bytes: u64,
    /// Add the headers `outbox-relay.commit-lsn`, `outbox-relay.commit-time-us` and
    /// `outbox-relay.seq` to every record. Default true.
    #[serde(default = "d::yes", deserialize_with = "flex")]
    pub relay_headers: bool,
    /// On SIGINT/SIGTERM, how long to wait for in-flight acks before exiting. Default 30000.
    #[serde(default = "d::shutdown_timeout_ms", deserialize_with = "flex")]
    pub shutdown_timeout_ms: u64,
    /// How often to send a status update to PostgreSQL, in milliseconds. Default: the smaller
    /// of 1000 and half the server's `wal_sender_timeout`.
    #[serde(default, deserialize_with = "flex_opt")]
    pub status_interval_ms: Option<u64>,
    /// First delay before restarting after a transient failure. Default 500. Doubles up to
    /// `restart_backoff_max_ms` (default 30000), with jitter.
    #[serde(default = "d::backoff_initial_ms", deserialize_with = "flex")]
    pub restart_backoff_initial_ms: u64,
    /// Longest delay between restarts. Default 30000.
    #[serde(default = "d::backoff_max_ms", deserialize_with = "flex")]
    pub restart_backoff_max_ms: u64,
    /// Replication events buffered between the socket and the pipeline. Default 1024.
    #[serde(default = "d::buffer_events", deserialize_with = "flex")]
    pub buffer_events: usize,
    /// Read-side coalescing, in microseconds: when the stream has gone quiet after some events,
    /// the relay waits this long before reading again, so that the walsender's next
    /// transactions arrive in one read instead of one wake-up each. Trades at most this much
    /// latency for fewer thread wake-ups (CPU) at steady rates; 0 turns it off. Default 1000.
    #[serde(default = "d::read_coalesce_us", deserialize_with = "flex")]
    pub read_coalesce_us: u64,
    /// What to do with an outbox row that cannot be delivered: a NULL key or topic part, a
    /// topic name Kafka rejects, a mapped column that is missing, or a record Kafka refuses for
    /// good (too large, topic missing with auto-creation off, not authorised). `halt`
    /// (default): stop with the reason and confirm nothing from that row on; the operator
    /// fixes the cause. `dead-letter`: publish a record to `dead_letter_topic` (the whole row,
    /// or the refused record's key and headers, plus the reason and the source position) and
    /// go on. Nothing is ever dropped without a record.
    #[serde(default)]
    pub on_poison: PoisonPolicy,
    /// Topic for dead-lettered rows. Default `outbox-relay.dead-letter`.
    #[serde(default = "d::dead_letter_topic")]
    pub dead_letter_topic: String,
    /// File in which the relay keeps the server's system identifier, the timeline it streamed
    /// from and the commit LSN of the last transaction it published, so that the failover
    /// checks (docs/operations.md, "Failover") also hold across restarts of the relay. Written
    /// atomically every second by the instance that streams; read at start and before every
    /// connect by all, so instances of an active/passive group share one file on a shared
    /// volume that survives restarts. Default: none (the checks cover one process's lifetime).
    #[serde(default)]
    pub state_file: Option<PathBuf>,
}

/// See [`PostgresConfig::sslmode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    #[default]
    Disable,
    VerifyFull,
}

/// See [`RelayConfig::on_poison`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoisonPolicy {
    #[default]
    Halt,
    DeadLetter,
}

/// `[http]`: one listener serving `/metrics` (Prometheus text), `/healthz` (the process is
/// alive) and `/readyz` (streaming and no critical alert; 503 otherwise, with the reasons).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Serve the endpoint. Default true.
    #[serde(default = "d::yes", deserialize_with = "flex")]
    pub enabled: bool,
    /// Address and port to listen on. Default `127.0.0.1:9559` (loopback only: set
    /// `0.0.0.0:9559` for a scraper on another host). Port 0 picks a free port (logged as
    /// `http_listening`). If the address is in use the relay keeps relaying, logs
    /// `http_listen_failed` and retries every 10 s.
    #[serde(default = "d::http_listen", deserialize_with = "flex")]
    pub listen: std::net::SocketAddr,
}

/// `[monitor]`: the slot monitor queries `pg_replication_slots`, `pg_stat_replication_slots`
/// and `max_slot_wal_keep_size` on its own connection, so it keeps reporting while the stream
/// or Kafka is down.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// How often to query the slot and evaluate the alerts, in milliseconds. Default 5000;
    /// at least 100.
    #[serde(default = "d::poll_interval_ms", deserialize_with = "flex")]
    pub poll_interval_ms: u64,
}

/// `[alerts]`: thresholds of the built-in alerts. Each alert is ok, warning or critical; a
/// change is logged once (`alert_firing` / `alert_resolved`), shown in
/// `outbox_relay_alert_level`, fails `/readyz` when critical, and is sent to the webhook.
/// A threshold of 0 is off. See docs/operations.md for what each alert means.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// `retained_wal` warning: WAL kept by the slot (`pg_current_wal_lsn() - restart_lsn`)
    /// reaches this many bytes. Default 1073741824 (1 GiB).
    #[serde(default = "d::retained_warning_bytes", deserialize_with = "flex")]
    pub retained_wal_warning_bytes: u64,
    /// `retained_wal` critical, in bytes. Default 10737418240 (10 GiB).
    #[serde(default = "d::retained_critical_bytes", deserialize_with = "flex")]
    pub retained_wal_critical_bytes: u64,
    /// `retained_wal` warning as a fraction (0..1) of the server's `max_slot_wal_keep_size`;
    /// applies only when that is set (not -1). Default 0.5.
    #[serde(default = "d::warning_ratio", deserialize_with = "flex")]
    pub retained_wal_warning_ratio: f64,
    /// `retained_wal` critical as a fraction of `max_slot_wal_keep_size`. Default 0.8.
    #[serde(default = "d::critical_ratio", deserialize_with = "flex")]
    pub retained_wal_critical_ratio: f64,
    /// `time_lag` warning: the oldest WAL the slot has not confirmed is this many seconds
    /// old. Default 300.
    #[serde(default = "d::time_lag_warning_secs", deserialize_with = "flex")]
    pub time_lag_warning_secs: u64,
    /// `time_lag` critical, in seconds. Default 1800.
    #[serde(default = "d::time_lag_critical_secs", deserialize_with = "flex")]
    pub time_lag_critical_secs: u64,
    /// Level of the `wal_status` alert when `wal_status = extended` (the slot keeps WAL
    /// beyond `max_wal_size`): `off`, `warning` or `critical`. Default `warning`.
    /// `unreserved` and `lost` are always critical; `lost` also stops the relay.
    #[serde(default)]
    pub wal_status_extended: ExtendedLevel,
    /// Where to send notifications (`[alerts.webhook]`). Off unless `url` is set.
    #[serde(default)]
    pub webhook: WebhookConfig,
}

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
    #[serde(default, deserialize_with = "flex_opt")]
    pub repeat_interval_secs: Option<u64>,
    /// Timeout of one POST, in milliseconds. Failed POSTs are retried twice. Default 5000.
    #[serde(default = "d::webhook_timeout_ms", deserialize_with = "flex")]
    pub timeout_ms: u64,
    /// Value of the `Authorization` header (e.g. `Bearer <token>`). Default none. Secret.
    #[serde(default)]
    pub authorization: Option<Secret>,
}

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

/// `[heartbeat]`: every `interval_ms`, the relay commits `SELECT pg_logical_emit_message(true,
/// <prefix>, <json>)` on its own SQL connection. The message travels through the slot inside
/// BEGIN/COMMIT like any transaction (and is not published), so the slot's confirmed position
/// advances and `outbox_relay_heartbeat_age_seconds` proves end-to-end progress while the
/// outbox is quiet. Skipped on a standby. Logical messages with other prefixes are ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Write heartbeats. Default true (one tiny WAL record per interval).
    #[serde(default = "d::yes", deserialize_with = "flex")]
    pub enabled: bool,
    /// Milliseconds between heartbeats. Default 10000; at least 100.
    #[serde(default = "d::heartbeat_interval_ms", deserialize_with = "flex")]
    pub interval_ms: u64,
    /// Prefix of the logical messages. Default `outbox-relay.heartbeat`.
    #[serde(default = "d::heartbeat_prefix")]
    pub prefix: String,
}

mod d {
    pub fn http_listen() -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], 9559))
    }
    pub fn poll_interval_ms() -> u64 {
        5_000
    }
    pub fn retained_warning_bytes() -> u64 {
        1 << 30
    }
    pub fn retained_critical_bytes() -> u64 {
        10 << 30
    }
    pub fn warning_ratio() -> f64 {
        0.5
    }
    pub fn critical_ratio() -> f64 {
        0.8
    }
    pub fn time_lag_warning_secs() -> u64 {
        300
    }
    pub fn time_lag_critical_secs() -> u64 {
        1800
    }
    pub fn webhook_timeout_ms() -> u64 {
        5_000
    }
    pub fn heartbeat_interval_ms() -> u64 {
        10_000
    }
    pub fn heartbeat_prefix() -> String {
        "outbox-relay.heartbeat".into()
    }
    pub fn host() -> String {
        "127.0.0.1".into()
    }
    pub fn port() -> u16 {
        5432
    }
    pub fn user() -> String {
        "postgres".into()
    }
    pub fn database() -> String {
        "postgres".into()
    }
    pub fn slot() -> String {
        "outbox_relay".into()
    }
    pub fn publication() -> String {
        "outbox_relay".into()
    }
    pub fn application_name() -> String {
        "outbox-relay".into()
    }
    pub fn yes() -> bool {
        true
    }
    pub fn connect_timeout_ms() -> u64 {
        10_000
    }
    pub fn transaction_interval_ms() -> u64 {
        100
    }
    pub fn brokers() -> String {
        "127.0.0.1:9092".into()
    }
    pub fn linger_ms() -> u64 {
        20
    }
    pub fn compression() -> String {
        "lz4".into()
    }
    pub fn max_in_flight_records() -> u64 {
        10_000
    }
    pub fn max_in_flight_bytes() -> u64 {
        64 << 20
    }
    pub fn shutdown_timeout_ms() -> u64 {
        30_000
    }
    pub fn backoff_initial_ms() -> u64 {
        500
    }
    pub fn backoff_max_ms() -> u64 {
        30_000
    }
    pub fn read_coalesce_us() -> u64 {
        1000
    }
    pub fn buffer_events() -> usize {
        1024
    }
    pub fn dead_letter_topic() -> String {
        "outbox-relay.dead-letter".into()
    }
}

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

/// A string that never appears in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Scalar {
            S(String),
            I(i64),
            F(f64),
            B(bool),
        }
        Ok(Secret(match Scalar::deserialize(d)? {
            Scalar::S(s) => s,
            Scalar::I(i) => i.to_string(),
            Scalar::F(f) => f.to_string(),
            Scalar::B(b) => b.to_string(),
        }))
    }
}

/// Accepts a native TOML value or its text (environment overrides are always text).
fn flex<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr + Deserialize<'de>,
    T::Err: fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Native(T),
        Text(String),
    }
    match Either::<T>::deserialize(d)? {
        Either::Native(v) => Ok(v),
        Either::Text(s) => s
            .trim()
            .parse()
            .map_err(|e| de::Error::custom(format!("{s:?}: {e}"))),
    }
}

fn flex_opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr + Deserialize<'de>,
    T::Err: fmt::Display,
{
    flex(d).map(Some)
}

/// The configuration could not be loaded. The message says which key and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A password file (`postgres.password_file`, `kafka.sasl_password_file`).
    #[error("cannot read {key} {path}: {source}")]
    ReadSecret {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Parse(String),
    #[error(
        "environment variable {0} does not name a config key: use OUTBOX_RELAY__<SECTION>__<KEY>"
    )]
    BadEnvKey(String),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Loads `path` (if given), applies `OUTBOX_RELAY__*` variables from `env`, validates.
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?,
            None => String::new(),
        };
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        for (key, value) in env {
            let Some(rest) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
            if path.iter().any(|p| p.is_empty()) {
                return Err(ConfigError::BadEnvKey(key));
            }
            set_path(&mut table, &path, value).map_err(|()| ConfigError::BadEnvKey(key.clone()))?;
        }
        let cfg: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.message().to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        for (what, name) in [
            ("postgres.slot", &self.postgres.slot),
            ("postgres.publication", &self.postgres.publication),
        ] {
            if !valid_identifier(name) {
                return bad(format!(
                    "{what} = {name:?}: use 1-63 characters of lower-case letters, digits and \
                     underscores, starting with a letter or underscore"
                ));
            }
        }
        if self.outbox.is_empty() {
            return bad("at least one [[outbox]] table is required".into());
        }
        let mut seen = std::collections::HashSet::new();
        for t in &self.outbox {
            t.validate()
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            if !seen.insert(t.qualified_name()) {
                return bad(format!("outbox table {} is configured twice", t.table));
            }
        }
        for key in self.kafka.properties.keys() {
            if FORBIDDEN_KAFKA_PROPERTIES.contains(&key.as_str()) {
                return bad(format!(
                    "kafka.properties.{key:?} cannot be set: outbox-relay fixes it to keep \
                     per-key order and durability (see docs/configuration.md)"
                ));
            }
            if let Some(option) = FIRST_CLASS_KAFKA_PROPERTIES.iter().find(|(p, _)| p == key) {
                return bad(format!(
                    "kafka.properties.{key:?}: use kafka.{} instead",
                    option.1
                ));
            }
        }
        self.kafka.validate().map_err(ConfigError::Invalid)?;
        if !matches!(
            self.kafka.compression.as_str(),
            "none" | "gzip" | "snappy" | "lz4"
        ) {
            return bad(format!(
                "kafka.compression = {:?}: use none, gzip, snappy or lz4",
                self.kafka.compression
            ));
        }
        if !relay_core::route::valid_topic(&self.relay.dead_letter_topic) {
            return bad(format!(
                "relay.dead_letter_topic = {:?} is not a valid Kafka topic name",
                self.relay.dead_letter_topic
            ));
        }
        if self.relay.max_in_flight_records == 0 || self.relay.max_in_flight_bytes == 0 {
            return bad("relay.max_in_flight_records and max_in_flight_bytes must be > 0".into());
        }
        if self.relay.read_coalesce_us > 100_000 {
            return bad(format!(
                "relay.read_coalesce_us = {} adds that much latency to every quiet moment; use \
                 at most 100000 (0 turns coalescing off)",
                self.relay.read_coalesce_us
            ));
        }
        if self.postgres.sslmode == PgSslMode::VerifyFull && self.postgres.sslrootcert.is_none() {
            return bad(
                "postgres.sslmode = \"verify-full\" needs postgres.sslrootcert (the CA file)"
                    .into(),
            );
        }
        if self.postgres.password.is_some() && self.postgres.password_file.is_some() {
            return bad("set postgres.password or postgres.password_file, not both".into());
        }
        self.validate_observability()
    }

    fn validate_observability(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        let a = &self.alerts;
        for (key, v) in [
            ("retained_wal_warning_ratio", a.retained_wal_warning_ratio),
            ("retained_wal_critical_ratio", a.retained_wal_critical_ratio),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!(
                    "alerts.{key} = {v}: use a fraction of max_slot_wal_keep_size between 0 \
                     (off) and 1"
                ));
            }
        }
        for (what, warning, critical) in [
            (
                "retained_wal_*_bytes",
                a.retained_wal_warning_bytes as f64,
                a.retained_wal_critical_bytes as f64,
            ),
            (
                "retained_wal_*_ratio",
                a.retained_wal_warning_ratio,
                a.retained_wal_critical_ratio,
            ),
            (
                "time_lag_*_secs",
                a.time_lag_warning_secs as f64,
                a.time_lag_critical_secs as f64,
            ),
        ] {
            if warning > 0.0 && critical > 0.0 && warning > critical {
                return bad(format!(
                    "alerts.{what}: the warning threshold ({warning}) is above the critical one \
                     ({critical})"
                ));
            }
        }
        if let Some(url) = &a.webhook.url
            && let Err(e) = crate::http_client::Target::parse(url.expose())
        {
            return bad(format!("alerts.webhook.url: {e}"));
        }
        if self.monitor.poll_interval_ms < 100 {
            return bad("monitor.poll_interval_ms must be at least 100".into());
        }
        let hb = &self.heartbeat;
        if hb.enabled && hb.interval_ms < 100 {
            return bad("heartbeat.interval_ms must be at least 100".into());
        }
        if hb.prefix.is_empty() || hb.prefix.len() > 200 {
            return bad("heartbeat.prefix must be 1-200 characters".into());
        }
        Ok(())
    }

    /// The PostgreSQL password, from `password_file` or `password`.
    pub fn postgres_password(&self) -> Result<Option<Secret>, ConfigError> {
        match &self.postgres.password_file {
            Some(p) => read_secret_file("postgres.password_file", p).map(Some),
            None => Ok(self.postgres.password.clone()),
        }
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.relay.shutdown_timeout_ms)
    }
}

/// Reads a password file; a trailing newline is not part of the secret.
fn read_secret_file(key: &'static str, p: &std::path::Path) -> Result<Secret, ConfigError> {
    std::fs::read_to_string(p)
        .map(|s| Secret(s.trim_end_matches(['\n', '\r']).to_string()))
        .map_err(|source| ConfigError::ReadSecret {
            key,
            path: p.to_path_buf(),
            source,
        })
}

const FORBIDDEN_KAFKA_PROPERTIES: &[&str] = &[
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "partitioner",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "retries",
    "message.send.max.retries",
    "queuing.strategy",
    "enable.gapless.guarantee",
];

const FIRST_CLASS_KAFKA_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "brokers"),
    ("transactional.id", "transactional_id"),
    ("metadata.broker.list", "brokers"),
    ("linger.ms", "linger_ms"),
    ("queue.buffering.max.ms", "linger_ms"),
    ("compression.type", "compression"),
    ("compression.codec", "compression"),
    ("message.timeout.ms", "message_timeout_ms"),
    ("delivery.timeout.ms", "message_timeout_ms"),
    ("security.protocol", "security_protocol"),
    ("sasl.mechanism", "sasl_mechanism"),
    ("sasl.mechanisms", "sasl_mechanism"),
    ("sasl.username", "sasl_username"),
    ("sasl.password", "sasl_password (or sasl_password_file)"),
    ("ssl.ca.location", "ssl_ca_location"),
];

/// Slot and publication names are interpolated into replication commands: only plain
/// identifiers are accepted, so nothing in the config can inject SQL.
pub fn valid_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn set_path(table: &mut toml::Table, path: &[String], value: String) -> Result<(), ()> {
    let (last, parents) = path.split_last().ok_or(())?;
    let mut t = table;
    for p in parents {
        t = t
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or(())?;
    }
    t.insert(last.clone(), toml::Value::String(value));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("relay-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // One file per call: tests run in parallel.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = dir.join(format!("{n}.toml"));
        std::fs::write(&p, toml).unwrap();
        Config::load(
            Some(&p),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn empty_file_gives_debezium_compatible_defaults() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.outbox, vec![OutboxTable::default()]);
        assert_eq!(c.postgres.port, 5432);
        assert_eq!(c.kafka.message_timeout_ms, 0);
        assert!(!c.postgres.create_slot);
    }

    #[test]
    fn environment_overrides_the_file_with_typed_values() {
        let c = load(
            "[postgres]\nport = 1\n",
            &[
                ("OUTBOX_RELAY__POSTGRES__PORT", "6543"),
                ("OUTBOX_RELAY__POSTGRES__PASSWORD", "12345"),
                ("OUTBOX_RELAY__RELAY__RELAY_HEADERS", "false"),
                ("OTHER", "ignored"),
            ],
        )
        .unwrap();
        assert_eq!(c.postgres.port, 6543);
        assert_eq!(
            c.postgres.password.as_ref().map(Secret::expose),
            Some("12345")
        );
        assert!(!c.relay.relay_headers);
    }

    #[test]
    fn unknown_keys_are_rejected_in_file_and_environment() {
        let e = load("[postgres]\nhots = \"x\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("hots"), "{e}");
        let e = load("", &[("OUTBOX_RELAY__KAFKA__BROKER", "x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("broker"), "{e}");
        let e = load("[[outbox]]\ntable = \"public.o\"\nkey = \"k\"\n", &[]).unwrap_err();
        assert!(e.to_string().contains("key"), "{e}");
    }

    #[test]
    fn transactional_id_is_first_class_and_checked() {
        let c = load("[kafka]\ntransactional_id = \"outbox-relay-s\"\n", &[]).unwrap();
        assert_eq!(c.kafka.transactional_id.as_deref(), Some("outbox-relay-s"));
        assert_eq!(c.kafka.transaction_interval_ms, 100);
        for (toml, needle) in [
            (
                "[kafka]\ntransactional_id = \"\"\n",
                "transactional_id is empty",
            ),
            ("[kafka]\ntransaction_interval_ms = 5\n", "10..=10000"),
            (
                "[kafka.properties]\n\"transactional.id\" = \"x\"\n",
                "transactional_id",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err().to_string();
            assert!(e.contains(needle), "{toml}: {e}");
        }
    }

    #[test]
    fn unsafe_kafka_properties_and_bad_names_are_rejected() {
        let e = load(
            "[kafka.properties]\n\"enable.idempotence\" = \"false\"\n",
            &[],
        );
        assert!(e.unwrap_err().to_string().contains("enable.idempotence"));
        let e = load("[kafka.properties]\n\"linger.ms\" = \"1\"\n", &[]);
        assert!(e.unwrap_err().to_string().contains("kafka.linger_ms"));
        let e = load("[postgres]\nslot = \"x'; DROP TABLE t; --\"\n", &[]);
        assert!(e.unwrap_err().to_string().contains("postgres.slot"));
    }

    #[test]
    fn observability_sections_have_defaults_and_typed_env_overrides() {
        let c = load("", &[]).unwrap();
        assert!(c.http.enabled && c.http.listen.ip().is_loopback());
        assert_eq!(c.monitor.poll_interval_ms, 5000);
        assert_eq!(c.alerts.retained_wal_warning_bytes, 1 << 30);
        assert_eq!(c.alerts.retained_wal_critical_ratio, 0.8);
        assert_eq!(c.alerts.wal_status_extended, ExtendedLevel::Warning);
        assert!(c.alerts.webhook.url.is_none());
        assert_eq!(
            c.alerts.webhook.repeat_interval(),
            Some(Duration::from_secs(4 * 3600))
        );
        assert!(c.heartbeat.enabled && c.heartbeat.prefix == "outbox-relay.heartbeat");

        let c = load(
            "[http]\nlisten = \"0.0.0.0:9000\"\n[alerts]\nretained_wal_warning_ratio = 0.25\n\
             time_lag_warning_secs = 1\n[alerts.webhook]\nurl = \"http://am:9093/api/v2/alerts\"\n\
             format = \"alertmanager\"\n",
            &[
                ("OUTBOX_RELAY__HEARTBEAT__ENABLED", "false"),
                ("OUTBOX_RELAY__HEARTBEAT__INTERVAL_MS", "500"),
                ("OUTBOX_RELAY__ALERTS__RETAINED_WAL_CRITICAL_RATIO", "0.5"),
                ("OUTBOX_RELAY__ALERTS__WAL_STATUS_EXTENDED", "critical"),
                ("OUTBOX_RELAY__ALERTS__WEBHOOK__REPEAT_INTERVAL_SECS", "0"),
                ("OUTBOX_RELAY__MONITOR__POLL_INTERVAL_MS", "250"),
                ("OUTBOX_RELAY__HTTP__ENABLED", "false"),
            ],
        )
        .unwrap();
        assert_eq!(c.http.listen.port(), 9000);
        assert!(!c.http.enabled && !c.heartbeat.enabled);
        assert_eq!(c.heartbeat.interval_ms, 500);
        assert_eq!(c.alerts.retained_wal_warning_ratio, 0.25);
        assert_eq!(c.alerts.retained_wal_critical_ratio, 0.5);
        assert_eq!(c.alerts.time_lag_warning_secs, 1);
        assert_eq!(c.alerts.wal_status_extended, ExtendedLevel::Critical);
        assert_eq!(c.alerts.webhook.format, WebhookFormat::Alertmanager);
        assert_eq!(c.alerts.webhook.repeat_interval(), None);
        assert_eq!(c.monitor.poll_interval_ms, 250);
    }

    #[test]
    fn observability_options_are_validated_with_the_key_in_the_message() {
        for (toml, needle) in [
            (
                "[alerts]\nretained_wal_warning_ratio = 1.5\n",
                "retained_wal_warning_ratio",
            ),
            (
                "[alerts]\ntime_lag_warning_secs = 90\ntime_lag_critical_secs = 60\n",
                "time_lag_*_secs",
            ),
            (
                "[alerts.webhook]\nurl = \"https://hooks.slack.com/x\"\n",
                "alerts.webhook.url",
            ),
            (
                "[alerts.webhook]\nurl = \"not a url\"\n",
                "alerts.webhook.url",
            ),
            ("[alerts.webhook]\nformat = \"teams\"\n", "teams"),
            ("[alerts.webhook]\nsecret = \"x\"\n", "secret"),
            ("[heartbeat]\ninterval_ms = 5\n", "heartbeat.interval_ms"),
            ("[monitor]\npoll_interval_ms = \"often\"\n", "often"),
            ("[http]\nlisten = \"localhost\"\n", "localhost"),
            ("[alerts]\nwal_status_extended = \"loud\"\n", "loud"),
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
    }

    #[test]
    fn kafka_security_defaults_to_plaintext_without_sasl() {
        let k = load("", &[]).unwrap().kafka;
        assert_eq!(k.security_protocol, KafkaSecurityProtocol::Plaintext);
        assert!(k.sasl_mechanism.is_none() && k.sasl_username.is_none());
        assert!(k.sasl_password().unwrap().is_none() && k.ssl_ca_location.is_none());
    }

    #[test]
    fn kafka_sasl_ssl_from_file_and_password_from_environment() {
        let c = load(
            "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"relay\"\nssl_ca_location = \"/etc/kafka-ca.pem\"\n",
            &[("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", "pa55-w0rd")],
        )
        .unwrap();
        let k = &c.kafka;
        assert_eq!(k.security_protocol, KafkaSecurityProtocol::SaslSsl);
        assert_eq!(k.security_protocol.as_librdkafka(), "sasl_ssl");
        assert_eq!(k.sasl_mechanism, Some(SaslMechanism::ScramSha512));
        assert_eq!(k.sasl_username.as_deref(), Some("relay"));
        assert_eq!(
            k.sasl_password().unwrap().as_ref().map(Secret::expose),
            Some("pa55-w0rd")
        );
        assert_eq!(
            k.ssl_ca_location.as_deref(),
            Some(std::path::Path::new("/etc/kafka-ca.pem"))
        );
        let dump = format!("{c:?}");
        assert!(!dump.contains("pa55-w0rd"), "{dump}");

        // Everything from the environment; Kafka's own spellings are accepted.
        let k = load(
            "",
            &[
                ("OUTBOX_RELAY__KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
                ("OUTBOX_RELAY__KAFKA__SASL_MECHANISM", "plain"),
                ("OUTBOX_RELAY__KAFKA__SASL_USERNAME", "u"),
                ("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", "p"),
            ],
        )
        .unwrap()
        .kafka;
        assert_eq!(k.security_protocol, KafkaSecurityProtocol::SaslPlaintext);
        assert_eq!(
            k.sasl_mechanism.map(SaslMechanism::as_librdkafka),
            Some("PLAIN")
        );
        let k = load(
            "[kafka]\nsecurity_protocol = \"ssl\"\nssl_ca_location = \"ca.pem\"\n",
            &[],
        )
        .unwrap()
        .kafka;
        assert!(k.security_protocol.is_tls() && !k.security_protocol.is_sasl());
        let k = load(
            "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"scram-sha-256\"\n\
             sasl_username = \"u\"\nsasl_password = \"p\"\n",
            &[],
        )
        .unwrap()
        .kafka;
        assert_eq!(k.sasl_mechanism, Some(SaslMechanism::ScramSha256));
    }

    #[test]
    fn kafka_sasl_password_file_is_read_and_trimmed() {
        let dir = std::env::temp_dir().join(format!("relay-cfg-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("kafka-password");
        std::fs::write(&pw, "from-file\n").unwrap();
        let base = "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\n\
                    sasl_username = \"u\"\n";
        let k = load(
            &format!("{base}sasl_password_file = \"{}\"\n", pw.display()),
            &[],
        )
        .unwrap()
        .kafka;
        assert_eq!(
            k.sasl_password().unwrap().as_ref().map(Secret::expose),
            Some("from-file")
        );
        // A missing file is reported with the key and the path when the producer is built.
        let k = load(
            &format!(
                "{base}sasl_password_file = \"{}\"\n",
                dir.join("missing").display()
            ),
            &[],
        )
        .unwrap()
        .kafka;
        let e = k.sasl_password().unwrap_err().to_string();
        assert!(
            e.contains("kafka.sasl_password_file") && e.contains("missing"),
            "{e}"
        );
        // Both a password and a file: refused.
        let e = load(
            &format!("{base}sasl_password_file = \"{}\"\n", pw.display()),
            &[("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", "x")],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn kafka_security_combinations_are_validated_with_actionable_errors() {
        for (toml, needles) in [
            (
                "[kafka]\nsasl_username = \"u\"\nsasl_password = \"p\"\n",
                &[
                    "kafka.sasl_username, kafka.sasl_password only apply to SASL",
                    "security_protocol = \"sasl_ssl\"",
                ][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"ssl\"\nsasl_mechanism = \"PLAIN\"\n",
                &["kafka.sasl_mechanism only applies to SASL", "\"ssl\""][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_username = \"u\"\n\
                 sasl_password = \"p\"\n",
                &["needs kafka.sasl_mechanism", "SCRAM-SHA-512"][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"PLAIN\"\n\
                 sasl_password = \"p\"\n",
                &["needs kafka.sasl_username"][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\n\
                 sasl_username = \"u\"\n",
                &["needs a password", "OUTBOX_RELAY__KAFKA__SASL_PASSWORD"][..],
            ),
            (
                "[kafka]\nssl_ca_location = \"ca.pem\"\n",
                &["kafka.ssl_ca_location only applies to TLS", "\"plaintext\""][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"tls\"\n",
                &["\"tls\"", "sasl_ssl"][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"GSSAPI\"\n",
                &["GSSAPI", "SCRAM-SHA-512"][..],
            ),
        ] {
            let e = load(toml, &[]).unwrap_err().to_string();
            for needle in needles {
                assert!(e.contains(needle), "{toml:?} -> {e}");
            }
        }
    }

    #[test]
    fn kafka_security_properties_have_first_class_options() {
        for (key, option) in [
            ("security.protocol", "kafka.security_protocol"),
            ("sasl.mechanism", "kafka.sasl_mechanism"),
            ("sasl.mechanisms", "kafka.sasl_mechanism"),
            ("sasl.username", "kafka.sasl_username"),
            ("sasl.password", "kafka.sasl_password"),
            ("ssl.ca.location", "kafka.ssl_ca_location"),
        ] {
            let e = load(&format!("[kafka.properties]\n\"{key}\" = \"x\"\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(option), "{key} -> {e}");
        }
        // Other ssl.* properties (client certificates for mTLS, ...) stay available.
        load(
            "[kafka]\nsecurity_protocol = \"ssl\"\n[kafka.properties]\n\
             \"ssl.certificate.location\" = \"c.pem\"\n\"ssl.key.location\" = \"k.pem\"\n",
            &[],
        )
        .unwrap();
    }

    #[test]
    fn secrets_never_appear_in_debug_output() {
        let c = load(
            "[postgres]\npassword = \"hunter2\"\n[kafka]\nsecurity_protocol = \"sasl_ssl\"\n\
             sasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"\nsasl_password = \"pl41n\"\n\
             [kafka.properties]\n\"ssl.key.password\" = \"s3cr3t\"\n",
            &[],
        )
        .unwrap();
        let dump = format!("{c:?}");
        assert!(
            !dump.contains("hunter2") && !dump.contains("s3cr3t") && !dump.contains("pl41n"),
            "{dump}"
        );
        assert!(dump.contains("<redacted>"));
    }
}
