//! Creating the slot: a missing one (when the `SlotPolicy` allows it), or an invalidated one
//! dropped and created again by `setup --recreate-slot`, whose gap is logged.
//!
//! Invariant: a slot another connection created between this one's look-up and its create is
//! never dropped: `create_slot` answers `None`, and the caller uses that slot (or, re-creating
//! a lost one, refuses).

use std::time::Duration;

use relay_core::{Lsn, platform::Platform};
use tokio_postgres::Client;

use super::{SlotPolicy, existing_slot::FoundSlot};
use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::{describe_pg, query_err, quote_ident},
    telemetry::events::{
        SLOT_CREATED, SLOT_CREATED_BY_OTHER, SLOT_RECREATED, STANDBY_SNAPSHOT_FAILED,
    },
};

/// A missing slot is created only when `policy` allows it (`run` needs `create_slot`).
pub(super) fn check_missing_slot_may_be_created(
    cfg: &Config,
    policy: SlotPolicy,
) -> Result<(), RelayError> {
    if policy == SlotPolicy::MustExist {
        return Err(RelayError::from(Definite::Precondition(format!(
            "replication slot {:?} does not exist. On a first start run `outbox-relay setup` \
             to create it. If it existed before, it was dropped and every event committed \
             since then is missing from Kafka: create it with `outbox-relay setup`, then \
             re-publish the missing events from the outbox table (docs/operations.md)",
            cfg.postgres.slot
        ))));
    }
    Ok(())
}

/// `setup --recreate-slot` on an invalidated slot (`why`): drops it and creates a new one;
/// the new slot's position. The gap between the two is logged.
pub(super) async fn recreate_lost_slot(
    client: &Client,
    cfg: &Config,
    platform: Platform,
    primary: Option<&Client>,
    why: &relay_core::invalidation::Invalidation,
    slot: &FoundSlot,
) -> Result<Lsn, RelayError> {
    let pg = &cfg.postgres;
    let old = slot.confirmed.clone().unwrap_or_else(|| "unknown".into());
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&pg.slot])
        .await
        .map_err(query_err("drop the invalidated slot"))?;
    let Some(new) = create_slot(client, cfg, platform, primary).await? else {
        return Err(RelayError::from(Definite::Precondition(format!(
            "replication slot {:?} was created again by another connection while this one \
             re-created it (a relay instance with postgres.create_slot = true?): stop the other \
             instances and run `outbox-relay setup --recreate-slot` again",
            pg.slot
        ))));
    };
    tracing::warn!(
        slot = %pg.slot, reason = why.label(), gap_from = %old, gap_to = %new,
        "{SLOT_RECREATED}: events committed between these LSNs were not relayed; \
         `setup --recreate-slot --heal` re-publishes them from the outbox table"
    );
    if !cfg.message.is_empty() {
        tracing::warn!(
            slot = %pg.slot,
            "{SLOT_RECREATED}: [[message]] sections publish logical messages, which are \
             in no table: the messages of the gap cannot be re-published, only rebuilt \
             from the business tables"
        );
    }
    Ok(new)
}

/// Creates the slot: its LSN, or `None` when another connection created it first (between
/// this one's look-up and its create).
pub(super) async fn create_slot(
    client: &Client,
    cfg: &Config,
    platform: Platform,
    primary: Option<&Client>,
) -> Result<Option<Lsn>, RelayError> {
    let (slot, failover) = (&cfg.postgres.slot, cfg.postgres.failover_slot);
    // The five-argument form (temporary, two_phase, failover) exists from PostgreSQL 17 on.
    let sql = if failover {
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)"
    } else {
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')"
    };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [slot];
    let created = client.query_one(sql, &params);
    // On a standby the slot waits for a running-transactions record from the primary, which an
    // idle primary writes rarely: ask for one until the slot exists.
    let row = match primary {
        None => created.await,
        Some(primary) => {
            let nudge = async {
                let mut told = false;
                loop {
                    if let Err(e) = primary
                        .batch_execute("SELECT pg_log_standby_snapshot()")
                        .await
                        && !told
                    {
                        told = true;
                        tracing::warn!(
                            error = %describe_pg(&e),
                            "{STANDBY_SNAPSHOT_FAILED}: cannot ask the primary for a \
                             running-transactions record; the slot waits for the primary's own \
                             (grant EXECUTE ON FUNCTION pg_log_standby_snapshot() to the role)"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            };
            tokio::select! {
                r = created => r,
                never = nudge => never,
            }
        }
    };
    if let Err(e) = &row
        && e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT)
    {
        tracing::info!(slot = %slot, "{SLOT_CREATED_BY_OTHER}: another instance created the slot first; using it");
        return Ok(None);
    }
    let row = row.map_err(|e| {
        let refused = e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE);
        let advice = if refused {
            format!(
                "the server does not let role {:?} replicate: {} (docs/platforms.md)",
                cfg.postgres.user,
                platform.replication_grant(&quote_ident(&cfg.postgres.user))
            )
        } else {
            "check max_replication_slots, that the role may replicate, and that \
             postgres.failover_slot is only set on PostgreSQL 17 or later"
                .to_string()
        };
        Definite::Precondition(format!(
            "cannot create replication slot {slot:?}: {}; {advice}",
            describe_pg(&e)
        ))
    })?;
    let lsn: String = row.get(0);
    tracing::info!(slot = %slot, lsn = %lsn, "{SLOT_CREATED}: events committed from this LSN on will be relayed");
    Ok(Some(lsn.parse().unwrap_or(Lsn::ZERO)))
}
