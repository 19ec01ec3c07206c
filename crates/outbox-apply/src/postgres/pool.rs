//! A bounded pool of prepared connections to the consumer's database: at most
//! `postgres.pool_size` partitions run a transaction at the same time. A connection that broke
//! is not returned; the next `get` opens a new one, retrying with backoff while the database is
//! away (a restart, a failover) instead of failing the partition.

use std::sync::{Arc, atomic::Ordering};

use outbox_service::Backoff;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use super::{contention::Contention, store::Conn};
use crate::{config::ApplyConfig, telemetry::events::APPLY_DATABASE_UNREACHABLE};

pub(crate) struct Pool {
    cfg: Arc<ApplyConfig>,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
    /// Whether multi-record transactions take turns, and the turn.
    pub(crate) contention: Contention,
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
                    return Lent {
                        pool: self,
                        conn: Some(c),
                        _permit: permit,
                    };
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "{APPLY_DATABASE_UNREACHABLE}: retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}
