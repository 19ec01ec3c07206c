//! Preflight and setup over a plain SQL connection: the checks that turn every failed
//! precondition into one actionable sentence, and the creation of the publication and the slot.
//!
//! Order matters: the publication is created **before** the slot, so the slot's first
//! transaction already sees it. A missing or invalidated slot is never re-created by `run`
//! unless `postgres.create_slot` says so; `setup --recreate-slot` is the explicit operator
//! command and states the gap it leaves.
//!
//! Here the two sequences, `preflight` and the slot's part of it (`ensure_slot`), and what they
//! report; the checks and steps are in the files named for what they look at: the server's
//! settings (`server`), the outbox tables (`outbox_shape`), an existing slot (`existing_slot`)
//! and a new one (`slot_creation`).

mod existing_slot;
mod outbox_shape;
mod server;
mod slot_creation;

use std::time::Duration;

use relay_core::{Lsn, platform::Platform};
use tokio_postgres::Client;

use existing_slot::{
    check_slot_database, check_slot_has_failover, check_slot_is_logical_pgoutput,
    check_slot_not_two_phase, look_up_slot,
};
use outbox_shape::check_outbox_tables;
use server::{
    check_failover_slot_version, check_server_version, check_wal_level_is_logical,
    idle_replication_slot_timeout, read_wal_sender_timeout,
};
use slot_creation::{check_missing_slot_may_be_created, create_slot, recreate_lost_slot};

use crate::{
    config::{Config, valid_identifier},
    error::{Definite, RelayError},
    postgres::publication::ensure_publication,
    sink::checkpoint_topic::Scope,
    telemetry::events::{SLOT_IDLE_TIMEOUT, SLOT_IN_USE},
};

/// What `run` needs to know from the server before it starts streaming.
#[derive(Debug, Clone)]
pub(crate) struct SlotInfo {
    pub(crate) confirmed_flush: Lsn,
    pub(crate) wal_sender_timeout: Duration,
    /// OID → configured `(schema, table)` of every outbox table: the stream matches tables by
    /// OID too, so a table renamed while in the publication is not taken for another.
    pub(crate) outbox_oids: std::collections::HashMap<u32, (String, String)>,
    /// OID → NOT NULL columns of every outbox table (`[outbox.debezium]` schemas' `optional`).
    pub(crate) outbox_not_null: std::collections::HashMap<u32, Vec<String>>,
    /// OID → generated columns of every outbox table (left out of row fingerprints).
    pub(crate) outbox_generated: std::collections::HashMap<u32, Vec<String>>,
    /// The managed service the server belongs to, for advice when the server refuses.
    pub(crate) platform: Platform,
    /// PostgreSQL 18's `idle_replication_slot_timeout`, when on.
    pub(crate) idle_timeout: Option<Duration>,
    /// The key the slot's checkpoints go under (a standby's slot has one of its own).
    pub(crate) checkpoint_scope: Scope,
    /// `setup --recreate-slot` replaced an invalidated slot, or created a missing one: the
    /// gap since the old slot's last confirmation is there to heal (a missing slot's only if
    /// a checkpoint says the slot existed).
    pub(crate) gap: Option<SlotGap>,
}

/// Why the slot is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotGap {
    /// PostgreSQL invalidated the old one (`wal_status = lost`).
    Lost,
    /// There was none (dropped by hand, or never created).
    Missing,
}

impl SlotInfo {
    /// Logs what an `idle_replication_slot_timeout` means for this relay (once per process:
    /// `setup`, and `run`'s first attempt).
    pub(crate) fn warn_idle_timeout(&self, slot: &str) {
        if let Some(w) = self
            .idle_timeout
            .and_then(relay_core::idle_timeout::warning)
        {
            tracing::warn!(slot = %slot, "{SLOT_IDLE_TIMEOUT}: {w}");
        }
    }
}

/// Whether a missing slot may be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotPolicy {
    /// `run` without `create_slot`: a missing slot is an error.
    MustExist,
    /// `setup`, or `run` with `create_slot = true`.
    CreateIfMissing,
    /// `setup --recreate-slot`: drop an invalidated slot and create a new one.
    RecreateIfLost,
}

