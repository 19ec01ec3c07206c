//! A rebalance, as the applier's consumer context answers it: on assignment the stored
//! positions are read from PostgreSQL and checked against each log's bounds before the
//! partitions are assigned there, and a task is started per partition; on revocation every task
//! finishes its transaction (bounded by `apply.shutdown_timeout_ms`) before the partitions go.
//! Also the consumer's statistics: each partition's log end, for the lag.
//!
//! Invariant: a partition is assigned at the position stored in the offsets table (or where
//! `kafka.start` says when there is none), never at Kafka's committed offset, and never at a
//! position outside the log (that partition is halted with the reason instead).

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use outbox_service::Backoff;
use rdkafka::{
    ClientContext, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    types::RDKafkaRespErr,
};
use relay_core::apply::position::{self, Cursor, Start};
use tokio::{
    runtime::Handle,
    sync::{mpsc, watch},
    task::JoinHandle,
};

use super::broker::BrokerLog;
use crate::{
    config::ApplyConfig,
    partition::{
        Exit, PartitionTask, PoolStore,
        assignment::{Assignment, Tp},
    },
    postgres::pool::Pool,
    record::Record,
    telemetry::events::{
        APPLY_DATABASE_UNREACHABLE, APPLY_KAFKA_ERROR, APPLY_PARTITIONS_ASSIGNED,
        APPLY_PARTITIONS_REVOKED, APPLY_POSITION_OUT_OF_LOG,
    },
};

/// Records buffered per partition between the consumer's thread and the partition's task.
const QUEUE: usize = 1024;

pub(super) struct Worker {
    pub(super) records: mpsc::Sender<Record>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Exit>,
}

/// The consumer's context: the rebalance callback and what it needs.
pub(crate) struct Ctx {
    pub(super) rt: Handle,
    pub(super) cfg: Arc<ApplyConfig>,
    pub(super) pool: Arc<Pool>,
    pub(super) assignment: Arc<Assignment>,
    pub(super) workers: Mutex<BTreeMap<Tp, Worker>>,
    pub(super) stopping: Arc<AtomicBool>,
    /// The broker connection's errors, logged once per state.
    pub(super) broker: BrokerLog,
}

impl ClientContext for Ctx {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.broker.log(level, fac, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.broker.error(&error, reason);
    }

    /// librdkafka's statistics (every `statistics.interval.ms`): the log end of each assigned
    /// partition (the last stable offset, what `read_committed` can read), for the lag, without
    /// a broker request (those queue behind the consumer's long fetches).
    fn stats(&self, s: rdkafka::Statistics) {
        self.broker.stats(&s);
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
}

impl Ctx {
    pub(super) fn workers(&self) -> std::sync::MutexGuard<'_, BTreeMap<Tp, Worker>> {
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
        // librdkafka keeps a partition the application paused paused across a revoke and a
        // new assignment (its pause flag is cleared by resume only): one the reader paused
        // before this rebalance would never be fetched again. Every partition starts resumed,
        // but the halted ones.
        let (mut paused, mut resumed) = (TopicPartitionList::new(), TopicPartitionList::new());
        for tp in &tps {
            if halted.iter().any(|(h, _)| h == tp) {
                paused.add_partition(&tp.0, tp.1);
            } else {
                resumed.add_partition(&tp.0, tp.1);
            }
        }
        if paused.count() > 0 {
            let _ = consumer.pause(&paused);
        }
        if resumed.count() > 0 {
            let _ = consumer.resume(&resumed);
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
        let a = &self.cfg.apply;
        let mut backoff = Backoff::from_millis(a.retry_backoff_initial_ms, a.retry_backoff_max_ms);
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
                    let wait = backoff.next_wait();
                    tracing::warn!(error = %outbox_service::postgres::describe_pg(&e), retry_in_ms = wait.as_millis() as u64, "{APPLY_DATABASE_UNREACHABLE}: cannot read the stored positions in the consumer's PostgreSQL; retrying");
                    std::thread::sleep(wait);
                }
                Err(_) => return BTreeMap::new(),
            }
        }
    }

    /// Stops every partition task after its current transaction and waits for them (bounded by
    /// `apply.shutdown_timeout_ms`; a task still running then is abandoned: its transaction
    /// rolls back when its connection goes, and the claim makes a later retry harmless).
    pub(super) fn revoke_all(&self) {
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
