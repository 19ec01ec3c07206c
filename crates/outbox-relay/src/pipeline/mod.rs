//! The one loop that owns the replication connection:
//!
//! ```text
//! replication stream ─▶ decode ─▶ route ─▶ Kafka (in source order)
//!        ▲                                   │ delivery reports (any order)
//!        └── update_applied_lsn ◀─ relay_core::progress::Progress
//! ```
//!
//! Progress rule ([`Progress`]): the only LSN ever confirmed is the end of the longest prefix of
//! transactions Kafka fully acknowledged (or an idle keepalive behind it), and with Kafka
//! transactions only what a committed Kafka transaction holds.
//! Backpressure: when too many records or bytes are in flight the loop stops reading the stream;
//! pgwire-replication then stops reading the socket but keeps sending status updates, so
//! PostgreSQL keeps the WAL. The connection is let go after `relay.backpressure_release_ms`
//! without an acknowledgement, or at once when the slot's `wal_status` leaves
//! reserved/extended ([`release_due`]). A delivery error freezes the watermark and ends the
//! loop; the supervisor restarts from the last confirmed LSN.

mod ack_metrics;
mod checkpoints;
mod delivery;
mod drain;
mod event;
mod message;
mod poison;
mod publish;
mod state;
mod trickle;
mod txn;

#[cfg(test)]
mod tests;

use std::time::Duration;

use tokio::time::Instant;

use futures::FutureExt as _;
use relay_core::{
    decode::Decoder,
    progress::{Limits, Progress},
    route::MessageRoutes,
};
use tokio::sync::{mpsc, watch};

use crate::{
    config::{Config, Delivery},
    error::{Definite, RelayError, Transient},
    events::{KAFKA_PRODUCER_FENCED_OTHERS, SHUTDOWN_COMPLETE, STREAMING_STARTED},
    setup::SlotInfo,
    sink::{Delivered, Sink},
    source::{Session, classify, close, open, replication_config, status_interval},
    stop::unless_stopped,
};

use self::{
    ack_metrics::AckMetrics,
    delivery::delivered,
    drain::drain,
    event::on_event,
    state::{State, confirm, remember, report_gauges},
    txn::{abort_open_transaction, commit, settle, transaction_timeout},
};
use crate::{carry::Carry, health::Shared};

