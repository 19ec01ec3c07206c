//! One partition's task: takes its records in offset order from the consumer's thread, groups
//! them into transactions (`apply.batch_records`, `apply.batch_wait_ms`), and runs each batch
//! through the core's plan (`relay_core::apply::batch`) until every record is committed or
//! handed to the failure policy.
//!
//! Invariant: records of one partition are applied strictly in order by this one task; a
//! transient error retries the same records (after a backoff; after a deadlock or serialization
//! failure at once, fewer at a time: `relay_core::apply::contention`) and never moves past them;
//! a halted partition applies nothing after the record it stopped on.
//!
//! [`assignment`]: the partitions this instance applies, as the consumer's thread, these tasks,
//! `/readyz` and the metrics share them.

pub(crate) mod assignment;

use std::{sync::Arc, time::Duration};

use outbox_service::Backoff;
use relay_core::apply::{
    batch::{Outcome, Plan, Step, failed_at_commit},
    contention::{Cause, Retry, Width},
    position::{Cursor, committed_after_unknown},
};
use tokio::sync::{mpsc, watch};

use crate::{
    config::{ApplyConfig, OnFailure},
    postgres::{
        pool::Pool,
        txn::{self, Broke},
    },
    record::Record,
    telemetry::{
        events::{
            APPLY_PARTITION_HALTED, APPLY_RECORD_DEAD_LETTERED, APPLY_TRANSACTION_CONFLICT,
            APPLY_TRANSACTION_RETRY,
        },
        metrics as m,
    },
};
use assignment::{Assignment, Tp};

/// The consumer's database as a partition's task sees it: the seam that lets the task's loop be
/// tested without PostgreSQL (on tokio's paused clock).
pub(crate) trait Store: Send + Sync + 'static {
    /// One transaction over `records` (txn::apply).
    fn apply(
        &self,
        records: &[Record],
    ) -> impl std::future::Future<Output = Result<txn::Applied, Broke>> + Send;
    /// The dead-letter transaction of `r` (txn::dead_letter): the next position, and whether
    /// the dead letter was written (not when another instance moved the position past `r`).
    fn dead_letter(
        &self,
        r: &Record,
        error: &str,
        sqlstate: Option<&str>,
    ) -> impl std::future::Future<Output = Result<(i64, bool), Broke>> + Send;
    /// The stored position, read on a new connection; `Err` when it could not be read.
    fn position(
        &self,
        topic: &str,
        partition: i32,
    ) -> impl std::future::Future<Output = Result<Option<i64>, ()>> + Send;
}

/// The real store: the pool's connections. A connection whose transaction broke is dropped.
/// A transaction of more than one record waits for its turn first while turns are on
/// (apply::contention), and a conflict turns them on.
pub(crate) struct PoolStore {
    pub(crate) pool: Arc<Pool>,
    pub(crate) cfg: Arc<ApplyConfig>,
}

impl Store for PoolStore {
    async fn apply(&self, records: &[Record]) -> Result<txn::Applied, Broke> {
        let contention = &self.pool.contention;
        let _turn = contention.turn(records.len()).await;
        let conn = self.pool.get().await;
        let r = txn::apply(&conn, &self.cfg, records).await;
        match &r {
            Err(Broke::Transient(_) | Broke::CommitUnknown(_)) => conn.discard(),
            Err(Broke::Conflict(_)) => contention.conflicted(),
            _ => {}
        }
        r
    }

    async fn dead_letter(
        &self,
        r: &Record,
        error: &str,
        sqlstate: Option<&str>,
    ) -> Result<(i64, bool), Broke> {
        let conn = self.pool.get().await;
        let out = txn::dead_letter(&conn, r, error, sqlstate).await;
        if out.is_err() {
            conn.discard();
        }
        out
    }

    async fn position(&self, topic: &str, partition: i32) -> Result<Option<i64>, ()> {
        let conn = self.pool.get().await;
        match conn.position(topic, partition, false).await {
            Ok(p) => Ok(p),
            Err(_) => {
                conn.discard();
                Err(())
            }
        }
    }
}

/// How a partition's task ended.
#[derive(Debug)]
pub(crate) enum Exit {
    /// Its channel closed (revoked) or a stop was asked for.
    Stopped,
    /// Stopped on a record it cannot apply (`on_failure = "halt"`).
    Halted(String),
}

