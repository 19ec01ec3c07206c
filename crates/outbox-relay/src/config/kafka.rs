//! `[kafka]`: the producer (brokers, batching, timeouts, zombie fencing) and the extra
//! librdkafka properties, minus those that would break per-key order or durability and those
//! that have a first-class option. TLS and SASL are in [`super::kafka_security`].

use super::InvalidOption;
use std::{collections::BTreeMap, path::PathBuf};

use serde::Deserialize;

use super::{
    kafka_security::{KafkaSecurityProtocol, SaslMechanism},
    lenient::from_str_or_native,
    secret::Secret,
};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma-separated. Default `127.0.0.1:9092`.
    #[serde(default = "default_brokers")]
    pub brokers: String,
    /// `linger.ms`: how long the producer waits to fill a batch. Default 20: fewer, larger
    /// produce requests; at a steady 10k events/s this lowered the relay's CPU per event by about
    /// a fifth and its p99 (docs/benchmarks.md), for ~8 ms more p50. 5 is the Kafka 4 client
    /// default; measured here it halved the p99 at 5k-10k events/s on a quiet machine, and
    /// let it run away to ~250 ms when the broker slowed (more requests queue behind the five
    /// in flight).
    #[serde(default = "default_linger_ms", deserialize_with = "from_str_or_native")]
    pub linger_ms: u64,
    /// Send the producer's batches as soon as the replication stream goes quiet instead of
    /// when `linger_ms` runs out (without `transactional_id`; with it, the commit at a quiet
    /// moment sends them). A busy stream (above ~10k replication messages a second, about
    /// 3,300 single-row transactions) still batches for up to `linger_ms`, a trickle no
    /// longer waits for it. Default true.
    #[serde(default = "default_true", deserialize_with = "from_str_or_native")]
    pub flush_when_quiet: bool,
    /// `compression.type`: none, gzip, snappy or lz4. Default lz4.
    #[serde(default = "default_compression")]
    pub compression: String,
    /// `message.timeout.ms`. Default 0 = never give up: a timed-out message would leave a gap
    /// that a retry could only fill out of order, so the relay waits for Kafka instead (and
    /// stops reading PostgreSQL while it waits; alert on slot lag). A non-zero value makes a
    /// timeout restart the pipeline from the last confirmed LSN.
    #[serde(default, deserialize_with = "from_str_or_native")]
    pub message_timeout_ms: u64,
    /// Timeout in milliseconds for the startup check that the brokers answer. Default 10000.
    #[serde(
        default = "default_connect_timeout_ms",
        deserialize_with = "from_str_or_native"
    )]
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
    #[serde(
        default = "default_transaction_interval_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub transaction_interval_ms: u64,
    /// With `transactional_id`: the relay commits as soon as the replication stream goes
    /// quiet, but at most once per this many milliseconds (0..=`transaction_interval_ms`). Each
    /// commit costs a round of transaction markers on the brokers and CPU in the relay; a
    /// read-committed consumer sees an event up to about this much later. Default 10.
    #[serde(
        default = "default_commit_min_interval_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub commit_min_interval_ms: u64,
    /// With `transactional_id`: the most records one Kafka transaction holds. A larger source
    /// transaction is split across Kafka transactions (each with its checkpoint), so that no
    /// Kafka transaction outlives `transaction.timeout.ms` or holds read-committed consumers
    /// behind the last stable offset for long; those consumers then see the source
    /// transaction in parts. Default 10000.
    #[serde(
        default = "default_max_transaction_records",
        deserialize_with = "from_str_or_native"
    )]
    pub max_transaction_records: u64,
    /// With `transactional_id`: 2 (default) alternates the Kafka transactions between two
    /// producers, `<transactional_id>` and `<transactional_id>.2`; 1 uses `<transactional_id>`
    /// alone. A producer that starts its next transaction right after a commit waits while
    /// the coordinator still writes the commit's markers (Kafka answers
    /// CONCURRENT_TRANSACTIONS and librdkafka retries after 20 ms); with two, each producer's
    /// previous transaction ended one transaction ago (docs/benchmarks.md). With two, the
    /// relay also keeps reading and producing into the next transaction while Kafka answers
    /// the last commit (every record of it acknowledged first, so order holds).
    /// Both ids are fenced at start; the principal needs WRITE and DESCRIBE on both (a
    /// prefixed ACL on `<transactional_id>` covers them: docs/security.md).
    #[serde(
        default = "default_transaction_producers",
        deserialize_with = "from_str_or_native"
    )]
    pub transaction_producers: u64,
    /// Topic of the relay's checkpoints: where Kafka says how far it holds the stream of each
    /// slot (key `<system id>/<database>/<slot>`). One partition, `cleanup.policy=compact`; the
    /// relay creates it, and in exactly-once mode refuses one with other settings. In
    /// at-least-once mode, a topic the relay cannot write or read is warned about and the relay
    /// works as without it (more duplicates after a PostgreSQL crash). Default
    /// `outbox-relay.checkpoints`.
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// Extra librdkafka producer properties (ssl.* for client certificates, batch.size...).
    /// Properties that would break ordering or durability (`enable.idempotence`, `acks`,
    /// `partitioner`, `max.in.flight.requests.per.connection`, `retries`,
    /// `queuing.strategy`) are rejected; so are keys with a first-class
    /// option above (`security.protocol`, `sasl.mechanism(s)`, `sasl.username`,
    /// `sasl.password`, `ssl.ca.location`, `transactional.id`, ...).
    #[serde(default)]
    pub properties: BTreeMap<String, Secret>,
}

