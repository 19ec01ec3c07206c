//! The replication readers' own thread: pgwire-replication's worker (socket reads, message
//! framing, status updates) runs on a current-thread runtime of its own, one per process,
//! shared by every source; the pipelines stay on the main runtime and read the worker's
//! channel.
//!
//! Why: in a catch-up the relay reads faster than the walsender decodes, so it runs dry after
//! almost every transaction. With the worker on the pipeline's thread each transaction cost
//! that thread a wake-up, an `epoll_wait` and a `recvfrom` (0.6 and 0.55 per event in a
//! single-row catch-up, two thirds of its CPU in system time; bench/notes.md, 2026-12-05).
//! On its own thread the reads still happen as the data comes, but the pipeline can let the
//! events pile up in the channel while it pauses (`relay.read_coalesce_us`) and handle them in
//! one turn.
//!
//! Nothing the progress rule relies on changes: the worker hands events over in stream order
//! through the same bounded channel, and confirmations still go through the client's shared
//! progress.

use std::sync::Mutex;

use pgwire_replication::{ReplicationClient, ReplicationConfig};
use tokio::runtime::Handle;

/// The readers' runtime, started on first use.
static READERS: Mutex<Option<Handle>> = Mutex::new(None);

/// The name of the readers' thread (as `top -H` and the bench show it).
const THREAD: &str = "replication";

/// Why a session could not be opened on the readers' thread.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReaderThreadError {
    /// The thread or its runtime could not be created (out of threads or memory).
    #[error("cannot start the replication reader thread: {0}")]
    Start(#[source] std::io::Error),
    /// The worker's task ended before it handed its client back (the thread is gone).
    #[error("the replication reader thread stopped")]
    Stopped(#[source] tokio::task::JoinError),
}

/// The readers' runtime, started if it is not running yet.
fn readers() -> Result<Handle, ReaderThreadError> {
    let mut slot = READERS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = slot.as_ref() {
        return Ok(h.clone());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReaderThreadError::Start)?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name(THREAD.into())
        // Runs until the process exits; sessions are closed by their pipelines before that.
        .spawn(move || rt.block_on(std::future::pending::<()>()))
        .map_err(ReaderThreadError::Start)?;
    *slot = Some(handle.clone());
    Ok(handle)
}

/// [`ReplicationClient::connect_gated`] with the session's worker on the readers' thread.
pub(crate) async fn connect_gated(
    rcfg: ReplicationConfig,
) -> Result<pgwire_replication::Result<ReplicationClient>, ReaderThreadError> {
    readers()?
        .spawn(ReplicationClient::connect_gated(rcfg))
        .await
        .map_err(ReaderThreadError::Stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `connect_gated` relies on: a task started on the readers' runtime runs on its one
    /// thread, and so do the tasks it spawns (pgwire-replication spawns its worker).
    #[tokio::test(flavor = "current_thread")]
    async fn sessions_run_on_one_thread_of_their_own_and_so_do_their_workers() {
        let name = || std::thread::current().name().map(str::to_owned);
        let first = readers().unwrap().spawn(async move { name() });
        let worker = readers()
            .unwrap()
            .spawn(async move { tokio::spawn(async move { name() }).await.unwrap() });
        assert_eq!(first.await.unwrap().as_deref(), Some(THREAD));
        assert_eq!(worker.await.unwrap().as_deref(), Some(THREAD));
        assert_ne!(name().as_deref(), Some(THREAD), "the test's own thread");
    }
}