/// Streams until shutdown (`Ok`) or a failure (`Err`, nothing confirmed past the failure).
pub(crate) async fn stream(
    cfg: &Config,
    slot: &SlotInfo,
    sink: &impl Sink,
    mut reports: mpsc::UnboundedReceiver<Delivered>,
    shutdown: &mut watch::Receiver<bool>,
    carry: &mut Carry,
    health: &Shared,
) -> Result<(), RelayError> {
    let interval = status_interval(cfg, slot.wal_sender_timeout);
    let pg = &cfg.postgres;
    let rcfg = replication_config(cfg, interval)?;

    // A server that accepts the connection and never answers must not delay a stop.
    let opened = unless_stopped(shutdown, open(cfg, rcfg, carry, slot.platform)).await;
    let Some(opened) = opened else {
        tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming (PostgreSQL did not answer)");
        return Ok(());
    };
    let opened = opened?;
    let (mut client, memory) = (opened.client, opened.memory);
    // The slot is ours: only now fence the producers of earlier holders (never the active
    // instance's while this one merely waits for the slot).
    if let Some(id) = &cfg.kafka.transactional_id {
        // This waits for Kafka's transaction coordinator; a stop must not wait for it.
        let fenced = unless_stopped(shutdown, sink.fence_and_begin(transaction_timeout(cfg))).await;
        let Some(fenced) = fenced else {
            client.abort();
            tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming (Kafka did not answer)");
            return Ok(());
        };
        fenced?;
        tracing::info!(transactional_id = %id, "{KAFKA_PRODUCER_FENCED_OTHERS}: earlier producers with this transactional id can no longer write");
    }
    // What Kafka already holds: read only now, after the fencing ended the previous holder's
    // transaction.
    let begun = checkpoints::start(
        cfg,
        slot.confirmed_flush,
        &opened.system_id,
        &opened.history,
        carry,
    );
    let Some(begun) = unless_stopped(shutdown, begun).await else {
        client.abort();
        tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming (reading the checkpoint)");
        return Ok(());
    };
    let begun = match begun {
        Ok(b) => b,
        Err(e) => {
            client.abort();
            return Err(e);
        }
    };
    health.set_streaming(true);
    metrics::gauge!(crate::metrics::OUTBOX_TABLES).set(cfg.outbox.len() as f64);
    metrics::gauge!(crate::metrics::MESSAGE_PREFIXES).set(cfg.message.len() as f64);
    tracing::info!(
        slot = %pg.slot, confirmed_flush = %begun.start,
        status_interval_ms = interval.as_millis() as u64, "{STREAMING_STARTED}"
    );

    let limits = Limits {
        records: cfg.relay.max_in_flight_records,
        bytes: cfg.relay.max_in_flight_bytes,
    };
    let transactional = cfg.kafka.transactional_id.is_some();
    let exactly_once = cfg.relay.delivery == Delivery::ExactlyOnce;
    let mut progress = Progress::new(begun.start, limits, transactional);
    if begun.checkpoints.is_some() {
        progress = progress.with_checkpoints(exactly_once);
    }
    let mut st = State {
        progress,
        decoder: Decoder::new(&cfg.outbox, cfg.relay.relay_headers)
            .with_oids(slot.outbox_oids.clone())
            .with_compat(slot.outbox_not_null.clone(), &run_id())
            .with_generated(slot.outbox_generated.clone()),
        messages: MessageRoutes::new(&cfg.message, cfg.relay.relay_headers),
        txn: None,
        policy: cfg.relay.on_poison,
        dead_letter_topic: cfg.relay.dead_letter_topic.clone(),
        only_source: state::only_source(cfg),
        refusals: &mut carry.refusals,
        published: &mut carry.published,
        memory,
        transactional,
        exactly_once,
        skip: begun.skip,
        skipped: 0,
        change_index: 0,
        checkpoints: begun.checkpoints,
        trail: begun.trail,
        acks: AckMetrics::new(),
        primer: None,
        committing: None,
        health,
    };
    confirm(&client, &mut st);
    // A state file that cannot be written is found now, not after a failover.
    let published = *st.published;
    st.memory
        .as_mut()
        .map_or(Ok(()), |m| m.save(published))
        .map_err(|e| {
            Definite::Precondition(format!(
                "cannot write relay.state_file {}: {e}; fix its directory's permissions or space, \
             or remove the option",
                cfg.relay
                    .state_file
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display()
            ))
        })?;
    let result = run_loop(cfg, sink, &mut client, &mut st, &mut reports, shutdown).await;
    health.set_streaming(false);
    remember(&mut st);
    match result {
        Ok(()) => {
            drain(cfg, sink, &mut client, &mut st, &mut reports, interval).await?;
            close(&mut client).await;
            tracing::info!(confirmed = %st.progress.confirmed(), "{SHUTDOWN_COMPLETE}");
            Ok(())
        }
        Err(e) => {
            carry.ignore_checkpoint = matches!(
                e,
                RelayError::Transient(Transient::CheckpointContradicted(_))
            );
            st.progress.fail();
            client.abort();
            if st.transactional {
                abort_open_transaction(cfg, sink, &e).await;
            }
            Err(e)
        }
    }
}

