//! The Kafka side: an idempotent producer fed strictly in source order, whose delivery reports
//! come back as values on a channel.
//!
//! Ordering rules (correctness notes K1-K6): `enable.idempotence=true` (acks=all, one request
//! in flight per connection, infinite retries, FIFO) keeps per-partition order across retries
//! and leaves no gap at a partition's head (see [`KafkaSink::new`]);
//! records are enqueued one at a time in source order, and a full local queue is waited out by
//! retrying *the same* record before anything later; `murmur2_random` makes key → partition
//! agree with Java clients. A delivery error is never skipped: the pipeline stops confirming
//! and restarts from the last confirmed LSN.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use outbox_service::Backoff;
use rdkafka::{
    ClientConfig, ClientContext,
    config::RDKafkaLogLevel,
    error::{KafkaError, RDKafkaErrorCode},
    message::{Header, OwnedHeaders},
    producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext},
};
use relay_core::{Lsn, route::Record, watermark::TxId};
use tokio::sync::mpsc;

use crate::{
    config::KafkaConfig,
    error::{Definite, RelayError, Transient},
    telemetry::events::KAFKA_CLIENT_ERROR,
};

/// Where a record comes from: its transaction in the tracker and its source position.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub(crate) tx: TxId,
    pub(crate) commit_lsn: Lsn,
    pub(crate) seq: u64,
    pub(crate) commit_time_unix_us: i64,
    /// The partition the pipeline's head rule counts it under ([`relay_core::head`]; -1: the
    /// topic's partition not known), or [`NO_HEAD`] (not counted: in Kafka transactions, or a
    /// dead-letter record in a refused one's place).
    pub(crate) head: i32,
}

/// [`Origin::head`] of a record the head rule does not count.
pub(crate) const NO_HEAD: i32 = i32::MIN;

/// A delivery report, in whatever order Kafka answers.
#[derive(Debug)]
pub(crate) struct Delivered {
    pub(crate) origin: Origin,
    pub(crate) bytes: u64,
    pub(crate) topic: Arc<str>,
    /// The seam's own outcome ([`Failure`]): the client's error is mapped at the edge
    /// ([`failure_of`]).
    pub(crate) outcome: Result<(), Failure>,
}

impl Delivered {
    /// Purged by librdkafka (a failed transaction, a producer being dropped), not refused.
    pub(crate) fn is_purged(&self) -> bool {
        self.outcome.as_ref().is_err_and(Failure::is_purged)
    }
}

/// What travels with each record through librdkafka: an event's origin, or nothing for a
/// checkpoint (whose outcome the sink keeps itself: [`KafkaSink::checkpoint_failure`]).
pub(crate) struct Pending {
    origin: Option<Origin>,
    bytes: u64,
}

type Shared = Arc<Mutex<Option<String>>>;

/// One per producer; with two producers (`kafka.transaction_producers`) both share the
/// channel and the slots below, so the sink reads them without asking which one wrote.
#[derive(Clone)]
pub(crate) struct SinkContext {
    reports: mpsc::UnboundedSender<Delivered>,
    /// The last client-level error (authentication, TLS handshake, ...), for the startup check.
    last_error: Shared,
    /// With transactions: a topic the transaction coordinator refused to add to the
    /// transaction because the principal may not write it ([`KafkaSink::refused_topic`]).
    refused_topic: Shared,
    /// The error of the last checkpoint Kafka did not take, until read.
    checkpoint_failure: Shared,
    /// The topic of the last delivery report, shared by the next ones of the same topic (no
    /// copy of the name per record).
    last_topic: Arc<Mutex<Option<Arc<str>>>>,
    /// Records (checkpoints included) enqueued and not yet reported, counted by the relay: the
    /// report callback lowers it before the report is sent on the channel, so whoever reads a
    /// report sees the count without it. librdkafka's own count (`in_flight`) drops only after
    /// the callbacks of a whole batch returned (seen stale in `sink::tests`), and a kick that
    /// read it on the last report of a batch could find it still up and not come at all (the
    /// records then waited out `linger.ms`). Signed:
    /// a report may come before the increment is seen (see [`KafkaSink::enqueue`]).
    unreported: Arc<AtomicI64>,
}

impl SinkContext {
    /// `topic` as shared text: the last report's if it is the same topic.
    fn topic(&self, topic: &str) -> Arc<str> {
        let Ok(mut last) = self.last_topic.lock() else {
            return topic.into();
        };
        match &*last {
            Some(t) if **t == *topic => t.clone(),
            _ => last.insert(topic.into()).clone(),
        }
    }
}

