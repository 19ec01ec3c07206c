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
//! While any source's stream is busy (its pipeline's trickle rule says so: a catch-up, or a
//! steady stream above 10k replication messages a second) the thread runs in turns: it sleeps
//! [`PACE`], then runs every task that is ready, so each socket is read once per turn, in one
//! large read, instead of as each of the walsender's messages arrives (it flushes after every
//! message). When no source is busy the thread waits on its sockets as usual, so a trickle's
//! events are read the moment they arrive.
//!
//! Nothing the progress rule relies on changes: the worker hands events over in stream order
//! through the same bounded channel, and confirmations still go through the client's shared
//! progress. Pacing only delays reads, status updates and keepalive replies by at most
//! [`PACE`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use pgwire_replication::{ReplicationClient, ReplicationConfig};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::Notify;

/// The readers' runtime, started on first use.
static READERS: Mutex<Option<Handle>> = Mutex::new(None);

/// The name of the readers' thread (as `top -H` and the bench show it).
const THREAD: &str = "replication";

/// How long the thread lets the sockets fill between two turns while a stream is busy. At the
/// 180k events/s of a 1,000-row catch-up this is ~60 KiB a turn, well inside the 128 KiB
/// read buffer and the kernel's socket buffer; a busy stream's records then batch for
/// `linger.ms` (20 ms by default), so the millisecond does not show in its latency.
pub(crate) const PACE: Duration = Duration::from_millis(1);

/// The turn while a busy stream comes over a Unix-domain socket (`postgres.host` a socket
/// directory). Such a socket holds what the walsender's send buffer allows (`wmem_default`,
/// ~208 KiB) counted with each message's kernel overhead, ~1.4 KiB for a 200-byte event: about
/// 150 events, less than a millisecond of a catch-up, so at [`PACE`] the walsender waits for
/// every turn (5-11 waits per 1,000 events, drains at 100k and 51k events/s against 118k and
/// 69k at this turn; bench/notebook.md, 2026-12-07). TCP's window grows instead, and there the
/// shorter turn only costs wake-ups.
pub(crate) const PACE_UNIX: Duration = Duration::from_micros(250);

/// Whether the readers' thread runs in turns: how many sources' streams are busy, and how many
/// of those come over a Unix-domain socket (the turn is then [`PACE_UNIX`]).
pub(crate) struct Pacing {
    busy: AtomicUsize,
    busy_unix: AtomicUsize,
    /// Wakes the thread out of its unpaced wait when the first stream turns busy.
    turned_busy: Notify,
    /// Paced turns taken (for the tests).
    turns: AtomicU64,
}

/// The pacing of the process's readers' thread.
static PACING: Pacing = Pacing::new();

impl Pacing {
    const fn new() -> Self {
        Self {
            busy: AtomicUsize::new(0),
            busy_unix: AtomicUsize::new(0),
            turned_busy: Notify::const_new(),
            turns: AtomicU64::new(0),
        }
    }

    fn vote(&self, busy: bool, unix: bool) {
        if unix {
            if busy {
                self.busy_unix.fetch_add(1, Ordering::AcqRel);
            } else {
                self.busy_unix.fetch_sub(1, Ordering::AcqRel);
            }
        }
        if busy {
            if self.busy.fetch_add(1, Ordering::AcqRel) == 0 {
                self.turned_busy.notify_one();
            }
        } else {
            self.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn paced(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }

    /// The length of a turn: the shorter one while any busy stream is on a Unix socket.
    fn turn(&self) -> Duration {
        if self.busy_unix.load(Ordering::Acquire) > 0 {
            PACE_UNIX
        } else {
            PACE
        }
    }

    /// Until some stream is busy (the thread's wait while none is: every task runs as it
    /// is woken).
    async fn until_busy(&self) {
        loop {
            let turned = self.turned_busy.notified();
            if self.paced() {
                return;
            }
            turned.await;
        }
    }

    /// Drives `rt` for ever: unpaced while no stream is busy, in turns of [`PACE`] (or
    /// [`PACE_UNIX`]) while one is.
    fn drive(&self, rt: &Runtime) -> ! {
        loop {
            if self.paced() {
                std::thread::sleep(self.turn());
                self.turns.fetch_add(1, Ordering::Relaxed);
                // One turn: the first yield lets the runtime run what was woken from other
                // threads and then poll its sockets and timers (without waiting); the second
                // runs the tasks those woke. What they wake in turn waits for the next turn.
                rt.block_on(async {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                });
            } else {
                rt.block_on(self.until_busy());
            }
        }
    }
}

/// One source's say in the pacing of the readers' thread; a stream that ends takes its vote
/// back.
#[derive(Debug, Default)]
pub(crate) struct PaceVote {
    busy: bool,
    /// The stream comes over a Unix-domain socket.
    unix: bool,
}

impl PaceVote {
    /// The vote of a stream that comes over a Unix-domain socket (`unix`) or TCP.
    pub(crate) fn new(unix: bool) -> Self {
        Self { busy: false, unix }
    }

    /// The stream is busy (or a trickle again).
    pub(crate) fn set(&mut self, busy: bool) {
        if busy != self.busy {
            self.busy = busy;
            PACING.vote(busy, self.unix);
        }
    }
}

impl Drop for PaceVote {
    fn drop(&mut self) {
        self.set(false);
    }
}

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
        .spawn(move || PACING.drive(&rt))
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

    /// Runs `f` on `h`'s runtime; what it returned, within `within`.
    fn run_on<T: Send + 'static>(
        h: &Handle,
        within: Duration,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        h.spawn(async move { tx.send(f.await).unwrap() });
        rx.recv_timeout(within).expect("the task did not finish")
    }