/// Checks every precondition, creates what is missing and allowed, and reports the slot. The
/// checks, in this order: the server's settings and version, the standby's primary, the
/// role, the outbox tables, the publication, the slot (each one named for what it checks).
pub(crate) async fn preflight(
    client: &Client,
    cfg: &Config,
    policy: SlotPolicy,
) -> Result<SlotInfo, RelayError> {
    let pg = &cfg.postgres;
    debug_assert!(valid_identifier(&pg.slot) && valid_identifier(&pg.publication));

    let platform = crate::postgres::role::detect_platform(client).await?;
    check_wal_level_is_logical(client, cfg, platform).await?;
    let version = check_server_version(client, cfg).await?;
    // On a standby: its primary, when postgres.primary_host names it.
    let (scope, primary) =
        crate::postgres::standby::check(client, cfg, version, policy == SlotPolicy::RecreateIfLost)
            .await?;
    let on_standby = matches!(scope, Scope::Standby(_));
    let idle_timeout = idle_replication_slot_timeout(client).await?;
    crate::postgres::role::check(client, cfg, platform).await?;
    let outbox = check_outbox_tables(client, cfg).await?;

    ensure_publication(
        client,
        cfg,
        outbox.partitioned,
        !outbox.mapped_stored_generated.is_empty(),
        on_standby,
    )
    .await?;
    if !outbox.mapped_stored_generated.is_empty() {
        crate::postgres::publication::check_generated_columns(
            client,
            cfg,
            &outbox.mapped_stored_generated,
        )
        .await?;
    }
    let mut slot = ensure_slot(client, cfg, policy, platform, primary.as_ref()).await?;
    slot.platform = platform;
    slot.checkpoint_scope = scope;
    slot.idle_timeout = idle_timeout;
    slot.outbox_oids = outbox.oids;
    slot.outbox_not_null = outbox.not_null;
    slot.outbox_generated = outbox.generated;
    Ok(slot)
}

/// The slot, after its checks, in this order: `wal_sender_timeout` read, the failover flag's
/// PostgreSQL version, the slot found (or created, as `policy` allows), a logical pgoutput slot
/// of this database, not invalidated (or re-created, as `policy` allows), without two_phase,
/// with failover when asked for; another holder is logged.
async fn ensure_slot(
    client: &Client,
    cfg: &Config,
    policy: SlotPolicy,
    platform: Platform,
    primary: Option<&Client>,
) -> Result<SlotInfo, RelayError> {
    let pg = &cfg.postgres;
    let wal_sender_timeout = read_wal_sender_timeout(client).await?;
    check_failover_slot_version(client, cfg).await?;

    let Some(slot) = look_up_slot(client, cfg).await? else {
        check_missing_slot_may_be_created(cfg, policy)?;
        let Some(lsn) = create_slot(client, cfg, platform, primary).await? else {
            // Instances started together race to create it: the loser uses the winner's, which
            // exists now (streaming it, or waiting for it while the winner streams).
            return Box::pin(ensure_slot(
                client,
                cfg,
                SlotPolicy::MustExist,
                platform,
                primary,
            ))
            .await;
        };
        let gap = Some(SlotGap::Missing);
        return Ok(SlotInfo::of_slot(lsn, wal_sender_timeout, platform, gap));
    };

    check_slot_is_logical_pgoutput(cfg, &slot)?;
    check_slot_database(cfg, &slot)?;
    if let Some(why) = &slot.invalidation {
        if policy != SlotPolicy::RecreateIfLost {
            return Err(RelayError::from(Definite::Precondition(
                crate::postgres::slot::lost_message(
                    &pg.slot,
                    why,
                    slot.confirmed.and_then(|c| c.parse().ok()),
                ),
            )));
        }
        let new = recreate_lost_slot(client, cfg, platform, primary, why, &slot).await?;
        let gap = Some(SlotGap::Lost);
        return Ok(SlotInfo::of_slot(new, wal_sender_timeout, platform, gap));
    }
    check_slot_not_two_phase(client, cfg, &slot).await?;
    check_slot_has_failover(client, cfg).await?;
    if let Some(pid) = slot.active_pid {
        tracing::info!(slot = %pg.slot, active_pid = pid, "{SLOT_IN_USE}: another connection holds the slot; will wait for it");
    }
    let confirmed_flush = slot
        .confirmed
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(Lsn::ZERO);
    Ok(SlotInfo::of_slot(
        confirmed_flush,
        wal_sender_timeout,
        platform,
        None,
    ))
}

impl SlotInfo {
    /// The slot's part: from its confirmed position on (the outbox tables' part and the
    /// scope are `preflight`'s, filled in after).
    fn of_slot(
        confirmed_flush: Lsn,
        wal_sender_timeout: Duration,
        platform: Platform,
        gap: Option<SlotGap>,
    ) -> Self {
        SlotInfo {
            confirmed_flush,
            wal_sender_timeout,
            outbox_oids: Default::default(),
            outbox_not_null: Default::default(),
            outbox_generated: Default::default(),
            platform,
            idle_timeout: None,
            checkpoint_scope: Scope::Primary,
            gap,
        }
    }
}
