//! A bounded pool of prepared connections to the consumer's database: at most
//! `postgres.pool_size` partitions run a transaction at the same time. A connection that broke
//! is not returned; the next `get` opens a new one, retrying with backoff while the database is
//! away (a restart, a failover) instead of failing the partition.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use outbox_service::Backoff;
use relay_core::apply::outage::{Outage, Say};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use super::{contention::Contention, store::Conn};
use crate::{
    config::ApplyConfig,
    telemetry::events::{APPLY_DATABASE_REACHABLE, APPLY_DATABASE_UNREACHABLE},
};

pub(crate) struct Pool {
    cfg: Arc<ApplyConfig>,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
    /// Whether multi-record transactions take turns, and the turn.
    pub(crate) contention: Contention,
    /// The database's outage as the log tells it: one line when it goes, a reminder a minute,
    /// one when it is back, however many partitions retry meanwhile.
    outage: std::sync::Mutex<Outage>,
    epoch: Instant,
}

/// A connection lent by the pool; returned on drop unless it broke.
pub(crate) struct Lent<'p> {
    pool: &'p Pool,
    conn: Option<Conn>,
    _permit: OwnedSemaphorePermit,
}

impl std::ops::Deref for Lent<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("lent until dropped")
    }
}

impl Lent<'_> {
    /// Drops the connection instead of returning it (after an error that may have broken it).
    pub(crate) fn discard(mut self) {
        self.conn = None;
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(c) = self
            .conn
            .take()
            .filter(|c| !c.client.is_closed() && !c.in_txn.load(Ordering::Acquire))
            && let Ok(mut idle) = self.pool.idle.try_lock()
        {
            idle.push(c);
        }
    }
}

impl Pool {
    pub(crate) fn new(cfg: Arc<ApplyConfig>) -> Pool {
        let size = cfg.postgres.pool_size;
        Pool {
            cfg,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
            contention: Contention::new(),
            outage: Default::default(),
            epoch: Instant::now(),
        }
    }

    /// A connection, waiting for a free one and for the database to be reachable.
    pub(crate) async fn get(&self) -> Lent<'_> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        if let Some(c) = self.idle.lock().await.pop() {
            return Lent {
                pool: self,
                conn: Some(c),
                _permit: permit,
            };
        }
        let a = &self.cfg.apply;
        let mut backoff = Backoff::from_millis(a.retry_backoff_initial_ms, a.retry_backoff_max_ms);
        loop {
            match Conn::open(&self.cfg, "apply").await {
                Ok(c) => {
                    self.reachable();
                    return Lent {
                        pool: self,
                        conn: Some(c),
                        _permit: permit,
                    };
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    self.unreachable(&e, wait);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    fn outage(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection attempt failed; the next one in `wait`.
    fn unreachable(&self, e: &impl std::fmt::Display, wait: std::time::Duration) {
        let retry_in_ms = wait.as_millis() as u64;
        match self.outage().error(self.epoch.elapsed()) {
            Some(Say::Down) => {
                tracing::warn!(error = %e, retry_in_ms, "{APPLY_DATABASE_UNREACHABLE}: cannot connect to the consumer's database; retrying with backoff (said again every minute while it lasts)")
            }
            Some(Say::Still { for_, errors }) => {
                tracing::warn!(error = %e, for_s = for_.as_secs(), errors, "{APPLY_DATABASE_UNREACHABLE}: the consumer's database is still unreachable")
            }
            _ => tracing::debug!(error = %e, retry_in_ms, "{APPLY_DATABASE_UNREACHABLE}: retrying"),
        }
    }

    /// A connection opened.
    fn reachable(&self) {
        if let Some(Say::Back { after, errors }) = self.outage().up(self.epoch.elapsed()) {
            tracing::info!(
                after_s = after.as_secs(),
                errors,
                "{APPLY_DATABASE_REACHABLE}: the consumer's database is reachable again"
            );
        }
    }
}
