//! Records handed to librdkafka's local queue, in source order, and what the sink knows of
//! those in it: reports served, records not yet reported, the topic a transaction coordinator
//! refused.
//!
//! Invariant: a full local queue is waited out by retrying *the same* record; nothing later is
//! handed over before it.

use std::{sync::atomic::Ordering, time::Duration};

use outbox_service::Backoff;
use rdkafka::{
    error::{KafkaError, RDKafkaErrorCode},
    message::{Header, OwnedHeaders},
    producer::{BaseRecord, Producer},
};
use relay_core::route::Record;

use super::{Delivered, KafkaSink, Origin, Pending, delivery_error, failure_of};
use crate::error::RelayError;

impl KafkaSink {
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
    pub(super) async fn enqueue(
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
    /// [`SinkContext::unreported`](super::SinkContext::unreported)).
    pub(crate) fn unreported(&self) -> i64 {
        self.context().unreported.load(Ordering::Acquire)
    }

    /// Records handed to librdkafka whose reports have not been served yet.
    pub(crate) fn in_flight(&self) -> i32 {
        self.producers.iter().map(|p| p.in_flight_count()).sum()
    }
}