pub(crate) struct PartitionTask<S: Store> {
    pub(crate) tp: Tp,
    pub(crate) records: mpsc::Receiver<Record>,
    pub(crate) cursor: Cursor,
    pub(crate) cfg: Arc<ApplyConfig>,
    pub(crate) store: Arc<S>,
    pub(crate) assignment: Arc<Assignment>,
    /// Flips to true when the partition is revoked or the process stops: no new transaction.
    pub(crate) stop: watch::Receiver<bool>,
}

impl<S: Store> PartitionTask<S> {
    pub(crate) async fn run(mut self) -> Exit {
        let mut width = Width::new(self.cfg.apply.batch_records);
        loop {
            let Some(batch) = self.next_batch().await else {
                return Exit::Stopped;
            };
            if let Err(exit) = self.apply(batch, &mut width).await {
                if let Exit::Halted(why) = &exit {
                    tracing::error!(topic = %self.tp.0, partition = self.tp.1, reason = %why, "{APPLY_PARTITION_HALTED}: nothing more is applied from this partition until an operator acts (docs/inbox.md)");
                    self.assignment.halt(&self.tp, why.clone());
                }
                return exit;
            }
        }
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// The next records, new ones only (redeliveries below the cursor dropped), waiting up to
    /// `batch_wait_ms` after the first for more. `None` when stopped or revoked.
    async fn next_batch(&mut self) -> Option<Vec<Record>> {
        let max = self.cfg.apply.batch_records;
        let mut batch = Vec::with_capacity(max.min(1024));
        while batch.is_empty() {
            let r = tokio::select! {
                r = self.records.recv() => r?,
                _ = self.stop.wait_for(|s| *s) => return None,
            };
            if self.cursor.admit(r.offset) {
                batch.push(r);
            }
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.cfg.apply.batch_wait_ms);
        while batch.len() < max {
            let r = match self.records.try_recv() {
                Ok(r) => r,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, self.records.recv()).await {
                        Ok(Some(r)) => r,
                        _ => break,
                    }
                }
            };
            if self.cursor.admit(r.offset) {
                batch.push(r);
            }
        }
        (!self.stopping()).then_some(batch)
    }

    /// Runs `batch` to its end, in transactions of at most `width` records. `Err` when halted
    /// or stopped during a retry.
    async fn apply(&mut self, batch: Vec<Record>, width: &mut Width) -> Result<(), Exit> {
        let mut plan = Plan::new(batch.len());
        let mut errors: Vec<Option<(String, Option<String>)>> = vec![None; batch.len()];
        let mut retry = Retry::new(
            Duration::from_millis(self.cfg.apply.retry_backoff_initial_ms),
            Duration::from_millis(self.cfg.apply.retry_backoff_max_ms),
        );
        loop {
            plan.limit(width.get());
            let outcome = match plan.next() {
                Step::Done => return Ok(()),
                Step::Fail(i) => {
                    let (error, sqlstate) = errors[i].take().unwrap_or_default();
                    let r = &batch[i];
                    match self.cfg.apply.on_failure {
                        OnFailure::Halt => return Err(Exit::Halted(error)),
                        OnFailure::DeadLetter => {
                            self.dead_letter(r, &error, sqlstate.as_deref()).await?;
                            plan.handled();
                            continue;
                        }
                    }
                }
                Step::Apply(range) => {
                    let store = self.store.clone();
                    match store.apply(&batch[range.clone()]).await {
                        Ok(done) => {
                            width.committed();
                            self.committed(done.next);
                            count(&self.tp.0, "applied", done.applied);
                            count(&self.tp.0, "duplicate", done.duplicates);
                            count(&self.tp.0, "ignored", done.ignored);
                            Outcome::Committed
                        }
                        Err(Broke::Transient(why)) => {
                            self.retry(&why, retry.wait(Cause::Away, 0.0)).await?;
                            continue;
                        }
                        Err(Broke::Conflict(why)) => {
                            width.conflicted();
                            let wait = retry.wait(Cause::Conflict, rand::random());
                            self.conflicted(&why, range.len(), width.get(), wait)
                                .await?;
                            continue;
                        }
                        Err(Broke::Definite {
                            index,
                            error,
                            sqlstate,
                        }) => {
                            errors[range.start + index] = Some((error, sqlstate));
                            Outcome::Failed(range.start + index)
                        }
                        Err(Broke::DefiniteAtCommit { error, sqlstate }) => {
                            let o = failed_at_commit(&range);
                            if let Outcome::Failed(i) = o {
                                errors[i] = Some((format!("at COMMIT: {error}"), sqlstate));
                            }
                            o
                        }
                        Err(Broke::CommitUnknown(why)) => {
                            let last = &batch[range.end - 1];
                            if self.committed_after_all(last).await {
                                self.committed(last.offset + 1);
                                Outcome::Committed
                            } else {
                                self.retry(&why, retry.wait(Cause::Away, 0.0)).await?;
                                continue;
                            }
                        }
                    }
                }
            };
            retry.reset();
            plan.report(outcome);
        }
    }

    fn committed(&mut self, next: i64) {
        self.cursor.observe_stored(next);
        self.assignment.advanced(&self.tp, next);
        metrics::counter!(m::APPLY_TRANSACTIONS, "result" => "committed").increment(1);
    }

    /// After a COMMIT of unknown outcome: reads the position on a new connection.
    async fn committed_after_all(&self, last: &Record) -> bool {
        let a = &self.cfg.apply;
        let mut backoff = Backoff::from_millis(a.retry_backoff_initial_ms, a.retry_backoff_max_ms);
        loop {
            match self.store.position(&last.topic, last.partition).await {
                Ok(stored) => return committed_after_unknown(stored, last.offset + 1),
                Err(()) => tokio::time::sleep(backoff.next_wait()).await,
            }
        }
    }

    async fn retry(&mut self, why: &str, wait: Duration) -> Result<(), Exit> {
        metrics::counter!(m::APPLY_TRANSACTIONS, "result" => "retried").increment(1);
        self.assignment.retrying(&self.tp, why);
        tracing::warn!(topic = %self.tp.0, partition = self.tp.1, error = %why, retry_in_ms = wait.as_millis() as u64, "{APPLY_TRANSACTION_RETRY}: rolled back; the same records are tried again");
        self.pause(wait).await
    }

    /// A deadlock or serialization failure rolled back `records` records: retried after `wait`
    /// (a few milliseconds) in transactions of at most `width`.
    async fn conflicted(
        &mut self,
        why: &str,
        records: usize,
        width: usize,
        wait: Duration,
    ) -> Result<(), Exit> {
        metrics::counter!(m::APPLY_TRANSACTIONS, "result" => "conflicted").increment(1);
        self.assignment.retrying(&self.tp, why);
        tracing::warn!(topic = %self.tp.0, partition = self.tp.1, error = %why, records, width, retry_in_ms = wait.as_millis() as u64, "{APPLY_TRANSACTION_CONFLICT}: rolled back by another transaction's locks; retried at once with fewer records");
        self.pause(wait).await
    }

    /// Sleeps `wait`, unless the partition is stopped meanwhile.
    async fn pause(&mut self, wait: Duration) -> Result<(), Exit> {
        tokio::select! {
            _ = tokio::time::sleep(wait) => Ok(()),
            _ = self.stop.wait_for(|s| *s) => Err(Exit::Stopped),
        }
    }

    async fn dead_letter(
        &mut self,
        r: &Record,
        error: &str,
        sqlstate: Option<&str>,
    ) -> Result<(), Exit> {
        let mut retry = Retry::new(
            Duration::from_millis(self.cfg.apply.retry_backoff_initial_ms),
            Duration::from_millis(self.cfg.apply.retry_backoff_max_ms),
        );
        let store = self.store.clone();
        loop {
            match store.dead_letter(r, error, sqlstate).await {
                Ok((next, false)) => {
                    self.committed(next);
                    return Ok(());
                }
                Ok((next, true)) => {
                    self.committed(next);
                    count(&r.topic, "dead_lettered", 1);
                    tracing::warn!(record = %r.at(), event_id = ?r.event_id, error = %error, "{APPLY_RECORD_DEAD_LETTERED}: in the dead-letter table; the partition goes on");
                    return Ok(());
                }
                Err(Broke::CommitUnknown(why)) => {
                    if self.committed_after_all(r).await {
                        self.committed(r.offset + 1);
                        count(&r.topic, "dead_lettered", 1);
                        return Ok(());
                    }
                    self.retry(&why, retry.wait(Cause::Away, 0.0)).await?;
                }
                Err(b) => {
                    self.retry(&format!("{b:?}"), retry.wait(Cause::Away, 0.0))
                        .await?;
                }
            }
        }
    }
}

fn count(topic: &str, result: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!(m::APPLY_RECORDS, "topic" => topic.to_string(), "result" => result)
            .increment(n);
    }
}

#[cfg(test)]
mod tests;
