//! An in-memory [`Sink`] for the loop tests on tokio's paused clock: it keeps every record
//! handed to it and reports each one only when the test says so (in any order, as Kafka
//! answers per partition), or at once in `auto_ack` mode. With transactions it keeps which
//! Kafka transaction each record went to and commits after a scripted delay with a scripted
//! outcome.
//!
//! It honours the seam's contract (crate::sink::Sink): one report per record handed,
//! `commit_start` refuses to start the next transaction while a report is outstanding.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use relay_core::route::Record;
use tokio::sync::mpsc;

use crate::{
    error::{RelayError, Transient},
    pipeline::reports::Reports,
    sink::{CommitEnded, Delivered, Failure, Origin, RunningCommit, Sink},
};

/// One record as the sink got it.
#[derive(Debug, Clone)]
pub(super) struct Sent {
    pub(super) topic: String,
    pub(super) key: Vec<u8>,
    pub(super) value: Vec<u8>,
    pub(super) origin: Origin,
    /// The Kafka transaction it went to (0 without transactions).
    pub(super) kafka_txn: u64,
}

/// What happened, in order: records handed, commits started and ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    Sent(u64),
    CommitStarted(u64),
    CommitEnded(u64, bool),
}

#[derive(Default)]
struct Inner {
    sent: Vec<Sent>,
    /// Records handed and not reported yet: origin, Kafka transaction, topic.
    pending: Vec<(Origin, u64, String)>,
    steps: Vec<Step>,
    kafka_txn: u64,
    /// Outcomes of the next commits (default: success).
    commit_outcomes: VecDeque<bool>,
    /// Kafka transactions with a record reported failed: as with a broker, they cannot commit.
    failed_txns: std::collections::HashSet<u64>,
    /// Checkpoints handed over, with the Kafka transaction each went to.
    checkpoints: Vec<(u64, Vec<u8>)>,
    /// The producer's fatal error, once the test raised it.
    fatal: Option<String>,
    /// A fresh producer: no partition acknowledged a record of it yet, so each partition's
    /// first record goes alone ([`MemorySink::at_heads`]). By default the loop tests start
    /// mid-stream, as they were written: every partition acknowledged records before.
    at_heads: bool,
    /// Values the producer refuses at once (larger than `message.max.bytes`), unless sent to
    /// this dead-letter topic ([`MemorySink::refusing_at_once`]).
    refused_at_once: Option<(std::collections::HashSet<Vec<u8>>, String)>,
}

pub(super) struct MemorySink {
    reports: mpsc::UnboundedSender<Delivered>,
    inner: Arc<Mutex<Inner>>,
    auto_ack: bool,
    pipelined: bool,
    commit_latency: Duration,
}

impl MemorySink {
    /// `auto_ack`: every record is acknowledged as it is handed. `pipelined`: commits run on
    /// while the next transaction fills (two producers), taking `commit_latency`.
    pub(super) fn new(
        auto_ack: bool,
        pipelined: bool,
        commit_latency: Duration,
    ) -> (Self, Reports) {
        let (reports, rx) = mpsc::unbounded_channel();
        let sink = Self {
            reports,
            inner: Arc::default(),
            auto_ack,
            pipelined,
            commit_latency,
        };
        (sink, Reports::new(rx))
    }

    /// A fresh producer: the head rule applies ([`crate::pipeline::head`]). Without it the
    /// loop starts mid-stream, every partition having acknowledged records of it before.
    pub(super) fn at_heads(self) -> Self {
        self.inner.lock().unwrap().at_heads = true;
        self
    }

    /// The producer refuses the records with these values at once, as librdkafka refuses one
    /// larger than `message.max.bytes` (`MSG_SIZE_TOO_LARGE`), except on `dead_letter_topic`.
    pub(super) fn refusing_at_once(
        self,
        values: std::collections::HashSet<Vec<u8>>,
        dead_letter_topic: &str,
    ) -> Self {
        self.inner.lock().unwrap().refused_at_once = Some((values, dead_letter_topic.to_string()));
        self
    }

    pub(super) fn is_at_heads(&self) -> bool {
        self.inner.lock().unwrap().at_heads
    }

