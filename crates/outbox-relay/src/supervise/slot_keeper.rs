//! The slot keeper: holds the relay's slot against PostgreSQL 18's
//! `idle_replication_slot_timeout` while the relay is not streaming from it.
//!
//! Invariant (relay_core::idle_timeout): a running relay never lets its own slot go idle past
//! the timeout, and holding it never moves it. A hold is a replication connection that starts
//! at the slot's own position and closes at once: it reads nothing into the pipeline and sends
//! no position beyond what the slot already confirmed. It runs only while the supervisor holds
//! no replication session ([`Shared::slot_lease`]), so it never takes the slot from this
//! relay's own pipeline; another instance that streams from the slot keeps it active, and a
//! slot that is active is never touched. Its own SQL connection; the setting is read on every
//! check (it is reloadable).

use std::{sync::Arc, time::Duration};

use relay_core::idle_timeout::{check_every, hold_due};
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::{
    config::Config,
    error::RelayError,
    observe::health::Shared,
    postgres::session::{classify, close, replication_config},
    telemetry::events::{SLOT_HELD_IDLE, SLOT_KEEPER_FAILED},
};

/// The slot's view for the keeper: the timeout (`None` before 18 or off), whether a connection
/// holds the slot, and for how long it has been idle.
async fn read(
    client: &Client,
    slot: &str,
) -> Result<(Option<Duration>, bool, Option<Duration>), tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT (SELECT setting::bigint FROM pg_settings \
                      WHERE name = 'idle_replication_slot_timeout'), \
                    coalesce(s.active, true), \
                    extract(epoch FROM now() - (to_jsonb(s)->>'inactive_since')::timestamptz) \
                      ::float8 \
               FROM (SELECT 1) AS one \
               LEFT JOIN pg_replication_slots s ON s.slot_name = $1",
            &[&slot],
        )
        .await?;
    let timeout = row
        .get::<_, Option<i64>>(0)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s as u64));
    let idle = row
        .get::<_, Option<f64>>(2)
        .map(|s| Duration::from_secs_f64(s.max(0.0)));
    Ok((timeout, row.get(1), idle))
}

/// Acquires the slot for a moment: start replication at the slot's own position, then close.
async fn hold(cfg: &Config) -> Result<(), RelayError> {
    let rcfg = replication_config(cfg, Duration::from_secs(1))?;
    let mut client = pgwire_replication::ReplicationClient::connect_gated(rcfg)
        .await
        .map_err(|e| classify(e, cfg))?;
    let started = async {
        client.start().await?;
        client.wait_started().await
    }
    .await;
    close(&mut client).await;
    started.map_err(|e| classify(e, cfg))
}

/// Runs until `stop` flips.
pub(crate) async fn run(cfg: Arc<Config>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let slot = cfg.postgres.slot.clone();
    let mut conn: Option<Client> = None;
    // The first look comes at once: the setting decides how often to look after it.
    let mut every = Duration::ZERO;
    let mut failing = false;
    // Holding since the slot was last active: the first hold of a spell is logged at info.
    let mut holding = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            conn = crate::postgres::control::connect(&cfg).await.ok();
        }
        let Some(client) = conn.as_ref() else {
            every = check_every(None).min(Duration::from_secs(5));
            continue;
        };
        let (timeout, active, idle) = match read(client, &slot).await {
            Ok(v) => v,
            Err(_) => {
                conn = None;
                continue;
            }
        };
        every = check_every(timeout);
        holding &= !active;
        if !hold_due(timeout, active, idle) {
            continue;
        }
        // Not while this relay's pipeline holds (or is opening) its own session.
        let Ok(_lease) = shared.slot_lease.try_lock() else {
            continue;
        };
        match hold(&cfg).await {
            Ok(()) if holding => {
                failing = false;
                tracing::debug!(slot = %slot, "{SLOT_HELD_IDLE}: held again");
            }
            Ok(()) => {
                failing = false;
                holding = true;
                tracing::info!(
                    slot = %slot,
                    idle_secs = idle.map_or(0, |d| d.as_secs()),
                    timeout_secs = timeout.map_or(0, |d| d.as_secs()),
                    "{SLOT_HELD_IDLE}: the slot was idle for half of idle_replication_slot_timeout \
                     while the relay was not streaming; it was acquired and released (nothing \
                     read, nothing confirmed), and will be while the relay does not stream"
                );
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(slot = %slot, error = %e, "{SLOT_KEEPER_FAILED}: could not hold the idle slot; retrying at the next check");
            }
            Err(_) => {}
        }
    }
}