/// The topic in librdkafka's `Failed to add partition "<topic>" [<p>] to transaction: Broker:
/// Topic authorization failed` (facility ADDPARTS); the only place that names it.
fn refused_topic_in(log_message: &str) -> Option<&str> {
    if !log_message.contains("Topic authorization failed") {
        return None;
    }
    let (_, rest) = log_message.split_once("Failed to add partition \"")?;
    rest.split_once('"').map(|(topic, _)| topic)
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac == "ADDPARTS"
            && let Some(topic) = refused_topic_in(log_message)
            && let Ok(mut refused) = self.refused_topic.lock()
        {
            refused.get_or_insert_with(|| topic.to_string());
        }
        outbox_service::kafka_log::log_librdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Broker-down and similar are retried by librdkafka; deliveries report what matters.
        tracing::warn!(error = %error, reason, "{KAFKA_CLIENT_ERROR}");
        // "n/m brokers are down" follows every failed connection: keep the cause before it.
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::AllBrokersDown)
            && let Ok(mut last) = self.last_error.lock()
        {
            *last = Some(reason.to_string());
        }
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, p: Self::DeliveryOpaque) {
        self.unreported.fetch_sub(1, Ordering::AcqRel);
        let Some(origin) = p.origin else {
            if let Err((e, _)) = result
                && let Ok(mut f) = self.checkpoint_failure.lock()
            {
                *f = Some(e.to_string());
            }
            return;
        };
        let (outcome, topic) = match result {
            // A report without an offset is not the broker's acknowledgement of this record:
            // librdkafka acknowledges records "implicitly" when a later request succeeded
            // (and after a duplicate answer). One request in flight rules the first out, so
            // this should never happen; if it does, the record is taken as failed (a
            // restart from the confirmed position), never as delivered.
            Ok(msg) if rdkafka::Message::offset(msg) < 0 => (
                Err(failure_of(&KafkaError::MessageProduction(IMPLICIT_ACK))),
                self.topic(rdkafka::Message::topic(msg)),
            ),
            Ok(msg) => (Ok(()), self.topic(rdkafka::Message::topic(msg))),
            Err((e, msg)) => (Err(failure_of(e)), self.topic(rdkafka::Message::topic(msg))),
        };
        // The receiver is gone only when the pipeline is being torn down.
        let _ = self.reports.send(Delivered {
            origin,
            bytes: p.bytes,
            topic,
            outcome,
        });
    }
}

