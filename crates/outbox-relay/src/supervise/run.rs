//! The supervisor: preflight, stream, and on a transient failure start over from the slot's
//! confirmed position after a capped, jittered backoff. Each attempt gets a fresh replication
//! connection and a fresh producer, so nothing from a failed attempt leaks into the next.
//!
//! Beside the supervisor, and independent of it, run the slot monitor, the HTTP endpoint and
//! the heartbeat, so they keep working while the stream or Kafka is down. The monitor gets one
//! poll before the first attempt (the alerts then describe the backlog the relay starts from),
//! and it can end the run: a lost slot stops the relay with a definite error, and the slot is
//! never re-created, and it can restart a stalled attempt (`alerts.stalled_secs`): the attempt
//! is dropped like a crash (nothing past the confirmed LSN was confirmed) and starts over.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use metrics_exporter_prometheus::PrometheusHandle;
use outbox_service::backoff::{self, Backoff};
use tokio::sync::{mpsc, oneshot, watch};

use crate::{
    config::{Config, HttpConfig},
    error::{RelayError, Transient},
    observe::health::Shared,
    observe::monitor::MonitorTask,
    observe::webhook::Dispatcher,
    pipeline,
    pipeline::stop::unless_stopped,
    postgres::setup::{self, SlotPolicy},
    sink::KafkaSink,
    supervise::heartbeat,
    telemetry::events::{
        HEAL_DONE, PIPELINE_RESTART, PIPELINE_RESTART_REPEATED, SETUP_OK, SHUTDOWN_COMPLETE,
        SOURCE_AT_CAPACITY,
    },
    telemetry::metrics as m,
    telemetry::source_scope::carry,
};

/// How long the first attempt waits for the monitor's first poll.
const FIRST_POLL_WAIT: Duration = Duration::from_secs(3);
/// How long queued webhook notifications may take at exit.
const WEBHOOK_FLUSH: Duration = Duration::from_secs(10);

/// Runs the relay until `shutdown` flips to true (returns `Ok`) or a definite error. With a
/// Prometheus handle, serves it on `[http]` and runs its upkeep. One database: a config with
/// `[source.<name>]` tables runs with [`crate::supervise::fleet::run`].
pub async fn run(
    cfg: &Config,
    shutdown: watch::Receiver<bool>,
    prom: Option<PrometheusHandle>,
) -> Result<(), RelayError> {
    let shared = Arc::new(Shared::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut helpers = tokio::task::JoinSet::new();
    if let Some(prom) = prom {
        endpoint(&mut helpers, &cfg.http, prom, shared.clone(), &stop_rx);
    }
    let result = run_source(Arc::new(cfg.clone()), shared, shutdown).await;
    let _ = stop_tx.send(true);
    helpers.shutdown().await;
    result
}

/// The process's HTTP endpoint and the Prometheus upkeep, until `stop` flips.
pub(crate) fn endpoint<V: outbox_service::console::View>(
    helpers: &mut tokio::task::JoinSet<()>,
    cfg: &HttpConfig,
    prom: PrometheusHandle,
    readiness: Arc<V>,
    stop: &watch::Receiver<bool>,
) {
    let upkeep = prom.clone();
    let mut upkeep_stop = stop.clone();
    helpers.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => upkeep.run_upkeep(),
                _ = upkeep_stop.changed() => return,
            }
        }
    });
    if cfg.enabled {
        let console = outbox_service::console::Console::new(readiness);
        helpers.spawn(console.clone().sample(prom.clone(), stop.clone()));
        helpers.spawn(outbox_service::http::serve(
            cfg.listen,
            prom,
            console,
            stop.clone(),
        ));
    }
}