    pub(super) fn sent(&self) -> Vec<Sent> {
        self.inner.lock().unwrap().sent.clone()
    }

    pub(super) fn steps(&self) -> Vec<Step> {
        self.inner.lock().unwrap().steps.clone()
    }

    /// The checkpoints handed over, in order.
    pub(super) fn checkpoints(&self) -> Vec<Vec<u8>> {
        let inner = self.inner.lock().unwrap();
        inner.checkpoints.iter().map(|(_, c)| c.clone()).collect()
    }

    /// Records handed and not reported yet.
    pub(super) fn pending(&self) -> usize {
        self.inner.lock().unwrap().pending.len()
    }

    /// A view of what the sink holds that outlives a borrow of it (for a model session).
    pub(super) fn view(&self) -> MemoryView {
        MemoryView(self.inner.clone())
    }

    /// The records handed and not reported yet, oldest first.
    pub(super) fn pending_origins(&self) -> Vec<Origin> {
        let inner = self.inner.lock().unwrap();
        inner.pending.iter().map(|(o, _, _)| *o).collect()
    }

    /// librdkafka raises a fatal error (as under the gapless guarantee when a batch is
    /// refused); the reports still come when the test sends them.
    pub(super) fn raise_fatal(&self, reason: &str) {
        self.inner.lock().unwrap().fatal = Some(reason.into());
    }

    /// The next commit fails (after its latency).
    pub(super) fn fail_next_commit(&self) {
        self.inner.lock().unwrap().commit_outcomes.push_back(false);
    }

    /// Reports the pending records `which` selects (by their position among the pending
    /// ones): acknowledged, or refused with `refused`.
    pub(super) fn report(&self, which: impl Fn(usize, &Origin) -> bool, refused: Option<Failure>) {
        let mut inner = self.inner.lock().unwrap();
        let pending = std::mem::take(&mut inner.pending);
        for (i, (origin, txn, topic)) in pending.into_iter().enumerate() {
            if !which(i, &origin) {
                inner.pending.push((origin, txn, topic));
                continue;
            }
            let outcome = match &refused {
                None => Ok(()),
                Some(failure) => {
                    inner.failed_txns.insert(txn);
                    Err(failure.clone())
                }
            };
            let _ = self.reports.send(Delivered {
                origin,
                bytes: 10,
                topic: topic.into(),
                outcome,
            });
        }
    }

    pub(super) fn ack_all(&self) {
        self.report(|_, _| true, None);
    }

    fn commit_outcome(&self) -> (u64, bool) {
        let mut inner = self.inner.lock().unwrap();
        let txn = inner.kafka_txn;
        inner.steps.push(Step::CommitStarted(txn));
        let ok =
            inner.commit_outcomes.pop_front().unwrap_or(true) && !inner.failed_txns.contains(&txn);
        (txn, ok)
    }

    fn ended(inner: &Mutex<Inner>, txn: u64, ok: bool) -> Result<(), RelayError> {
        inner.lock().unwrap().steps.push(Step::CommitEnded(txn, ok));
        if ok {
            Ok(())
        } else {
            Err(Transient::kafka_transaction("scripted commit failure").into())
        }
    }
}

/// The partitions of every topic of the memory sink.
pub(super) const MEMORY_PARTITIONS: i32 = 3;

