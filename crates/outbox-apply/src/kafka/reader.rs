//! The Kafka side: one consumer in the group, on a thread of its own (librdkafka's rebalance
//! callback runs inside `poll`, and it reads positions from PostgreSQL before it assigns:
//! `rebalance`), that hands each record to its partition's task.
//!
//! Invariant: records reach their partition's task in the order the consumer returned them. A
//! partition whose task cannot take more records keeps them here, in order, and is paused once
//! it holds [`PENDING_MAX`] of them (memory stays bounded), then resumed when they are taken, so
//! a slow or halted partition never stops the others. While records wait here the consumer
//! polls every millisecond, not every 100: a wait in `poll` would leave the task idle (with
//! one partition, that capped a drain near 1,400 records/s).

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use outbox_service::Backoff;
use rdkafka::{
    ClientConfig, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaResult,
};
use tokio::{runtime::Handle, sync::mpsc};

use super::{broker::BrokerLog, rebalance::Ctx};
use crate::{
    config::ApplyConfig,
    error::ApplyError,
    partition::assignment::{Assignment, Tp},
    postgres::pool::Pool,
    record::Record,
};

/// Records a partition may hold here, beyond its task's queue, before it is paused.
const PENDING_MAX: usize = 1024;

/// The connection settings every Kafka client of the applier shares: the brokers and
/// `kafka.properties` (security).
pub(crate) fn client_config(cfg: &ApplyConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (key, value) in &cfg.kafka.properties {
        c.set(key, value.expose());
    }
    c.set("bootstrap.servers", &cfg.kafka.brokers);
    c
}

/// The consumer's thread: polls, routes records, pauses and resumes, reports positions.
pub(crate) struct Reader {
    consumer: BaseConsumer<Ctx>,
    pending: BTreeMap<Tp, VecDeque<Record>>,
    /// Partitions this reader paused (resumed only if in here).
    paused: std::collections::BTreeSet<Tp>,
    stopping: Arc<AtomicBool>,
}

impl Reader {
    pub(crate) fn new(
        cfg: Arc<ApplyConfig>,
        pool: Arc<Pool>,
        assignment: Arc<Assignment>,
        stopping: Arc<AtomicBool>,
    ) -> Result<Reader, ApplyError> {
        let k = &cfg.kafka;
        let mut c = client_config(&cfg);
        c.set("group.id", &k.group_id)
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("session.timeout.ms", k.session_timeout_ms.to_string())
            .set("statistics.interval.ms", "2000")
            .set(
                "topic.metadata.refresh.interval.ms",
                k.pattern_refresh_ms.to_string(),
            )
            .set(
                "client.id",
                format!("outbox-relay-apply-{}", cfg.apply.consumer),
            );
        let ctx = Ctx {
            rt: Handle::current(),
            cfg: cfg.clone(),
            pool,
            assignment,
            workers: Mutex::new(BTreeMap::new()),
            stopping: stopping.clone(),
            broker: BrokerLog::new(),
        };
        let consumer: BaseConsumer<Ctx> = c
            .create_with_context(ctx)
            .map_err(ApplyError::kafka("creating the Kafka consumer"))?;
        let topics: Vec<String> = match &k.topic_pattern {
            Some(p) if p.starts_with('^') => vec![p.clone()],
            Some(p) => vec![format!("^{p}")],
            None => k.topics.clone(),
        };
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&refs)
            .map_err(ApplyError::kafka(format!("subscribing to {topics:?}")))?;
        Ok(Reader {
            consumer,
            pending: BTreeMap::new(),
            paused: Default::default(),
            stopping,
        })
    }

    /// Runs until `stopping`; then stops the partition tasks and leaves the group.
    pub(crate) fn run(mut self) {
        let cfg = self.consumer.context().cfg.clone();
        let (id_header, type_header) = (
            cfg.apply.event_id_header.clone(),
            cfg.apply.event_type_header.clone(),
        );
        let mut last_report = Instant::now();
        // While records wait here: 1 ms after a flush that moved some, doubling up to 100 ms
        // while none move (a task retrying through a database outage).
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        backoff.saturate();
        while !self.stopping.load(Ordering::Relaxed) {
            let moved = self.flush_pending();
            if self.pending.is_empty() {
                backoff.saturate();
            } else if moved {
                backoff.reset();
            }
            match self.consumer.poll(backoff.next_wait()) {
                None => {}
                Some(Ok(m)) => {
                    self.consumer.context().broker.up();
                    let r = Record::from_message(&m, &id_header, &type_header);
                    drop(m);
                    self.route(r);
                }
                Some(Err(e)) => self
                    .consumer
                    .context()
                    .broker
                    .error(&e, "from the consumer's poll"),
            }
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                self.report();
            }
        }
        self.consumer.context().revoke_all();
        self.report();
        self.consumer.unsubscribe();
    }

    fn route(&mut self, r: Record) {
        let tp = (r.topic.clone(), r.partition);
        if let Some(q) = self.pending.get_mut(&tp) {
            q.push_back(r);
            if q.len() == PENDING_MAX {
                self.pause(&tp, true);
            }
            return;
        }
        let sent = {
            let workers = self.consumer.context().workers();
            match workers.get(&tp) {
                None => return,
                Some(w) => w.records.try_send(r),
            }
        };
        match sent {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(r)) => {
                self.pending.entry(tp).or_default().push_back(r);
            }
            // The task ended (halted): read nothing more of it.
            Err(mpsc::error::TrySendError::Closed(_)) => self.pause(&tp, true),
        }
    }

    /// Hands waiting records to their tasks as far as their queues take them; `true` if any
    /// moved.
    fn flush_pending(&mut self) -> bool {
        let mut moved = false;
        let tps: Vec<Tp> = self.pending.keys().cloned().collect();
        for tp in tps {
            let mut q = self.pending.remove(&tp).unwrap_or_default();
            let workers = self.consumer.context().workers();
            let Some(w) = workers.get(&tp) else { continue };
            while let Some(r) = q.pop_front() {
                match w.records.try_send(r) {
                    Ok(()) => moved = true,
                    Err(mpsc::error::TrySendError::Full(r)) => {
                        q.push_front(r);
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        q.clear();
                        break;
                    }
                }
            }
            let closed = w.records.is_closed();
            drop(workers);
            if q.is_empty() {
                if !closed {
                    self.pause(&tp, false);
                }
            } else {
                self.pending.insert(tp, q);
            }
        }
        moved
    }

    /// Pauses (always asked: the set may name a partition revoked and assigned again since,
    /// which the new assignment resumed) or resumes (only one this reader paused) `tp`.
    fn pause(&mut self, tp: &Tp, pause: bool) {
        if !pause && !self.paused.remove(tp) {
            return;
        }
        let mut l = TopicPartitionList::new();
        l.add_partition(&tp.0, tp.1);
        let _: KafkaResult<()> = if pause {
            self.paused.insert(tp.clone());
            self.consumer.pause(&l)
        } else {
            self.consumer.resume(&l)
        };
    }

    /// The advisory offset commit of the positions applied since the last report (for lag
    /// tools; never read back).
    fn report(&self) {
        let ctx = self.consumer.context();
        let moved: Vec<(Tp, i64)> = ctx
            .assignment
            .lock()
            .iter_mut()
            .filter_map(|(tp, p)| {
                std::mem::take(&mut p.unreported).then_some((tp.clone(), p.next?))
            })
            .collect();
        for (tp, next) in moved {
            let _ = self.consumer.store_offset(&tp.0, tp.1, next);
        }
    }
}
