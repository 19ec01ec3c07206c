//! The loop, and one method per thing it reacts to: a due Kafka commit, the one-second tick, a
//! commit that ended, a delivery report, replication events, the stream going quiet, a stop.
//! The loop itself only picks the next reaction; what each may do is the progress rule's
//! (`relay_core::progress`).
//!
//! Order: a stop first, then the timers, then the reports, then the stream. Timers come before
//! data because they are ready only when due, while during a catch-up the stream and the
//! reports are always ready: after them the timers would starve (no commit, no state-file
//! write for as long as the backlog lasts).

use std::time::Duration;

use futures::FutureExt as _;
use tokio::{sync::watch, time::Instant};

use super::state::Pipeline;
use crate::{
    error::{RelayError, Transient},
    observe::health::Shared,
    pipeline::stop::unless_stopped,
    postgres::session::{Session, StreamEvent, classify, status_interval},
    sink::{CommitEnded, Delivered, Sink},
};

/// What the loop does after a reaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    Next,
    /// A stop came while the reaction waited: the caller drains.
    Stop,
}

/// What the replication session's receive returned.
type Received = Result<Option<StreamEvent>, pgwire_replication::PgWireError>;

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// Streams until a stop (`Ok`: the caller drains) or a failure (`Err`).
    pub(super) async fn run(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), RelayError> {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut commit_tick = tokio::time::interval(Duration::from_millis(
            self.cfg.kafka.transaction_interval_ms,
        ));
        commit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = shutdown.clone();
        loop {
            let can_read = self.may_read();
            self.pace.paused = match self.pace.paused {
                _ if can_read => None,
                Some((_, acked)) if acked != self.progress.acked() => {
                    Some((Instant::now(), self.progress.acked()))
                }
                None => Some((Instant::now(), self.progress.acked())),
                p => p,
            };
            let turn = tokio::select! {
                biased;
                _ = shutdown.changed() => Turn::Stop,
                _ = commit_tick.tick(), if self.progress.kafka_commit_pending() => {
                    self.on_commit_due(shutdown).await?
                }
                // A quiet commit waits for the running one to settle (the branch below)
                // rather than blocking the loop on it.
                _ = sleep_until_some(self.pace.quiet_commit_at),
                    if self.pace.quiet_commit_at.is_some() && !self.progress.kafka_committing() => {
                    self.on_quiet_commit_due(shutdown).await?
                }
                _ = tick.tick() => self.on_tick(shutdown, can_read).await?,
                ended = running_commit(self.ledger.running_commit()),
                    if self.ledger.committing() => {
                    self.on_commit_ended(ended).await?
                }
                Some(d) = self.reports.next(self.sink) => self.on_reports(d).await?,
                ev = self.client.recv(), if can_read => self.on_events(ev, &stop).await?,
                // Nothing is ready: the stream went quiet (unless the task merely ran out of
                // its co-operative budget, which a busy catch-up does every ~128 events).
                _ = std::future::ready(()), if self.pace.since_quiet > 0 => {
                    self.on_quiet(shutdown).await?
                }
            };
            if turn == Turn::Stop {
                return Ok(());
            }
        }
    }

    /// The in-flight limits: this connection's (`relay.max_in_flight_*`) and, with several
    /// sources, the process's (`relay.max_in_flight_bytes_total`, whose share this publishes);
    /// and no partition head record in flight ([`super::head`]).
    fn may_read(&mut self) -> bool {
        let own = self.progress.can_read() && !self.heads_waiting();
        match &mut self.budget {
            None => own,
            Some(share) => {
                let shared = share.may_read(
                    self.progress.outstanding_records(),
                    self.progress.in_flight_bytes(),
                );
                own && shared
            }
        }
    }

    /// `kafka.transaction_interval_ms` passed with records in the open Kafka transaction.
    async fn on_commit_due(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Turn, RelayError> {
        (self.pace.last_commit, self.pace.quiet_commit_at) = (Some(Instant::now()), None);
        self.commit_unless(shutdown).await
    }

    /// The commit the quiet stream timed (`kafka.commit_min_interval_ms` after the last one).
    async fn on_quiet_commit_due(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Turn, RelayError> {
        (self.pace.last_commit, self.pace.quiet_commit_at) = (Some(Instant::now()), None);
        if !self.progress.kafka_commit_pending() {
            return Ok(Turn::Next);
        }
        self.commit_unless(shutdown).await
    }

    /// Every second: the producer's health, the connection while the loop waits for Kafka,
    /// the back-pressure release, the failover memory, the gauges and the idle checkpoint.
    async fn on_tick(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
        can_read: bool,
    ) -> Result<Turn, RelayError> {
        if let Some(fatal) = self.sink.fatal_error() {
            return Err(self.after_fatal(fatal).await);
        }
        // While waiting for Kafka the loop reads nothing, so a dead replication connection
        // would go unnoticed: the slot may already be another instance's. Stop now; dropping
        // the producer purges what it still holds.
        if !can_read && !self.client.is_running() {
            return Err(RelayError::from(Transient::replication(
                "the replication connection closed while the relay waited for Kafka",
            )));
        }
        if let Some((since, _)) = self.pace.paused
            && let Some(e) = release_due(since, self.release_after(), self.health)
        {
            return Err(e);
        }
        // A busy stream that stopped has no quiet moment to say so: a tick after the last
        // quiet moment is one, with nothing new, so the reader thread stops pacing within a
        // second of the last event. Not in the middle of a burst: a stream the loop cannot
        // keep up with has no quiet moments, and its reader is best paced (it fills the
        // channel once a turn instead of waking for every slot the loop frees).
        if self.pace.since_quiet == 0 {
            let trickle = self.pace.trickle.quiet_after(0, Instant::now());
            self.pace_reader(trickle);
        }
        self.remember().await;
        self.report_gauges();
        if !self.checkpoint_due() || !self.ledger.writes_checkpoints() {
            return Ok(Turn::Next);
        }
        if !self.transactional {
            if self.write_acknowledged().await {
                self.pace.last_checkpoint = Some(Instant::now());
            }
        } else if self.progress.idle_checkpoint_due(self.ledger.skip_status()) {
            // Exactly-once and idle: a checkpoint-only transaction lets the stream's progress
            // be confirmed.
            self.pace.last_checkpoint = Some(Instant::now());
            return self.commit_unless(shutdown).await;
        }
        Ok(Turn::Next)
    }

    /// The running Kafka commit ended.
    async fn on_commit_ended(&mut self, ended: CommitEnded) -> Result<Turn, RelayError> {
        if let Some(running) = self.ledger.commit_ended() {
            self.settle(running, ended).await?;
        }
        Ok(Turn::Next)
    }

    /// A delivery report, and every other one ready now, before confirming once.
    async fn on_reports(&mut self, d: Delivered) -> Result<Turn, RelayError> {
        self.on_report(d).await?;
        self.on_reports_ready().await?;
        self.confirm();
        if self.transactional {
            return Ok(Turn::Next);
        }
        // Records held back by a kick that waited for these reports go out now.
        if self.cfg.kafka.flush_when_quiet {
            self.sink.try_kick();
        }
        // Without transactions the checkpoint follows the acknowledgements; between
        // checkpoints the trail forgets what they passed, so it holds what is in flight.
        if self.ledger.writes_checkpoints() {
            self.ledger
                .acknowledged(self.progress.checkpoint_position());
            if self.checkpoint_due() && self.write_acknowledged().await {
                self.pace.last_checkpoint = Some(Instant::now());
            }
        }
        Ok(Turn::Next)
    }

    /// Replication events: `first`, then those already received, up to [`EVENTS_PER_TURN`],
    /// without a turn through the loop's select each.
    async fn on_events(
        &mut self,
        first: Received,
        stop: &watch::Receiver<bool>,
    ) -> Result<Turn, RelayError> {
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(ev) = next.take() {
            match ev {
                Ok(Some(ev)) => {
                    self.pace.since_quiet += 1;
                    // Handling an event can wait for Kafka (a full queue, a suspect record's
                    // report): a stop must not wait for it. Pinned here: the (large) future is
                    // not moved again on every event.
                    let work = std::pin::pin!(self.on_event(ev));
                    match unless_stopped(stop, work).await {
                        Some(r) => r?,
                        None => return Ok(Turn::Stop),
                    }
                }
                Ok(None) => {
                    return Err(RelayError::from(Transient::replication(
                        "the server closed the replication stream",
                    )));
                }
                Err(e) => return Err(classify(e, self.cfg)),
            }
            handled += 1;
            if handled < EVENTS_PER_TURN && self.progress.can_read() && !self.heads_waiting() {
                // The process-wide budget is looked at once per turn (`may_read`), so the
                // total passes it by at most a turn per source (relay_core::budget).
                next = self.client.recv().now_or_never();
            }
        }
        Ok(Turn::Next)
    }

    /// The stream went quiet after `pace.since_quiet` events: kick a trickle out, commit, and
    /// coalesce the next reads.
    async fn on_quiet(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<Turn, RelayError> {
        let quiet = tokio::task::coop::has_budget_remaining();
        // Coalescing comes last: the kick and the quiet commit below act on what was just read
        // at once, not a pause later (at a trickle every event paid the pause before it was
        // sent).
        let burst = std::mem::take(&mut self.pace.since_quiet);
        // A busy stream coalesces too: a catch-up that runs dry waits for the next events to
        // pile up in the channel rather than waking for each transaction (reader_thread.rs).
        let coalescing = quiet;
        let kafka = &self.cfg.kafka;
        // Without transactions, a trickle goes out now rather than after linger.ms; a busier
        // stream keeps batching (trickle.rs says which is which). With transactions the commit
        // below sends it; kicking there too was measured worse (p99 47.6 -> 73.8 ms at 1k
        // events/s, 34.5 -> 142 at 10k).
        if quiet {
            let trickle = self.pace.trickle.quiet_after(burst, Instant::now());
            self.pace_reader(trickle);
            if trickle && !self.transactional && kafka.flush_when_quiet {
                self.sink.kick();
            }
        }
        // With transactions, commit as soon as the stream goes quiet: read-committed consumers
        // see an event about one commit after PostgreSQL committed it. While the commit runs,
        // the next events pile up and go into the next transaction.
        if quiet && self.progress.kafka_commit_pending() && self.pace.quiet_commit_at.is_none() {
            // Never sooner than this after the last commit (the next commit is then timed for
            // it): each commit costs the relay and the brokers a round of transaction markers.
            let gap = Duration::from_millis(kafka.commit_min_interval_ms);
            let now = Instant::now();
            match self
                .pace
                .last_commit
                .map(|t| t + gap)
                .filter(|at| *at > now)
            {
                Some(at) => self.pace.quiet_commit_at = Some(at),
                // Once the running commit settled.
                None if self.progress.kafka_committing() => self.pace.quiet_commit_at = Some(now),
                None => {
                    self.pace.last_commit = Some(now);
                    if self.commit_unless(shutdown).await? == Turn::Stop {
                        return Ok(Turn::Stop);
                    }
                }
            }
        }
        if coalescing {
            coalesce_reads(Duration::from_micros(self.cfg.relay.read_coalesce_us)).await;
        }
        Ok(Turn::Next)
    }

    /// A busy stream's socket is read in turns (reader_thread.rs), a trickle's at once; with
    /// read-coalescing off (`relay.read_coalesce_us = 0`) every socket is read at once.
    fn pace_reader(&mut self, trickle: bool) {
        let busy = !trickle && self.cfg.relay.read_coalesce_us > 0;
        self.pace.reader.set(busy);
    }

    /// Commits the open Kafka transaction; [`Turn::Stop`] if a stop came first. A commit waits
    /// for Kafka, which may be away: neither a stop nor the release of the replication
    /// connection may wait for it.
    async fn commit_unless(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Turn, RelayError> {
        let since = self.pace.paused.map_or_else(Instant::now, |(t, _)| t);
        let (release_after, health) = (self.release_after(), self.health);
        // Biased: a commit that ended as the stop came counts (its outcome is known), and the
        // simulation replays from its seed alone.
        tokio::select! {
            biased;
            r = self.commit() => r.map(|()| Turn::Next),
            _ = shutdown.changed() => Ok(Turn::Stop),
            e = release_when_due(since, release_after, health) => Err(e),
        }
    }

    /// A checkpoint without records (idle progress) or outside transactions is due: once per
    /// status interval, and outside transactions also once Kafka acknowledged
    /// `relay.checkpoint_bytes` since the last one (the progress rule's
    /// [`checkpoint_volume_due`](relay_core::progress::Progress::checkpoint_volume_due)).
    fn checkpoint_due(&self) -> bool {
        let every = status_interval(self.cfg, Duration::ZERO);
        self.pace
            .last_checkpoint
            .is_none_or(|t| t.elapsed() >= every)
            || self
                .progress
                .checkpoint_volume_due(self.cfg.relay.checkpoint_bytes)
    }

    /// `relay.backpressure_release_ms`.
    fn release_after(&self) -> Duration {
        Duration::from_millis(self.cfg.relay.backpressure_release_ms)
    }
}

/// Waits until the running Kafka commit ended (never, if none runs: the branch is disabled
/// then anyway).
async fn running_commit(committing: Option<&mut super::ledger::Committing>) -> CommitEnded {
    match committing {
        Some(c) => c.commit.ended().await,
        None => std::future::pending().await,
    }
}

/// Waits until `at` (never, if `None`: the branch is disabled then anyway).
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// While the relay waits for Kafka (since `since`): the error that lets the replication
/// connection go, once the wait reached `release_after` (0: never on time alone) or the slot
/// monitor saw `wal_status` leave reserved/extended (docs/architecture.md, "Backpressure and
/// memory").
fn release_due(since: Instant, release_after: Duration, health: &Shared) -> Option<RelayError> {
    let waited = since.elapsed();
    let at_risk = health.wal_at_risk();
    (at_risk || (!release_after.is_zero() && waited >= release_after)).then_some(RelayError::from(
        Transient::BackpressureReleased {
            waited_ms: waited.as_millis() as u64,
            wal_at_risk: at_risk,
        },
    ))
}

/// [`release_due`], checked every second, for a wait that blocks the loop (a Kafka commit).
async fn release_when_due(since: Instant, release_after: Duration, health: &Shared) -> RelayError {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let Some(e) = release_due(since, release_after, health) {
            return e;
        }
    }
}

/// Events handled per turn of the loop's select when more are already received. In a
/// catch-up every event is ready at once, and a turn through the select (the stop signal,
/// the timers, the reports, each polled and dropped) cost about 1,000 instructions per event
/// (docs/benchmarks.md, "CPU per event"). The timers, the reports and a stop still come first
/// after at most this many events; the in-flight limits are checked before each one.
/// A receive that is not ready at once is dropped: the replication client's receive is a
/// channel's, which loses nothing then (the worker runs on the readers' thread,
/// reader_thread.rs; the channel's end is read at the next turn).
const EVENTS_PER_TURN: u32 = 64;

/// Read-side coalescing (`relay.read_coalesce_us`). At a steady rate the walsender sends every
/// transaction as it commits, and the pipeline would wake up for each one: on two cores those
/// wake-ups cost more CPU than the events (bench/notes.md). Sleeping briefly on tokio's clock
/// lets the next transactions pile up in the replication client's channel and be handled in
/// one turn; so does a catch-up that ran dry (the relay reads faster than the walsender
/// decodes), whose reads go on meanwhile on the readers' own thread (reader_thread.rs). The
/// runtime thread is not blocked: the HTTP server and (with several pipelines) the other
/// pipelines run meanwhile. Delivery reports and a stop wait as long at most.
async fn coalesce_reads(pause: Duration) {
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}
