//! The supervisor: preflight, stream, and on a transient failure start over from the slot's
//! confirmed position after a capped, jittered backoff. Each attempt gets a fresh replication
//! connection and a fresh producer, so nothing from a failed attempt leaks into the next.

use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::watch;

use crate::{
    config::Config,
    error::RelayError,
    metrics as m, pipeline,
    setup::{self, SlotPolicy},
    sink::KafkaSink,
};

/// Runs until `shutdown` flips to true (returns `Ok`) or a definite error.
pub async fn run(cfg: &Config, mut shutdown: watch::Receiver<bool>) -> Result<(), RelayError> {
    let initial = Duration::from_millis(cfg.relay.restart_backoff_initial_ms.max(1));
    let max = Duration::from_millis(cfg.relay.restart_backoff_max_ms).max(initial);
    let mut backoff = initial;
    let mut last_reason: Option<String> = None;
    loop {
        let started = Instant::now();
        let err = match attempt(cfg, &mut shutdown).await {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        if *shutdown.borrow() {
            return Ok(());
        }
        metrics::counter!(m::RESTARTS, "reason" => err.reason()).increment(1);
        if started.elapsed() > Duration::from_secs(60) {
            backoff = initial;
        }
        // Log a reason once while it repeats; a new reason is logged again.
        let reason = err.to_string();
        if last_reason.as_deref() != Some(reason.as_str()) {
            tracing::warn!(reason = err.reason(), error = %err, retry_in_ms = backoff.as_millis() as u64, "pipeline_restart");
            last_reason = Some(reason);
        } else {
            tracing::debug!(reason = err.reason(), "pipeline_restart_repeated");
        }
        let jittered = backoff.mul_f64(rand::rng().random_range(0.5..1.0));
        tokio::select! {
            _ = tokio::time::sleep(jittered) => {}
            _ = shutdown.changed() => return Ok(()),
        }
        backoff = (backoff * 2).min(max);
    }
}

async fn attempt(cfg: &Config, shutdown: &mut watch::Receiver<bool>) -> Result<(), RelayError> {
    let control = setup::connect(cfg).await?;
    let policy = if cfg.postgres.create_slot {
        SlotPolicy::CreateIfMissing
    } else {
        SlotPolicy::MustExist
    };
    let slot = setup::preflight(&control, cfg, policy).await?;
    drop(control);
    let (sink, reports) = KafkaSink::new(&cfg.kafka)?;
    sink.check_reachable(Duration::from_millis(cfg.kafka.connect_timeout_ms))
        .await?;
    pipeline::stream(cfg, &slot, &sink, reports, shutdown).await
}

/// `outbox-relay setup`: checks everything, creates the publication and the slot if missing.
pub async fn setup(cfg: &Config, recreate_lost_slot: bool) -> Result<(), RelayError> {
    let control = setup::connect(cfg).await?;
    let policy = if recreate_lost_slot {
        SlotPolicy::RecreateIfLost
    } else {
        SlotPolicy::CreateIfMissing
    };
    let slot = setup::preflight(&control, cfg, policy).await?;
    let (sink, _reports) = KafkaSink::new(&cfg.kafka)?;
    sink.check_reachable(Duration::from_millis(cfg.kafka.connect_timeout_ms))
        .await?;
    tracing::info!(
        slot = %cfg.postgres.slot, publication = %cfg.postgres.publication,
        confirmed_flush = %slot.confirmed_flush, "setup_ok"
    );
    Ok(())
}