impl Sink for MemorySink {
    async fn partition_of(&self, rec: &Record) -> Option<i32> {
        Some(
            rec.partition
                .unwrap_or_else(|| relay_core::partition::of_key(&rec.key, MEMORY_PARTITIONS)),
        )
    }
    async fn send(&self, rec: &Record, origin: Origin) -> Result<(), RelayError> {
        {
            let mut inner = self.inner.lock().unwrap();
            if let Some((values, dead_letter_topic)) = &inner.refused_at_once
                && *rec.topic != **dead_letter_topic
                && values.contains(rec.value.as_deref().unwrap_or_default())
            {
                return Err(crate::sink::delivery_error(
                    &rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge,
                    ),
                    &rec.topic,
                ));
            }
            let txn = inner.kafka_txn;
            inner.sent.push(Sent {
                topic: rec.topic.clone(),
                key: rec.key.to_vec(),
                value: rec.value.as_deref().unwrap_or_default().to_vec(),
                origin,
                kafka_txn: txn,
            });
            inner.steps.push(Step::Sent(origin.seq));
            inner.pending.push((origin, txn, rec.topic.clone()));
        }
        if self.auto_ack {
            self.ack_all();
        }
        Ok(())
    }
    async fn send_checkpoint(
        &self,
        _: &str,
        _: &str,
        value: &[u8],
        _: bool,
    ) -> Result<(), RelayError> {
        let mut inner = self.inner.lock().unwrap();
        let txn = inner.kafka_txn;
        inner.checkpoints.push((txn, value.to_vec()));
        Ok(())
    }
    fn checkpoint_failure(&self) -> Option<String> {
        None
    }
    fn kick(&self) {}
    fn try_kick(&self) {}
    async fn reports_served(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.pending() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }
    fn attribute(&self, d: Delivered) -> Delivered {
        d
    }
    fn in_flight(&self) -> i32 {
        self.pending() as i32
    }
    fn fatal_error(&self) -> Option<RelayError> {
        let reason = self.inner.lock().unwrap().fatal.clone()?;
        Some(
            Transient::Delivery {
                topic: "*".into(),
                code: reason,
                source: None,
            }
            .into(),
        )
    }
    async fn fence_and_begin(&self, _: Duration) -> Result<(), RelayError> {
        Ok(())
    }
    fn pipelines_commits(&self) -> bool {
        self.pipelined
    }
    async fn commit_and_begin(&self, timeout: Duration) -> Result<Duration, RelayError> {
        if !self.reports_served(timeout).await {
            return Err(Transient::kafka_transaction("records not acknowledged").into());
        }
        let (txn, ok) = self.commit_outcome();
        tokio::time::sleep(self.commit_latency).await;
        Self::ended(&self.inner, txn, ok)?;
        self.inner.lock().unwrap().kafka_txn += 1;
        Ok(Duration::ZERO)
    }
    async fn commit_start(
        &self,
        timeout: Duration,
    ) -> Result<(RunningCommit, Duration), RelayError> {
        if !self.reports_served(timeout).await {
            return Err(Transient::kafka_transaction("records not acknowledged").into());
        }
        let (txn, ok) = self.commit_outcome();
        self.inner.lock().unwrap().kafka_txn += 1;
        let (inner, latency) = (self.inner.clone(), self.commit_latency);
        let handle = tokio::spawn(async move {
            tokio::time::sleep(latency).await;
            Self::ended(&inner, txn, ok)
        });
        Ok((RunningCommit::new(handle), Duration::ZERO))
    }
    fn commit_settled(&self, ended: CommitEnded) -> Result<(), RelayError> {
        ended.into_result()
    }
    async fn abort(&self, _: Duration) -> Result<(), RelayError> {
        Ok(())
    }
}

/// What a [`MemorySink`] holds, seen from elsewhere (the simulation's PostgreSQL model checks
/// every confirmation against it).
#[derive(Clone)]
pub(super) struct MemoryView(Arc<Mutex<Inner>>);

impl MemoryView {
    /// The records and checkpoints of the Kafka transactions whose commit succeeded, in the
    /// order they were handed over; `uncertain`: also those of a commit that started and had
    /// not ended (its outcome is the coordinator's).
    pub(super) fn committed(&self, uncertain: bool) -> (Vec<Sent>, Vec<Vec<u8>>) {
        let inner = self.0.lock().unwrap();
        let ok: std::collections::HashSet<u64> = inner
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::CommitEnded(t, true) => Some(*t),
                Step::CommitStarted(t)
                    if uncertain
                        && !inner.failed_txns.contains(t)
                        && !inner
                            .steps
                            .iter()
                            .any(|e| matches!(e, Step::CommitEnded(x, _) if x == t)) =>
                {
                    Some(*t)
                }
                _ => None,
            })
            .collect();
        let records = inner
            .sent
            .iter()
            .filter(|r| ok.contains(&r.kafka_txn))
            .cloned()
            .collect();
        let checkpoints = inner
            .checkpoints
            .iter()
            .filter(|(t, _)| ok.contains(t))
            .map(|(_, v)| v.clone())
            .collect();
        (records, checkpoints)
    }
}
