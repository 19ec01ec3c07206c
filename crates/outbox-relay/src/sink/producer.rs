//! The producer: one idempotent librdkafka producer (two with alternating Kafka transactions),
//! each polled on its own thread, built with the settings that keep per-partition order and
//! leave no gap at a partition's head (the ordering rules K1-K6 of `sink`'s doc); its
//! reachability check, the partition a record lands on, and its fatal error.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use rdkafka::producer::{BaseProducer, Producer};
use relay_core::route::Record;
use tokio::sync::mpsc;

use super::{Delivered, SinkContext, client_config, is_fenced, poller};
use crate::{
    config::KafkaConfig,
    error::{Definite, RelayError, Transient},
};

pub(super) type Handle = Arc<poller::Polled<SinkContext>>;

/// The producer plus the receiving end of its delivery reports.
///
/// With `kafka.transactional_id` and `kafka.transaction_producers = 2` there are two
/// transactional producers, and each Kafka transaction runs on the one that did not run the
/// previous: a producer whose transaction just committed has to wait (CONCURRENT_TRANSACTIONS,
/// retried after 20 ms) until the coordinator wrote that commit's markers, the other does not.
/// Order holds across them: every record of one transaction is acknowledged before the next
/// one's first record is sent, and the next one commits only once this one committed. Its
/// commit's answer is awaited while the next one fills ([`KafkaSink::commit_start`]); if the
/// commit fails, the next one is aborted.
pub(crate) struct KafkaSink {
    pub(super) producers: Vec<Handle>,
    /// Index in `producers` of the one the open transaction (or every record, without
    /// transactions) goes to.
    pub(super) active: AtomicUsize,
    /// The stream went quiet and what it produced is waiting for earlier records' reports
    /// before it is kicked out ([`try_kick`](Self::try_kick)).
    pub(super) kick_wanted: AtomicBool,
    /// Records handed to librdkafka since the last kick.
    pub(super) since_kick: AtomicU64,
    brokers: String,
    pub(super) transactional_id: Option<String>,
    /// Partition counts of the topics records went to ([`KafkaSink::partition_of`]).
    /// Looked up once per record: foldhash, not SipHash.
    partitions: Mutex<std::collections::HashMap<String, i32, foldhash::fast::FixedState>>,
    /// How long a topic without partitions is asked for again ([`topic_wait`]).
    topic_wait: Duration,
}

/// How long a topic the brokers do not list yet is waited for: librdkafka's own
/// `topic.metadata.propagation.max.ms` (default 30 s) from `kafka.properties`, so that one
/// setting decides when a missing topic is called missing, by librdkafka and by the relay's
/// partition choice alike.
fn topic_wait(cfg: &KafkaConfig) -> Duration {
    let ms = cfg
        .properties
        .get("topic.metadata.propagation.max.ms")
        .and_then(|v| v.expose().trim().parse::<u64>().ok())
        .unwrap_or(30_000);
    Duration::from_millis(ms)
}

impl KafkaSink {
    /// Builds the producer. Nothing is sent yet; see [`KafkaSink::check_reachable`].
    pub(crate) fn new(
        cfg: &KafkaConfig,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Delivered>), RelayError> {
        Self::with_in_flight(cfg, 1)
    }

    /// [`new`](Self::new) with `in_flight` requests per connection: 1 in the relay (see
    /// there); more only in the test that shows why.
    pub(super) fn with_in_flight(
        cfg: &KafkaConfig,
        in_flight: u32,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Delivered>), RelayError> {
        let (reports, rx) = mpsc::unbounded_channel();
        let mut c = client_config(cfg)?;
        c.set("enable.idempotence", "true")
            // A batch the broker refuses for good (too large, not authorised) must not leave a
            // gap that later batches of the same partition close: librdkafka then raises a
            // fatal error instead of writing them, and per-key order holds (K4).
            .set("enable.gapless.guarantee", "true")
            .set("acks", "all")
            // One request in flight per broker connection. With more, a partition's first
            // request that fails retriably (a new partition whose leader the broker shows
            // before it hosts it) while the next, already sent, is stored makes librdkafka
            // report the first one's records as delivered without sending them again
            // (`rd_kafka_dr_implicit_ack`), and the broker accepts the gap at a partition's
            // head: a silent loss (issue 40, item 6; sink test
            // a_refused_first_request_is_sent_again_before_the_next_one_is_stored).
            .set(
                "max.in.flight.requests.per.connection",
                in_flight.to_string(),
            )
            .set("partitioner", "murmur2_random")
            .set("linger.ms", cfg.linger_ms.to_string())
            .set("compression.type", &cfg.compression)
            .set("message.timeout.ms", cfg.message_timeout_ms.to_string())
            .set("client.id", "outbox-relay");
        let context = SinkContext {
            reports,
            last_error: Default::default(),
            refused_topic: Default::default(),
            checkpoint_failure: Default::default(),
            last_topic: Default::default(),
            unreported: Default::default(),
            aborting: Default::default(),
        };
        let ids = cfg.transactional_ids();
        let mut producers = Vec::new();
        for id in ids.iter().map(Some).chain(ids.is_empty().then_some(None)) {
            if let Some(id) = id {
                c.set("transactional.id", id);
            }
            let producer: BaseProducer<SinkContext> = c
                .create_with_context(context.clone())
                .map_err(Definite::kafka_setup_by)?;
            let polled = poller::Polled::new(producer).map_err(Definite::kafka_setup_by)?;
            producers.push(Arc::new(polled));
        }
        Ok((
            Self {
                producers,
                active: AtomicUsize::new(0),
                kick_wanted: AtomicBool::new(false),
                since_kick: AtomicU64::new(0),
                brokers: cfg.brokers.clone(),
                transactional_id: cfg.transactional_id.clone(),
                partitions: Default::default(),
                topic_wait: topic_wait(cfg),
            },
            rx,
        ))
    }

