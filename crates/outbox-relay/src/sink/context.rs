//! The producers' context: what librdkafka calls back on its own threads. Delivery reports
//! become [`Delivered`] values on the pipeline's channel; client errors, a topic the transaction
//! coordinator refused and a failed checkpoint are kept for the sink to read.
//!
//! Invariant: the relay's count of unreported records is lowered before a report is sent on
//! the channel, so whoever reads a report sees the count without it.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, AtomicI64, Ordering},
};

use rdkafka::{
    ClientContext,
    config::RDKafkaLogLevel,
    error::{KafkaError, RDKafkaErrorCode},
    producer::{DeliveryResult, ProducerContext},
};
use tokio::sync::mpsc;

use super::{Delivered, IMPLICIT_ACK, Pending, failure_of};
use crate::telemetry::events::{KAFKA_CLIENT_ERROR, KAFKA_TRANSACTION_ABORT_FAILED};

type Shared = Arc<Mutex<Option<String>>>;

/// One per producer; with two producers (`kafka.transaction_producers`) both share the
/// channel and the slots below, so the sink reads them without asking which one wrote.
#[derive(Clone)]
pub(crate) struct SinkContext {
    pub(super) reports: mpsc::UnboundedSender<Delivered>,
    /// The last client-level error (authentication, TLS handshake, ...), for the startup check.
    pub(super) last_error: Shared,
    /// With transactions: a topic the transaction coordinator refused to add to the
    /// transaction because the principal may not write it
    /// ([`KafkaSink::refused_topic`](super::KafkaSink::refused_topic)).
    pub(super) refused_topic: Shared,
    /// The error of the last checkpoint Kafka did not take, until read.
    pub(super) checkpoint_failure: Shared,
    /// The topic of the last delivery report, shared by the next ones of the same topic (no
    /// copy of the name per record).
    pub(super) last_topic: Arc<Mutex<Option<Arc<str>>>>,
    /// Records (checkpoints included) enqueued and not yet reported, counted by the relay: the
    /// report callback lowers it before the report is sent on the channel, so whoever reads a
    /// report sees the count without it. librdkafka's own count (`in_flight`) drops only after
    /// the callbacks of a whole batch returned (seen stale in `sink::tests`), and a kick that
    /// read it on the last report of a batch could find it still up and not come at all (the
    /// records then waited out `linger.ms`). Signed:
    /// a report may come before the increment is seen (see `KafkaSink::enqueue`).
    pub(super) unreported: Arc<AtomicI64>,
    /// The relay is aborting the open Kafka transaction ([`KafkaSink::abort`](super::KafkaSink::abort)),
    /// after its pipeline failed.
    pub(super) aborting: Arc<AtomicBool>,
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
pub(super) fn refused_topic_in(log_message: &str) -> Option<&str> {
    if !log_message.contains("Topic authorization failed") {
        return None;
    }
    let (_, rest) = log_message.split_once("Failed to add partition \"")?;
    rest.split_once('"').map(|(topic, _)| topic)
}

/// librdkafka's fatal error when the broker refuses the relay's own abort (EndTxn answered
/// INVALID_TXN_STATE): librdkafka 2.x can send the abort of a transaction whose partitions the
/// coordinator has not registered yet, right after its first records (confluentinc/librdkafka
/// issue 4849, open), and calls the answer fatal. Seen when a source's PostgreSQL connection
/// dropped 0.4 s after it began streaming (clean-clone CI of ba52eba, fenced pass,
/// `sources::network`). The relay already stopped that pipeline and confirmed nothing of the
/// transaction; a fatal producer is rebuilt at the next start (`KafkaSink::fatal_error`). So it
/// is a warning, not an error.
pub(super) fn own_abort_failed(fac: &str, log_message: &str) -> bool {
    matches!(fac, "TXNERR" | "FATAL") && log_message.contains("Failed to end transaction")
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if self.aborting.load(Ordering::Acquire) && own_abort_failed(fac, log_message) {
            tracing::warn!(
                facility = fac,
                librdkafka = log_message,
                "{KAFKA_TRANSACTION_ABORT_FAILED}: the broker refused the relay's abort of a \
                 failed pipeline's transaction; nothing of it was confirmed, and the next start \
                 builds a new producer"
            );
            return;
        }
        if fac == "ADDPARTS"
            && let Some(topic) = refused_topic_in(log_message)
            && let Ok(mut refused) = self.refused_topic.lock()
        {
            refused.get_or_insert_with(|| topic.to_string());
        }
        outbox_service::kafka_log::log_librdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // A producer dropped with requests in flight (a restart): not worth a warning, nor the
        // cause of anything (`outbox_service::kafka_log::from_own_purge`).
        if outbox_service::kafka_log::from_own_purge(reason) {
            tracing::debug!(error = %error, reason, "{KAFKA_CLIENT_ERROR}");
            return;
        }
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