/// One database: its slot monitor, heartbeat and slot keeper beside the supervisor, until
/// `shutdown` flips (`Ok`) or a definite error.
pub(crate) async fn run_source(
    cfg: Arc<Config>,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RelayError> {
    // Stops the helper tasks, whatever ended the run.
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut helpers = tokio::task::JoinSet::new();
    if cfg.heartbeat.enabled {
        helpers.spawn(carry(heartbeat::run(
            cfg.clone(),
            shared.clone(),
            stop_rx.clone(),
        )));
    }
    // PostgreSQL 18's idle_replication_slot_timeout: the slot is held while nothing streams.
    helpers.spawn(carry(crate::supervise::slot_keeper::run(
        cfg.clone(),
        shared.clone(),
        stop_rx.clone(),
    )));
    let (fatal_tx, mut fatal_rx) = mpsc::channel(1);
    let (first_tx, first_rx) = oneshot::channel();
    let monitor = crate::telemetry::source_scope::spawn(
        MonitorTask {
            cfg: cfg.clone(),
            shared: shared.clone(),
            webhook: Dispatcher::spawn(&cfg),
            fatal: fatal_tx,
            first_poll: Some(first_tx),
        }
        .run(stop_rx.clone()),
    );
    let _ = tokio::time::timeout(FIRST_POLL_WAIT, first_rx).await;

    let result = tokio::select! {
        r = supervise(&cfg, shutdown, &shared) => r,
        Some(e) = fatal_rx.recv() => Err(e),
    };
    shared.set_streaming(false);
    let _ = stop_tx.send(true);
    // The monitor's last notifications (a lost slot, say) go out before the process exits.
    if let Ok(Some(webhook)) = monitor.await {
        webhook.flush(WEBHOOK_FLUSH).await;
    }
    helpers.shutdown().await;
    result
}

/// Preflight and stream, restarting after transient failures.
async fn supervise(
    cfg: &Config,
    mut shutdown: watch::Receiver<bool>,
    shared: &Shared,
) -> Result<(), RelayError> {
    let initial = Duration::from_millis(cfg.relay.restart_backoff_initial_ms.max(1));
    let max = Duration::from_millis(cfg.relay.restart_backoff_max_ms).max(initial);
    let mut backoff = Backoff::new(initial, max);
    // Refused events and the server's identity, remembered across restarts.
    let mut carry = crate::postgres::carry::Carry::default();
    // A broken state file stops the relay before it connects anywhere.
    crate::postgres::failover::recall(cfg, &mut carry)?;
    let mut last_reason: Option<String> = None;
    loop {
        // relay.max_sources: a permit is held for the whole attempt, released when it ends.
        let Some(permit) = capacity(shared, &mut shutdown).await else {
            return Ok(());
        };
        let started = Instant::now();
        let outcome = tokio::select! {
            r = attempt(cfg, &mut shutdown, &mut carry, shared) => r,
            _ = shared.restart_requested() => {
                shared.set_streaming(false);
                Err(Transient::Stalled { secs: cfg.alerts.stalled_secs }.into())
            }
        };
        drop(permit);
        let err = match outcome {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        if *shutdown.borrow() {
            return Ok(());
        }
        metrics::counter!(m::RESTARTS, "reason" => err.reason()).increment(1);
        shared.set_passive(matches!(
            err,
            RelayError::Transient(Transient::SlotBusy { .. })
        ));
        // A refusal that will be dead-lettered is progress, not an outage: no escalation.
        if started.elapsed() > Duration::from_secs(60)
            || matches!(
                err,
                RelayError::Transient(Transient::DeadLetterPending { .. })
            )
        {
            backoff.reset();
        }
        // Log a reason once while it repeats; a new reason is logged again.
        let reason = err.to_string();
        if last_reason.as_deref() != Some(reason.as_str()) {
            tracing::warn!(reason = err.reason(), error = %err, retry_in_ms = backoff.peek().as_millis() as u64, "{PIPELINE_RESTART}");
            last_reason = Some(reason);
        } else {
            tracing::debug!(reason = err.reason(), "{PIPELINE_RESTART_REPEATED}");
        }
        // A passive instance: the slot is another's. It waits for the slot rather than the
        // backoff (which would reach relay.restart_backoff_max_ms and delay the takeover by as
        // much), and tries again as soon as the slot is free.
        if matches!(err, RelayError::Transient(Transient::SlotBusy { .. })) {
            backoff.reset();
            match unless_stopped(
                &shutdown,
                crate::postgres::passive::until_slot_free(cfg, max),
            )
            .await
            {
                None => return Ok(()),
                Some(true) => continue,
                Some(false) => {}
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff::jittered(backoff.next_wait())) => {}
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

/// A permit to attempt streaming (`Some(None)` without `relay.max_sources`), waiting while the
/// process streams as many sources as it may; `None` when a stop comes first.
async fn capacity(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Option<tokio::sync::OwnedSemaphorePermit>> {
    let Some(cap) = shared.capacity() else {
        return Some(None);
    };
    if let Ok(permit) = cap.clone().try_acquire_owned() {
        return Some(Some(permit));
    }
    // Waiting for capacity is a passive instance's job for this source: ready with role=any.
    shared.set_passive(true);
    tracing::info!(
        "{SOURCE_AT_CAPACITY}: this process streams relay.max_sources sources; this one waits \
         for one of them to stop (another instance may stream it meanwhile)"
    );
    if *shutdown.borrow() {
        return None;
    }
    tokio::select! {
        p = cap.clone().acquire_owned() => p.ok().map(Some),
        _ = shutdown.changed() => None,
    }
}

async fn attempt(
    cfg: &Config,
    shutdown: &mut watch::Receiver<bool>,
    carry: &mut crate::postgres::carry::Carry,
    shared: &Shared,
) -> Result<(), RelayError> {
    let policy = if cfg.postgres.create_slot {
        SlotPolicy::CreateIfMissing
    } else {
        SlotPolicy::MustExist
    };
    // Servers that accept a connection and never answer must not delay a stop.
    let prepared = unless_stopped(shutdown, async {
        let control = crate::postgres::control::connect(cfg).await?;
        let slot = setup::preflight(&control, cfg, policy).await?;
        drop(control);
        let (sink, reports) = KafkaSink::new(&cfg.kafka)?;
        sink.check_reachable(Duration::from_millis(cfg.kafka.connect_timeout_ms))
            .await?;
        Ok::<_, RelayError>((slot, sink, reports))
    })
    .await;
    let Some(prepared) = prepared else {
        tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming");
        return Ok(());
    };
    let (slot, sink, reports) = prepared?;
    if !carry.idle_timeout_told {
        carry.idle_timeout_told = true;
        slot.warn_idle_timeout(&cfg.postgres.slot);
    }
    // The replication session is the pipeline's from here on: the slot keeper stays away.
    let _lease = shared.slot_lease.lock().await;
    pipeline::stream(cfg, &slot, &sink, reports, shutdown, carry, shared).await
}

/// `outbox-relay setup`: checks everything, creates the publication and the slot if missing.
/// With `heal` (`setup --recreate-slot --heal`, the margin in ms): once the slot was replaced,
/// its gap is published from the outbox table before anything streams from the new slot
/// (`republish::heal`).
pub async fn setup(
    cfg: &Config,
    recreate_lost_slot: bool,
    heal: Option<u64>,
) -> Result<(), RelayError> {
    let control = crate::postgres::control::connect(cfg).await?;
    let policy = if recreate_lost_slot {
        SlotPolicy::RecreateIfLost
    } else {
        SlotPolicy::CreateIfMissing
    };
    let slot = setup::preflight(&control, cfg, policy).await?;
    slot.warn_idle_timeout(&cfg.postgres.slot);
    let (sink, _reports) = KafkaSink::new(&cfg.kafka)?;
    sink.check_reachable(Duration::from_millis(cfg.kafka.connect_timeout_ms))
        .await?;
    if let Some(margin_ms) = heal {
        if let Some(gap) = slot.gap {
            crate::republish::heal::heal(cfg, &slot.checkpoint_scope, gap, margin_ms).await?;
        } else {
            tracing::info!(
                slot = %cfg.postgres.slot,
                "{HEAL_DONE}: the slot was not lost, so there is no gap to heal"
            );
        }
    }
    tracing::info!(
        slot = %cfg.postgres.slot, publication = %cfg.postgres.publication,
        confirmed_flush = %slot.confirmed_flush, "{SETUP_OK}"
    );
    Ok(())
}
