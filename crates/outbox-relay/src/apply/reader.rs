//! The Kafka side: one consumer in the group, on a thread of its own (librdkafka's rebalance
//! callback runs inside `poll`, and it reads positions from PostgreSQL before it assigns), that
//! hands each record to its partition's task.
//!
//! Invariant: a partition is assigned at the position stored in the offsets table (or where
//! `kafka.start` says when there is none), never at Kafka's committed offset, and never at a
//! position outside the log (that partition is halted with the reason instead). A partition
//! whose task cannot take more records is paused, its records kept in order, and resumed when
//! they are taken, so a slow or halted partition never stops the others.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, ClientContext, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
    error::KafkaResult,
    types::RDKafkaRespErr,
};
use relay_core::apply::position::{self, Cursor, Start};
use tokio::{
    runtime::Handle,
    sync::{mpsc, watch},
    task::JoinHandle,
};

use super::{
    assignment::{Assignment, Tp},
    error::ApplyError,
    partition::{Exit, PartitionTask, PoolStore},
    pool::Pool,
    record::Record,
};
use crate::{
    config::ApplyConfig,
    events::{
        APPLY_KAFKA_ERROR, APPLY_PARTITIONS_ASSIGNED, APPLY_PARTITIONS_REVOKED,
        APPLY_POSITION_OUT_OF_LOG,
    },
};

/// Records buffered per partition between the consumer's thread and the partition's task.
const QUEUE: usize = 1024;

struct Worker {
    records: mpsc::Sender<Record>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Exit>,
}

/// The consumer's context: the rebalance callback and what it needs.
pub(crate) struct Ctx {
    rt: Handle,
    cfg: Arc<ApplyConfig>,
    pool: Arc<Pool>,
    assignment: Arc<Assignment>,
    workers: Mutex<BTreeMap<Tp, Worker>>,
    stopping: Arc<AtomicBool>,
}

impl ClientContext for Ctx {
    /// librdkafka's statistics (every `statistics.interval.ms`): the log end of each assigned
    /// partition (the last stable offset, what `read_committed` can read), for the lag, without
    /// a broker request (those queue behind the consumer's long fetches).
    fn stats(&self, s: rdkafka::Statistics) {
        for (topic, t) in &s.topics {
            for (partition, p) in &t.partitions {
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                if *partition >= 0 && end >= 0 {
                    self.assignment.log_end(&(topic.clone(), *partition), end);
                }
            }
        }
    }
}

impl ConsumerContext for Ctx {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.revoke_all();
                let _ = consumer.unassign();
            }
            other => {
                tracing::warn!(error = ?other, "{APPLY_KAFKA_ERROR}: rebalance failed; unassigning");
                self.revoke_all();
                let _ = consumer.unassign();
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {}
}

impl Ctx {
    fn workers(&self) -> std::sync::MutexGuard<'_, BTreeMap<Tp, Worker>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the stored positions, checks them against the log, assigns, starts the tasks.
    fn assign(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let tps: Vec<Tp> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let stored = self.read_positions(&tps);
        let mut halted = Vec::new();
        let mut out = TopicPartitionList::new();
        for tp in &tps {
            let stored = stored.get(tp).copied().flatten();
            let start = match consumer.fetch_watermarks(&tp.0, tp.1, Duration::from_secs(10)) {
                Ok((low, high)) => position::start(stored, low, high, self.cfg.kafka.start.into()),
                // The log's bounds unknown: the stored position is used as it is
                // (auto.offset.reset = error still refuses a position outside the log).
                Err(_) => position::start(stored, i64::MIN, i64::MAX, self.cfg.kafka.start.into()),
            };
            let offset = match start {
                Ok(Start::At(n)) => Offset::Offset(n),
                Ok(Start::Earliest) => Offset::Beginning,
                Ok(Start::Latest) => Offset::End,
                Err(e) => {
                    tracing::error!(topic = %tp.0, partition = tp.1, reason = %e, "{APPLY_POSITION_OUT_OF_LOG}: the partition is not applied");
                    halted.push((tp.clone(), e.to_string()));
                    Offset::Offset(stored.unwrap_or(0))
                }
            };
            let _ = out.add_partition_offset(&tp.0, tp.1, offset);
        }
        if let Err(e) = consumer.assign(&out) {
            tracing::error!(error = %e, "{APPLY_KAFKA_ERROR}: assign failed");
            return;
        }
        let mut paused = TopicPartitionList::new();
        for (tp, _) in &halted {
            paused.add_partition(&tp.0, tp.1);
        }
        if paused.count() > 0 {
            let _ = consumer.pause(&paused);
        }
        let mut workers = self.workers();
        for tp in &tps {
            let next = stored.get(tp).copied().flatten();
            if let Some((_, why)) = halted.iter().find(|(h, _)| h == tp) {
                self.assignment.assigned(tp, next, Some(why.clone()));
                continue;
            }
            self.assignment.assigned(tp, next, None);
            let (tx, rx) = mpsc::channel(QUEUE);
            let (stop_tx, stop_rx) = watch::channel(false);
            let task = PartitionTask {
                tp: tp.clone(),
                records: rx,
                cursor: Cursor::at(next),
                cfg: self.cfg.clone(),
                store: Arc::new(PoolStore {
                    pool: self.pool.clone(),
                    cfg: self.cfg.clone(),
                }),
                assignment: self.assignment.clone(),
                stop: stop_rx,
            };
            let _guard = self.rt.enter();
            let task = self.rt.spawn(task.run());
            workers.insert(
                tp.clone(),
                Worker {
                    records: tx,
                    stop: stop_tx,
                    task,
                },
            );
        }
        self.assignment.joined();
        tracing::info!(partitions = ?tps, "{APPLY_PARTITIONS_ASSIGNED}");
    }

