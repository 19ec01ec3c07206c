//! Sending records read from the table: the relay's own producer (same settings, same record
//! conversion: `sink::KafkaSink`), records handed over one at a time in the order given.
//!
//! Invariant: per-partition order is the order given. Outside Kafka transactions the head rule
//! holds as in the pipeline (`relay_core::head`: a partition's first record of this producer
//! goes alone, on the partition chosen by the relay); any failed report stops the command
//! before it reports success (what was sent may be sent again: at-least-once). In exactly-once
//! mode every record goes inside Kafka transactions, committed every
//! [`RECORDS_PER_TRANSACTION`] records and at the end; a failure aborts the open one. `republish`
//! uses a transactional id of its own (`<kafka.transactional_id>.republish`, so a running relay
//! is not fenced); the heal uses the relay's own ids, which fences the stopped relay's producers
//! and aborts the transaction a failed relay left open (read-committed readers wait behind it).

use std::time::{Duration, Instant};

use relay_core::{Lsn, head::Heads, route::Record, watermark::TxId};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::{
    config::{Config, Delivery},
    error::{RelayError, Transient},
    sink::{Delivered, KafkaSink, NO_HEAD, Origin},
};

/// Records per Kafka transaction in exactly-once mode.
const RECORDS_PER_TRANSACTION: usize = 1_000;

/// Whose transactional ids the sender takes in exactly-once mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ids {
    /// `<kafka.transactional_id>.republish`: a running relay is not fenced.
    Own,
    /// The relay's: the heal, which runs while no relay streams.
    Relay,
}

/// The producer of `republish` and the heal.
pub(crate) struct Sender {
    sink: KafkaSink,
    reports: UnboundedReceiver<Delivered>,
    heads: Option<Heads>,
    born: Instant,
    in_flight: u64,
    in_transaction: usize,
    timeout: Duration,
    /// Records acknowledged (outside transactions) or committed (inside).
    pub(crate) delivered: u64,
}

impl Sender {
    /// Connects the producer; in exactly-once mode fences earlier producers of its ids and
    /// opens the first transaction.
    pub(crate) async fn new(cfg: &Config, ids: Ids) -> Result<Sender, RelayError> {
        let mut kafka = cfg.kafka.clone();
        let transactional = cfg.relay.delivery == Delivery::ExactlyOnce;
        kafka.transactional_id = match (&cfg.kafka.transactional_id, transactional, ids) {
            (Some(id), true, Ids::Own) => Some(format!("{id}.republish")),
            (Some(id), true, Ids::Relay) => Some(id.clone()),
            _ => None,
        };
        let transactional = kafka.transactional_id.is_some();
        let (sink, reports) = KafkaSink::new(&kafka)?;
        let timeout = Duration::from_millis(cfg.kafka.connect_timeout_ms.max(30_000));
        sink.check_reachable(Duration::from_millis(cfg.kafka.connect_timeout_ms))
            .await?;
        if transactional {
            sink.fence_and_begin(timeout).await?;
        }
        Ok(Sender {
            sink,
            reports,
            heads: (!transactional).then(Heads::new),
            born: Instant::now(),
            in_flight: 0,
            in_transaction: 0,
            timeout,
            delivered: 0,
        })
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// The partition `rec` lands on (its own, else its key's), if the topic's partition count
    /// can be read.
    pub(crate) async fn partition_of(&self, rec: &Record) -> Option<i32> {
        self.sink.partition_of(rec).await
    }

    /// Hands one record over, after the head it waits for (if any) was acknowledged.
    async fn send(&mut self, mut rec: Record) -> Result<(), RelayError> {
        let mut head = NO_HEAD;
        if self.heads.is_some() {
            let chosen = self.sink.partition_of(&rec).await;
            if chosen.is_some() {
                rec.partition = chosen;
            }
            head = chosen.unwrap_or(-1);
            while self.heads.as_ref().is_some_and(Heads::waiting) {
                self.next_report().await?;
            }
        }
        let origin = Origin {
            tx: TxId::OUTSIDE,
            commit_lsn: Lsn::ZERO,
            seq: 0,
            commit_time_unix_us: 0,
            head,
        };
        self.sink.send(&rec, origin).await?;
        self.in_flight += 1;
        let now = self.now_ms();
        if let Some(h) = self.heads.as_mut()
            && head != NO_HEAD
            && h.sent(&rec.topic, head, now)
        {
            self.sink.kick();
        }
        if self.heads.is_none() {
            self.in_transaction += 1;
            if self.in_transaction >= RECORDS_PER_TRANSACTION {
                self.commit().await?;
            }
        }
        Ok(())
    }

    /// Waits for one delivery report; a failed one is an error.
    async fn next_report(&mut self) -> Result<(), RelayError> {
        let d = tokio::time::timeout(self.timeout, self.reports.recv())
            .await
            .map_err(|_| {
                Transient::kafka_transaction(format!(
                    "Kafka acknowledged nothing for {} ms",
                    self.timeout.as_millis()
                ))
            })?
            .ok_or_else(|| Transient::kafka_transaction("the producer stopped".to_string()))?;
        self.in_flight = self.in_flight.saturating_sub(1);
        let now = self.now_ms();
        if let Some(h) = self.heads.as_mut()
            && d.origin.head != NO_HEAD
        {
            h.reported(&d.topic, d.origin.head, d.outcome.is_ok(), now);
        }
        match d.outcome {
            Ok(()) => {
                if self.heads.is_some() {
                    self.delivered += 1;
                }
                Ok(())
            }
            Err(e) => Err(e.error(&d.topic)),
        }
    }

    /// Commits the open Kafka transaction once all its records are acknowledged.
    async fn commit(&mut self) -> Result<(), RelayError> {
        while self.in_flight > 0 {
            self.next_report().await?;
        }
        self.sink.commit_and_begin(self.timeout).await?;
        self.delivered += self.in_transaction as u64;
        self.in_transaction = 0;
        Ok(())
    }

    /// Sends every record in order, then [`finish`](Self::finish)es; on a failure the open
    /// Kafka transaction is aborted at once (read-committed readers would wait behind it until
    /// `transaction.timeout.ms`). Returns how many records Kafka holds.
    pub(crate) async fn send_all(
        mut self,
        records: impl IntoIterator<Item = Record>,
    ) -> Result<u64, RelayError> {
        for rec in records {
            if let Err(e) = self.send(rec).await {
                if self.heads.is_none() {
                    let _ = self.sink.abort(self.timeout).await;
                }
                return Err(e);
            }
        }
        self.finish().await
    }

    /// Waits for every report (and commits what the open transaction holds): after `Ok`,
    /// Kafka holds every record sent.
    async fn finish(mut self) -> Result<u64, RelayError> {
        self.sink.kick();
        let result = async {
            if self.heads.is_none() {
                self.commit().await?;
                // The transaction commit_and_begin opened holds nothing.
                self.sink.abort(self.timeout).await?;
            }
            while self.in_flight > 0 {
                self.next_report().await?;
            }
            Ok::<_, RelayError>(())
        }
        .await;
        if result.is_err() && self.heads.is_none() {
            let _ = self.sink.abort(self.timeout).await;
        }
        result.map(|()| self.delivered)
    }
}