async fn run_loop(
    cfg: &Config,
    sink: &impl Sink,
    client: &mut impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut commit_tick =
        tokio::time::interval(Duration::from_millis(cfg.kafka.transaction_interval_ms));
    commit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let coalesce = Duration::from_micros(cfg.relay.read_coalesce_us);
    // With transactions, a quiet stream commits at once, but never sooner than this after the
    // last commit (the next commit is then timed for it): each commit costs the relay and the
    // brokers a round of transaction markers.
    let commit_gap = Duration::from_millis(cfg.kafka.commit_min_interval_ms);
    let mut last_commit: Option<Instant> = None;
    let mut quiet_commit_at: Option<Instant> = None;
    // Events handled since the stream last went quiet.
    let mut since_quiet = 0u32;
    let mut trickle = trickle::Trickle::default();
    // Since when the in-flight limits keep the loop from reading, and the acknowledged count
    // then (progress restarts the clock).
    let mut paused: Option<(Instant, u64)> = None;
    let release_after = Duration::from_millis(cfg.relay.backpressure_release_ms);
    let stop = shutdown.clone();
    // Checkpoints without records (idle progress) or outside transactions: at most this often.
    let checkpoint_every = status_interval(cfg, Duration::ZERO);
    let mut last_checkpoint: Option<Instant> = None;
    let checkpoint_due =
        |last: Option<Instant>| last.is_none_or(|t: Instant| t.elapsed() >= checkpoint_every);
    loop {
        let can_read = st.progress.can_read();
        paused = match paused {
            _ if can_read => None,
            Some((_, acked)) if acked != st.progress.acked() => {
                Some((Instant::now(), st.progress.acked()))
            }
            None => Some((Instant::now(), st.progress.acked())),
            p => p,
        };
        tokio::select! {
            biased;
            _ = shutdown.changed() => return Ok(()),
            // Timers before data: they are ready only when due, and during a catch-up the
            // stream and the reports are always ready, so after them the timers would starve
            // (no commit, no state-file write for as long as the backlog lasts).
            _ = commit_tick.tick(), if st.progress.kafka_commit_pending() => {
                (last_commit, quiet_commit_at) = (Some(Instant::now()), None);
                if !commit_unless(cfg, sink, client, st, reports, shutdown, paused, release_after).await? {
                    return Ok(());
                }
            }
            // A quiet commit waits for the running one to settle (the branch below) rather
            // than blocking the loop on it.
            _ = sleep_until_some(quiet_commit_at), if quiet_commit_at.is_some() && !st.progress.kafka_committing() => {
                (last_commit, quiet_commit_at) = (Some(Instant::now()), None);
                if st.progress.kafka_commit_pending()
                    && !commit_unless(cfg, sink, client, st, reports, shutdown, paused, release_after).await?
                {
                    return Ok(());
                }
            }
            _ = tick.tick() => {
                if let Some(fatal) = sink.fatal_error() {
                    return Err(fatal);
                }
                // While waiting for Kafka the loop reads nothing, so a dead replication
                // connection would go unnoticed: the slot may already be another instance's.
                // Stop now; dropping the producer purges what it still holds.
                if !can_read && !client.is_running() {
                    return Err(RelayError::from(Transient::replication("the replication connection closed while the relay waited for Kafka",
                    )));
                }
                if let Some(e) = paused.and_then(|(since, _)| release_due(since, release_after, st.health)) {
                    return Err(e);
                }
                remember(st);
                report_gauges(st);
                if checkpoint_due(last_checkpoint) && st.checkpoints.is_some() {
                    if !st.transactional {
                        if checkpoints::write_acknowledged(cfg, sink, st).await {
                            last_checkpoint = Some(Instant::now());
                        }
                    } else if st.progress.idle_checkpoint_due(st.skip.status()) {
                        // Exactly-once and idle: a checkpoint-only transaction lets the
                        // stream's progress be confirmed.
                        last_checkpoint = Some(Instant::now());
                        if !commit_unless(cfg, sink, client, st, reports, shutdown, paused, release_after).await? {
                            return Ok(());
                        }
                    }
                }
            }
            ended = running_commit(&mut st.committing), if st.committing.is_some() => {
                if let Some(running) = st.committing.take() {
                    settle(sink, client, st, reports, running, ended).await?;
                }
            }
            Some(d) = reports.recv() => {
                delivered(sink, st, reports, d).await?;
                // Drain whatever else is ready before confirming once.
                while let Ok(d) = reports.try_recv() {
                    delivered(sink, st, reports, d).await?;
                }
                confirm(client, st);
                // Records held back by a kick that waited for these reports go out now.
                if !st.transactional && cfg.kafka.flush_when_quiet {
                    sink.try_kick();
                }
                // Without transactions the checkpoint follows the acknowledgements; between
                // checkpoints the trail forgets what they passed, so it holds what is in flight.
                if !st.transactional && st.checkpoints.is_some() {
                    st.trail.acknowledged(st.progress.checkpoint_position());
                    if checkpoint_due(last_checkpoint)
                        && checkpoints::write_acknowledged(cfg, sink, st).await
                    {
                        last_checkpoint = Some(Instant::now());
                    }
                }
            }
            ev = client.recv(), if can_read => {
                // The events already received are handled here, up to EVENTS_PER_TURN,
                // without a turn through this select each (see EVENTS_PER_TURN).
                let mut next = Some(ev);
                let mut handled = 0;
                while let Some(ev) = next.take() {
                    match ev {
                        Ok(Some(ev)) => {
                            since_quiet += 1;
                            // Handling an event can wait for Kafka (a full queue, a suspect
                            // record's report): a stop must not wait for it. Pinned here: the
                            // (large) future is not moved again on every event.
                            let work = std::pin::pin!(on_event(cfg, sink, client, st, reports, ev));
                            match unless_stopped(&stop, work).await {
                                Some(r) => r?,
                                None => return Ok(()),
                            }
                        }
                        Ok(None) => return Err(RelayError::from(Transient::replication("the server closed the replication stream"))),
                        Err(e) => return Err(classify(e, cfg)),
                    }
                    handled += 1;
                    if handled < EVENTS_PER_TURN && st.progress.can_read() {
                        next = client.recv().now_or_never();
                    }
                }
            }
            // Nothing is ready: the stream went quiet (unless the task merely ran out of its
            // co-operative budget, which a busy catch-up does every ~128 events).
            _ = std::future::ready(()), if since_quiet > 0 => {
                let quiet = tokio::task::coop::has_budget_remaining();
                // Coalescing comes last in this branch: the kick and the quiet commit below
                // act on what was just read at once, not a pause later (at a trickle every
                // event paid the pause before it was sent).
                let coalescing = since_quiet < COALESCE_BELOW && quiet;
                let burst = since_quiet;
                since_quiet = 0;
                // Without transactions, a trickle goes out now rather than after linger.ms;
                // a busier stream keeps batching (trickle.rs says which is which). With
                // transactions the commit below sends it; kicking there too was measured
                // worse (p99 47.6 -> 73.8 ms at 1k events/s, 34.5 -> 142 at 10k).
                if quiet && trickle.quiet_after(burst) && !st.transactional && cfg.kafka.flush_when_quiet {
                    sink.kick();
                }
                // With transactions, commit as soon as the stream goes quiet: read-committed
                // consumers see an event about one commit after PostgreSQL committed it. While
                // the commit runs, the next events pile up and go into the next transaction.
                if quiet && st.progress.kafka_commit_pending() && quiet_commit_at.is_none() {
                    match last_commit.map(|t| t + commit_gap).filter(|at| *at > Instant::now()) {
                        Some(at) => quiet_commit_at = Some(at),
                        // Once the running commit settled.
                        None if st.progress.kafka_committing() => {
                            quiet_commit_at = Some(Instant::now());
                        }
                        None => {
                            last_commit = Some(Instant::now());
                            if !commit_unless(cfg, sink, client, st, reports, shutdown, paused, release_after).await? {
                                return Ok(());
                            }
                        }
                    }
                }
                if coalescing {
                    coalesce_reads(coalesce);
                }
            }
        }
    }
}