type Handle = Arc<poller::Polled<SinkContext>>;

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
    producers: Vec<Handle>,
    /// Index in `producers` of the one the open transaction (or every record, without
    /// transactions) goes to.
    active: AtomicUsize,
    /// The stream went quiet and what it produced is waiting for earlier records' reports
    /// before it is kicked out ([`try_kick`](Self::try_kick)).
    kick_wanted: AtomicBool,
    /// Records handed to librdkafka since the last kick.
    since_kick: AtomicU64,
    brokers: String,
    transactional_id: Option<String>,
    /// Partition counts of the topics records went to ([`KafkaSink::partition_of`]).
    partitions: Mutex<std::collections::HashMap<String, i32>>,
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
    fn with_in_flight(
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
            },
            rx,
        ))
    }

    /// The producer the open transaction (or every record) goes to.
    fn producer(&self) -> &Handle {
        &self.producers[self.active.load(Ordering::Relaxed) % self.producers.len()]
    }

    fn context(&self) -> &SinkContext {
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

    /// The partition `rec` lands on (see [`Sink::partition_of`](seam::Sink::partition_of)),
    /// from the topic's partition count read once per producer. A topic the broker is still
    /// creating is waited for, up to 30 s (librdkafka's `topic.metadata.propagation.max.ms`);
    /// after that, `None`.
    pub(crate) async fn partition_of(&self, rec: &Record) -> Option<i32> {
        if rec.partition.is_some() {
            return rec.partition;
        }
        let known = self.partitions.lock().ok()?.get(&*rec.topic).copied();
        let count = match known {
            Some(n) => n,
            None => {
                let producer = self.producer().clone();
                let topic = rec.topic.clone();
                let n = tokio::task::spawn_blocking(move || partition_count(&producer, &topic))
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

    /// Enqueues one record. Waits (without reordering) while the local queue is full.
    pub(crate) async fn send(&self, rec: &Record, origin: Origin) -> Result<(), RelayError> {
        let bytes = rec.bytes();
        let mut headers = OwnedHeaders::new_with_capacity(rec.headers.len());
        for (k, v) in &rec.headers {
            headers = headers.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
        let mut record = BaseRecord::with_opaque_to(
            &rec.topic,
            Box::new(Pending {
                origin: Some(origin),
                bytes,
            }),
        )
        .key(&rec.key[..])
        .headers(headers);
        if let Some(v) = &rec.value {
            record = record.payload(&v[..]);
        }
        if let Some(p) = rec.partition {
            record = record.partition(p);
        }
        if let Some(t) = rec.timestamp_ms {
            record = record.timestamp(t);
        }
        self.enqueue(record, true).await
    }

    /// Hands `record` to librdkafka. While its local queue is full: with `wait`, retries the
    /// same record (nothing later may pass it); without, gives up at once.
    async fn enqueue(
        &self,
        mut record: BaseRecord<'_, [u8], [u8], Box<Pending>>,
        wait: bool,
    ) -> Result<(), RelayError> {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
        let unreported = &self.context().unreported;
        loop {
            // Counted before the hand-off: its report may come at once, from another thread.
            unreported.fetch_add(1, Ordering::AcqRel);
            match self.producer().send(record) {
                Ok(()) => {
                    self.since_kick.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) if wait => {
                    unreported.fetch_sub(1, Ordering::AcqRel);
                    record = r;
                    tokio::time::sleep(backoff.next_wait()).await;
                }
                Err((e, r)) => {
                    unreported.fetch_sub(1, Ordering::AcqRel);
                    return Err(delivery_error(&e, r.topic));
                }
            }
        }
    }

    /// Enqueues a checkpoint record (in the open Kafka transaction, if any). Its outcome is not
    /// reported on the channel: a failed one fails the transaction's commit, and outside
    /// transactions [`checkpoint_failure`](Self::checkpoint_failure) says so. `wait`: while
    /// the local queue is full, wait for room (a transaction needs it); else give up at once.
    pub(crate) async fn send_checkpoint(
        &self,
        topic: &str,
        key: &str,
        value: &[u8],
        wait: bool,
    ) -> Result<(), RelayError> {
        let record = BaseRecord::with_opaque_to(
            topic,
            Box::new(Pending {
                origin: None,
                bytes: 0,
            }),
        )
        .key(key.as_bytes())
        .payload(value);
        self.enqueue(record, wait).await
    }

    /// The error of a checkpoint Kafka did not take since the last call.
    pub(crate) fn checkpoint_failure(&self) -> Option<String> {
        self.context()
            .checkpoint_failure
            .lock()
            .ok()
            .and_then(|mut f| f.take())
    }

    /// Sends everything queued now, without waiting out `linger.ms`, and waits (at most
    /// `timeout`) until librdkafka served the report of every record handed to it: then the
    /// channel holds every report. This is librdkafka's own flush (`rd_kafka_flush`), which
    /// treats the linger as elapsed while it runs; rdkafka's `flush` wrapper instead polls in
    /// 100 ms steps, which the producer's own polling thread turns into 100 ms waits. Returns
    /// whether every report was served (false: `timeout` ran out, Kafka may be away).
    pub(crate) async fn reports_served(&self, timeout: Duration) -> bool {
        let producers = self.producers.clone();
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        tokio::task::spawn_blocking(move || {
            producers.iter().all(|producer| {
                // SAFETY: the handle is the producer's own and stays valid while `producer`
                // (an `Arc` moved into this closure) lives; librdkafka's flush is thread-safe
                // and only serves delivery reports, which the context sends on a channel. The
                // producer that is not active has nothing queued: its flush returns at once.
                let left = unsafe {
                    rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), ms)
                };
                left == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            })
        })
        .await
        .unwrap_or(false)
    }

    /// With transactions: the topic whose partition the transaction coordinator refused
    /// (authorisation). librdkafka then fails the transaction and purges every record, so the
    /// reports alone do not say which record was at fault.
    pub(crate) fn refused_topic(&self) -> Option<String> {
        self.context()
            .refused_topic
            .lock()
            .ok()
            .and_then(|t| t.clone())
    }

    /// With transactions: the report of a purged record of the topic the coordinator refused
    /// gets that refusal as its outcome ([`refused_topic`](Self::refused_topic)).
    pub(crate) fn attribute(&self, mut d: Delivered) -> Delivered {
        if self.transactional_id.is_some()
            && d.is_purged()
            && self.refused_topic().as_deref() == Some(&*d.topic)
        {
            d.outcome = Err(failure_of(&KafkaError::MessageProduction(
                RDKafkaErrorCode::TopicAuthorizationFailed,
            )));
        }
        d
    }

    /// Records the relay enqueued whose reports were not called back yet (its own count, see
    /// [`SinkContext::unreported`]).
    pub(crate) fn unreported(&self) -> i64 {
        self.context().unreported.load(Ordering::Acquire)
    }

    /// Records handed to librdkafka whose reports have not been served yet.
    pub(crate) fn in_flight(&self) -> i32 {
        self.producers.iter().map(|p| p.in_flight_count()).sum()
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

/// What every Kafka client of the relay shares (producer, checkpoint reader, admin): the
/// brokers, the extra properties and the security options.
pub(crate) fn client_config(cfg: &KafkaConfig) -> Result<ClientConfig, RelayError> {
    let mut c = ClientConfig::new();
    for (k, v) in &cfg.properties {
        c.set(k, v.expose());
    }
    security_properties(cfg, &mut c)?;
    c.set("bootstrap.servers", &cfg.brokers);
    // librdkafka writes the contexts named in `debug` at its debug level, which rdkafka
    // filters out unless told otherwise: asking for `debug` means wanting to see it.
    if cfg.properties.contains_key("debug") {
        c.set_log_level(RDKafkaLogLevel::Debug);
    }
    Ok(c)
}

/// The first-class security options as librdkafka properties (validated by the config).
fn security_properties(cfg: &KafkaConfig, c: &mut ClientConfig) -> Result<(), RelayError> {
    c.set("security.protocol", cfg.security_protocol.as_librdkafka());
    if let Some(m) = cfg.sasl_mechanism {
        c.set("sasl.mechanisms", m.as_librdkafka());
    }
    if let Some(u) = &cfg.sasl_username {
        c.set("sasl.username", u);
    }
    if let Some(pw) = cfg.sasl_password()? {
        c.set("sasl.password", pw.expose());
    }
    if let Some(ca) = &cfg.ssl_ca_location {
        c.set("ssl.ca.location", ca.to_string_lossy());
    }
    Ok(())
}

/// The partition count of `topic` from the brokers' metadata; a topic being created (no
/// partition yet) is asked again for up to 30 s.
fn partition_count(producer: &Handle, topic: &str) -> Option<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
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

/// The outcome given to a success report that carries no offset ([`SinkContext`]'s delivery).
const IMPLICIT_ACK: RDKafkaErrorCode = RDKafkaErrorCode::Inconsistent;

/// The seam's failure for the client's error `e` (the Kafka edge's one mapping): errors
/// retrying cannot fix are refusals with a hint for the operator.
pub(crate) fn failure_of(e: &KafkaError) -> Failure {
    let code = e.rdkafka_error_code();
    let kind = match code {
        Some(c) if is_fenced(c) => Failed::Fenced,
        Some(RDKafkaErrorCode::MessageSizeTooLarge)
        | Some(RDKafkaErrorCode::InvalidMessageSize) => Failed::Refused {
            hint: "the event is larger than the topic's max.message.bytes or the producer's message.max.bytes; raise both (kafka.properties.\"message.max.bytes\") or shrink the payload",
        },
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => Failed::Refused {
            hint: "the relay's Kafka principal may not write to this topic; grant WRITE on it",
        },
        Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => Failed::Refused {
            hint: "the relay's Kafka principal lacks IDEMPOTENT_WRITE on the cluster; grant it",
        },
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) | Some(RDKafkaErrorCode::UnknownTopic) => {
            Failed::Refused {
                hint: "the topic does not exist and the brokers do not create topics automatically; create it",
            }
        }
        Some(RDKafkaErrorCode::InvalidRecord) | Some(RDKafkaErrorCode::InvalidMessage) => {
            Failed::Refused {
                hint: "the broker rejected the record as invalid",
            }
        }
        Some(RDKafkaErrorCode::InvalidTopic) => Failed::Refused {
            hint: "the topic name is not valid for this cluster",
        },
        Some(IMPLICIT_ACK) => Failed::Unacknowledged,
        Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight) => Failed::Purged,
        _ => Failed::Transient,
    };
    Failure::new(kind, e.clone())
}

/// Classifies a failed delivery ([`failure_of`], [`Failure::error`]): errors retrying cannot
/// fix stop the relay with a hint (the caller names the change: [`RelayError::refusing`]).
pub(crate) fn delivery_error(e: &KafkaError, topic: &str) -> RelayError {
    failure_of(e).error(topic)
}

pub(crate) mod budget;
pub(crate) mod checkpoint_topic;
mod kick;
mod kicker;
mod outcome;
mod poller;
mod seam;
#[cfg(test)]
mod tests;
mod transaction;

pub(crate) use outcome::{Failed, Failure};
pub(crate) use seam::Sink;

use transaction::is_fenced;
pub(crate) use transaction::{CommitEnded, RunningCommit};
