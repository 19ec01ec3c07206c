//! The passive instance's wait: another instance holds the slot (the lease), and this one takes
//! over as soon as the slot is free.
//!
//! Invariant: the wait decides only *when* to try again; taking the slot is still the full
//! attempt (preflight, producer, `START_REPLICATION`), which PostgreSQL lets only one connection
//! win. Polling is cheap and bounded: one connection and one row a second per passive instance,
//! instead of a preflight and a producer per retry on the escalating backoff, whose 30 s default
//! cap was also the takeover time after the active instance died.

use std::time::Duration;

use rand::Rng as _;

use crate::{
    config::Config,
    postgres::control::query_err,
    telemetry::events::{SLOT_FREED, SLOT_POLL_FAILED},
};

/// How often a passive instance looks at the slot.
const POLL: Duration = Duration::from_secs(1);

/// Waits until the slot is free (not active, or gone) and returns `true`, so that the caller
/// tries again at once; `false` after `at_most` or when the server cannot be asked, so that
/// the caller falls back to its backoff.
pub(crate) async fn until_slot_free(cfg: &Config, at_most: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + at_most;
    let Ok(client) = crate::postgres::control::connect(cfg).await else {
        return false;
    };
    loop {
        let row = client
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&cfg.postgres.slot],
            )
            .await
            .map_err(query_err("look at the replication slot"));
        match row {
            Err(e) => {
                tracing::debug!(error = %e, "{SLOT_POLL_FAILED}");
                return false;
            }
            Ok(row) if row.as_ref().is_none_or(|r| !r.get::<_, bool>(0)) => {
                tracing::info!(slot = %cfg.postgres.slot, "{SLOT_FREED}: taking it over");
                return true;
            }
            Ok(_) => {}
        }
        // Several passive instances do not poll in step.
        let pause = POLL.mul_f64(rand::rng().random_range(0.8..1.2));
        if tokio::time::Instant::now() + pause > deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
    }
}