/// Waits until the running Kafka commit ended (never, if none runs: the branch is disabled
/// then anyway).
async fn running_commit(committing: &mut Option<state::Committing>) -> crate::sink::CommitEnded {
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

/// Commits the open Kafka transaction; `Ok(false)` if a stop came first. A commit waits for
/// Kafka, which may be away: neither a stop nor the release of the replication connection
/// may wait for it.
#[allow(clippy::too_many_arguments)]
async fn commit_unless(
    cfg: &Config,
    sink: &impl Sink,
    client: &impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    shutdown: &mut watch::Receiver<bool>,
    paused: Option<(Instant, u64)>,
    release_after: Duration,
) -> Result<bool, RelayError> {
    let since = paused.map_or_else(Instant::now, |(t, _)| t);
    let health = st.health;
    tokio::select! {
        r = commit(cfg, sink, client, st, reports) => r.map(|()| true),
        _ = shutdown.changed() => Ok(false),
        e = release_when_due(since, release_after, health) => Err(e),
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
/// channel's, which loses nothing then (on the current-thread runtime the worker that closes
/// the channel has also finished, so its end is read at once too).
const EVENTS_PER_TURN: u32 = 64;

/// A quiet moment after fewer events than this is a trickle worth coalescing.
const COALESCE_BELOW: u32 = 64;

/// Read-side coalescing (`relay.read_coalesce_us`). At a steady rate the walsender sends every
/// transaction as it commits, and the relay would wake up for each one: on two cores those
/// wake-ups cost more CPU than the events (bench/notes.md). Blocking this thread briefly — the
/// runtime is current-thread, so the replication reader and the pipeline both pause — lets the
/// next transactions pile up in the socket and arrive in one read. Delivery reports and status
/// updates wait as long at most; librdkafka's threads are not paused.
fn coalesce_reads(pause: Duration) {
    if !pause.is_zero() {
        std::thread::sleep(pause);
    }
}

/// This run's id, as Debezium 3.x's `__debezium.context.runId` header carries one per task
/// run: a UUID version 7 (time-ordered) string.
fn run_id() -> String {
    use rand::Rng as _;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let r: u128 = rand::rng().random();
    let v = (u128::from(ms) << 80) | (r & ((1u128 << 80) - 1));
    let v = (v & !(0xF << 76)) | (0x7 << 76);
    let v = (v & !(0x3 << 62)) | (0x2 << 62);
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}