    /// The stored positions of `tps`, retried until the database answers (or a stop).
    fn read_positions(&self, tps: &[Tp]) -> BTreeMap<Tp, Option<i64>> {
        let mut wait = Duration::from_millis(self.cfg.apply.retry_backoff_initial_ms.max(1));
        loop {
            let got = self.rt.block_on(async {
                let conn = self.pool.get().await;
                let mut out = BTreeMap::new();
                for tp in tps {
                    match conn.position(&tp.0, tp.1, false).await {
                        Ok(p) => {
                            out.insert(tp.clone(), p);
                        }
                        Err(e) => {
                            conn.discard();
                            return Err(e);
                        }
                    }
                }
                Ok(out)
            });
            match got {
                Ok(p) => return p,
                Err(e) if !self.stopping.load(Ordering::Relaxed) => {
                    tracing::warn!(error = %crate::pg::describe_pg(&e), "{APPLY_KAFKA_ERROR}: cannot read the stored positions; retrying");
                    std::thread::sleep(wait);
                    wait =
                        (wait * 2).min(Duration::from_millis(self.cfg.apply.retry_backoff_max_ms));
                }
                Err(_) => return BTreeMap::new(),
            }
        }
    }

    /// Stops every partition task after its current transaction and waits for them (bounded by
    /// `apply.shutdown_timeout_ms`; a task still running then is abandoned: its transaction
    /// rolls back when its connection goes, and the claim makes a later retry harmless).
    fn revoke_all(&self) {
        let workers = std::mem::take(&mut *self.workers());
        if workers.is_empty() {
            return;
        }
        let tps: Vec<Tp> = workers.keys().cloned().collect();
        let mut tasks = Vec::new();
        for (tp, w) in workers {
            let _ = w.stop.send(true);
            drop(w.records);
            tasks.push(w.task);
            self.assignment.revoked(&tp);
        }
        let timeout = self.cfg.shutdown_timeout();
        self.rt.block_on(async {
            let all = futures::future::join_all(tasks.iter_mut());
            if tokio::time::timeout(timeout, all).await.is_err() {
                for t in &tasks {
                    t.abort();
                }
            }
        });
        tracing::info!(partitions = ?tps, "{APPLY_PARTITIONS_REVOKED}");
    }
}

/// The connection settings every Kafka client of the applier shares: the brokers and
/// `kafka.properties` (security).
pub(super) fn client_config(cfg: &ApplyConfig) -> ClientConfig {
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
        while !self.stopping.load(Ordering::Relaxed) {
            self.flush_pending();
            match self.consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => {
                    let r = Record::from_message(&m, &id_header, &type_header);
                    drop(m);
                    self.route(r);
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "{APPLY_KAFKA_ERROR}: the consumer reported an error; it reconnects by itself");
                }
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
                self.pause(&tp, true);
                self.pending.entry(tp).or_default().push_back(r);
            }
            // The task ended (halted): read nothing more of it.
            Err(mpsc::error::TrySendError::Closed(_)) => self.pause(&tp, true),
        }
    }

    fn flush_pending(&mut self) {
        let tps: Vec<Tp> = self.pending.keys().cloned().collect();
        for tp in tps {
            let mut q = self.pending.remove(&tp).unwrap_or_default();
            let workers = self.consumer.context().workers();
            let Some(w) = workers.get(&tp) else { continue };
            while let Some(r) = q.pop_front() {
                match w.records.try_send(r) {
                    Ok(()) => {}
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
    }

    fn pause(&self, tp: &Tp, pause: bool) {
        let mut l = TopicPartitionList::new();
        l.add_partition(&tp.0, tp.1);
        let _: KafkaResult<()> = if pause {
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