    /// A busy stream turns the thread to paced turns, in which sockets and timers still wake
    /// their tasks; when the last busy stream is a trickle again, the turns stop.
    #[test]
    fn while_a_stream_is_busy_the_thread_runs_in_turns_that_still_serve_sockets_and_timers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let pacing: &'static Pacing = Box::leak(Box::new(Pacing::new()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let h = rt.handle().clone();
        std::thread::spawn(move || pacing.drive(&rt));
        let within = Duration::from_secs(5);
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let theirs = run_on(&h, within, async move {
            tokio::net::UnixStream::from_std(theirs).unwrap()
        });
        assert_eq!(pacing.turns.load(Ordering::Relaxed), 0, "unpaced: no turns");

        // Two sources busy, one turns back: still paced.
        pacing.vote(true, false);
        pacing.vote(true, false);
        pacing.vote(false, false);
        let reader = {
            let (tx, rx) = std::sync::mpsc::channel();
            h.spawn(async move {
                let mut theirs = theirs;
                let mut got = [0u8; 3];
                theirs.read_exact(&mut got).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                tx.send(got).unwrap();
            });
            rx
        };
        std::io::Write::write_all(&mut ours, b"abc").unwrap();
        assert_eq!(reader.recv_timeout(within).unwrap(), *b"abc");
        let paced = pacing.turns.load(Ordering::Relaxed);
        assert!(
            paced > 0,
            "the socket and the timer were served in paced turns"
        );

        // The last busy source is a trickle again: the thread waits unpaced.
        pacing.vote(false, false);
        std::thread::sleep(10 * PACE);
        let settled = pacing.turns.load(Ordering::Relaxed);
        std::thread::sleep(20 * PACE);
        assert_eq!(
            pacing.turns.load(Ordering::Relaxed),
            settled,
            "no turns unpaced"
        );
        let (mut w, r) = tokio::io::duplex(8);
        let echoed = run_on(&h, within, async move {
            w.write_all(b"x").await.unwrap();
            let mut r = r;
            r.read_u8().await.unwrap()
        });
        assert_eq!(echoed, b'x');
        assert_eq!(pacing.turns.load(Ordering::Relaxed), settled);
    }

    /// The turn is the Unix socket's while any busy stream comes over one, TCP's otherwise; a
    /// trickle on a Unix socket does not shorten it.
    #[test]
    fn the_turn_is_the_unix_socket_s_while_a_busy_stream_comes_over_one() {
        let pacing = Pacing::new();
        assert_eq!(pacing.turn(), PACE);
        pacing.vote(true, false);
        assert_eq!(pacing.turn(), PACE, "a busy TCP stream");
        pacing.vote(true, true);
        assert_eq!(pacing.turn(), PACE_UNIX, "and a busy Unix-socket stream");
        pacing.vote(false, true);
        assert_eq!(
            pacing.turn(),
            PACE,
            "the Unix-socket stream is a trickle again"
        );
        assert!(pacing.paced(), "the TCP stream is still busy");
        pacing.vote(false, false);
        assert!(!pacing.paced());
    }
}