fn default_brokers() -> String {
    "127.0.0.1:9092".into()
}
fn default_true() -> bool {
    true
}
fn default_linger_ms() -> u64 {
    20
}
fn default_compression() -> String {
    "lz4".into()
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_transaction_interval_ms() -> u64 {
    100
}
fn default_commit_min_interval_ms() -> u64 {
    10
}
fn default_max_transaction_records() -> u64 {
    10_000
}
fn default_transaction_producers() -> u64 {
    2
}
fn default_checkpoint_topic() -> String {
    "outbox-relay.checkpoints".into()
}

/// Properties the relay fixes to keep per-key order and durability.
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

/// Properties with a first-class option: (librdkafka property, `[kafka]` key).
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

impl KafkaConfig {
    /// The transactional ids of the relay's producers: none without `kafka.transactional_id`,
    /// else `<id>` and, with `kafka.transaction_producers = 2`, `<id>.2`.
    pub(crate) fn transactional_ids(&self) -> Vec<String> {
        match &self.transactional_id {
            None => Vec::new(),
            Some(id) if self.transaction_producers >= 2 => vec![id.clone(), format!("{id}.2")],
            Some(id) => vec![id.clone()],
        }
    }

    pub(super) fn validate(&self) -> Result<(), InvalidOption> {
        for key in self.properties.keys() {
            if FORBIDDEN_KAFKA_PROPERTIES.contains(&key.as_str()) {
                return Err(InvalidOption::new(
                    format!("kafka.properties.{key:?}"),
                    format!(
                        "kafka.properties.{key:?} cannot be set: outbox-relay fixes it to keep \
                     per-key order and durability (see docs/configuration.md)"
                    ),
                ));
            }
            if let Some((_, option)) = FIRST_CLASS_KAFKA_PROPERTIES.iter().find(|(p, _)| p == key) {
                return Err(InvalidOption::new(
                    format!("kafka.properties.{key:?}"),
                    format!("kafka.properties.{key:?}: use kafka.{option} instead"),
                ));
            }
        }
        if !matches!(
            self.compression.as_str(),
            "none" | "gzip" | "snappy" | "lz4"
        ) {
            return Err(InvalidOption::new(
                "kafka.compression",
                format!(
                    "kafka.compression = {:?}: use none, gzip, snappy or lz4",
                    self.compression
                ),
            ));
        }
        self.validate_security()?;
        if self.transactional_id.as_deref() == Some("") {
            return Err(InvalidOption::new(
                "kafka.transactional_id",
                "kafka.transactional_id is empty: set an id shared by the instances of \
                 this slot, e.g. \"outbox-relay-<slot>\", or remove it",
            ));
        }
        if !(10..=10_000).contains(&self.transaction_interval_ms) {
            return Err(InvalidOption::new(
                "kafka.transaction_interval_ms",
                format!(
                    "kafka.transaction_interval_ms = {} is out of range: use 10..=10000 (below \
                 Kafka's transaction.timeout.ms)",
                    self.transaction_interval_ms
                ),
            ));
        }
        if self.commit_min_interval_ms > self.transaction_interval_ms {
            return Err(InvalidOption::new(
                "kafka.commit_min_interval_ms",
                format!(
                    "kafka.commit_min_interval_ms = {} is above kafka.transaction_interval_ms = {}: \
                 use at most the latter",
                    self.commit_min_interval_ms, self.transaction_interval_ms
                ),
            ));
        }
        if !(1..=2).contains(&self.transaction_producers) {
            return Err(InvalidOption::new(
                "kafka.transaction_producers",
                format!(
                    "kafka.transaction_producers = {}: use 1 or 2",
                    self.transaction_producers
                ),
            ));
        }
        if self.max_transaction_records == 0 {
            return Err(InvalidOption::new(
                "kafka.max_transaction_records",
                "kafka.max_transaction_records must be > 0",
            ));
        }
        if !relay_core::route::valid_topic(&self.checkpoint_topic) {
            return Err(InvalidOption::new(
                "kafka.checkpoint_topic",
                format!(
                    "kafka.checkpoint_topic = {:?} is not a valid Kafka topic name",
                    self.checkpoint_topic
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;

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
    fn unsafe_kafka_properties_and_unknown_compression_are_rejected() {
        let e = load(
            "[kafka.properties]\n\"enable.idempotence\" = \"false\"\n",
            &[],
        );
        assert!(e.unwrap_err().to_string().contains("enable.idempotence"));
        let e = load("[kafka.properties]\n\"linger.ms\" = \"1\"\n", &[]);
        assert!(e.unwrap_err().to_string().contains("kafka.linger_ms"));
        let e = load("[kafka]\ncompression = \"zstd\"\n", &[]);
        assert!(e.unwrap_err().to_string().contains("kafka.compression"));
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
}