    /// The producer the open transaction (or every record) goes to.
    pub(super) fn producer(&self) -> &Handle {
        &self.producers[self.active.load(Ordering::Relaxed) % self.producers.len()]
    }

    pub(super) fn context(&self) -> &SinkContext {
        self.producer().context()
    }

    /// Fails when no broker answers a metadata request within `timeout`.
    pub(crate) async fn check_reachable(&self, timeout: Duration) -> Result<(), RelayError> {
        let producer = self.producer().clone();
        let res = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, timeout)
                .map(|m| m.brokers().len())
        })
        .await
        .map_err(Definite::kafka_setup_by)?;
        match res {
            Ok(n) if n > 0 => Ok(()),
            Ok(_) => Err(self.unreachable("the cluster reported no brokers".into())),
            Err(e) => {
                let last = self
                    .context()
                    .last_error
                    .lock()
                    .ok()
                    .and_then(|l| l.clone());
                let cause = match last {
                    Some(reason) => format!("{e}; last error: {reason}"),
                    None => e.to_string(),
                };
                Err(self.unreachable(format!(
                    "{cause}; check kafka.brokers, the network, and that kafka.security_protocol, \
                     kafka.sasl_mechanism, kafka.sasl_username, the SASL password and \
                     kafka.ssl_ca_location match the brokers' listener"
                )))
            }
        }
    }

    fn unreachable(&self, detail: String) -> RelayError {
        RelayError::from(Transient::KafkaUnreachable {
            brokers: self.brokers.clone(),
            detail,
        })
    }

    /// The partition `rec` lands on (see
    /// [`Sink::partition_of`](super::seam::Sink::partition_of)), from the topic's partition
    /// count read once per producer. A topic the broker is still creating is waited for, up to
    /// librdkafka's `topic.metadata.propagation.max.ms` ([`topic_wait`]); after that, `None`.
    pub(crate) async fn partition_of(&self, rec: &Record) -> Option<i32> {
        if rec.partition.is_some() {
            return rec.partition;
        }
        let known = self.partitions.lock().ok()?.get(&*rec.topic).copied();
        let count = match known {
            Some(n) => n,
            None => {
                let producer = self.producer().clone();
                let (topic, wait) = (rec.topic.clone(), self.topic_wait);
                let n =
                    tokio::task::spawn_blocking(move || partition_count(&producer, &topic, wait))
                        .await
                        .ok()
                        .flatten()?;
                if let Ok(mut p) = self.partitions.lock() {
                    p.insert(rec.topic.clone(), n);
                }
                n
            }
        };
        Some(relay_core::partition::of_key(&rec.key, count))
    }

    /// The fatal error librdkafka raised, if any (the producer must then be rebuilt).
    pub(crate) fn fatal_error(&self) -> Option<RelayError> {
        self.producers
            .iter()
            .find_map(|p| p.client().fatal_error())
            .map(|(code, reason)| match code {
                c if is_fenced(c) => Transient::fenced(format!("{code:?}: {reason}")).into(),
                _ => Transient::Delivery {
                    topic: "*".into(),
                    code: format!("{code:?}: {reason}"),
                    source: None,
                }
                .into(),
            })
    }
}

/// The partition count of `topic` from the brokers' metadata; a topic being created (no
/// partition yet) is asked again for up to `wait`.
fn partition_count(producer: &Handle, topic: &str, wait: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Ok(m) = producer
            .client()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            && let Some(t) = m.topics().iter().find(|t| t.name() == topic)
            && t.error().is_none()
            && !t.partitions().is_empty()
        {
            return i32::try_from(t.partitions().len()).ok();
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
