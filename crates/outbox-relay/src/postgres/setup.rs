//! Preflight and setup over a plain SQL connection: the checks that turn every failed
//! precondition into one actionable sentence, and the creation of the publication and the slot.
//!
//! Order matters: the publication is created **before** the slot, so the slot's first
//! transaction already sees it. A missing or invalidated slot is never re-created by `run`
//! unless `postgres.create_slot` says so; `setup --recreate-slot` is the explicit operator
//! command and states the gap it leaves.

use std::time::Duration;

use relay_core::{Lsn, platform::Platform, route::OutboxTable};
use tokio_postgres::Client;

use crate::{
    config::{Config, valid_identifier},
    error::{Definite, RelayError},
    postgres::control::{describe_pg, query_err, quote_ident},
    postgres::publication::ensure_publication,
    postgres::slot::server_version,
    sink::checkpoint_topic::Scope,
    telemetry::events::{
        SLOT_CREATED, SLOT_CREATED_BY_OTHER, SLOT_IDLE_TIMEOUT, SLOT_IN_USE, SLOT_RECREATED,
        STANDBY_SNAPSHOT_FAILED,
    },
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

/// The oldest PostgreSQL the relay streams from: pgoutput's `messages` option (the heartbeat,
/// logical messages) and streaming protocol version 2 need 14.
const MIN_SERVER_VERSION: i32 = 140_000;

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

/// `wal_level = logical`: without it there is no logical decoding.
async fn check_wal_level_is_logical(
    client: &Client,
    cfg: &Config,
    platform: Platform,
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    let wal_level: String = client
        .query_one("SELECT current_setting('wal_level')", &[])
        .await
        .map_err(query_err("read wal_level"))?
        .get(0);
    if wal_level != "logical" {
        return Err(RelayError::from(Definite::Precondition(format!(
            "wal_level is {wal_level:?} on {}:{} ({}): {}",
            pg.host,
            pg.port,
            platform.name(),
            platform.wal_level_switch()
        ))));
    }
    Ok(())
}

/// PostgreSQL 14 or later ([`MIN_SERVER_VERSION`]); the server's version number.
async fn check_server_version(client: &Client, cfg: &Config) -> Result<i32, RelayError> {
    let pg = &cfg.postgres;
    let version = server_version(client)
        .await
        .map_err(query_err("read server_version_num"))?;
    if version < MIN_SERVER_VERSION {
        return Err(RelayError::from(Definite::Precondition(format!(
            "{}:{} runs PostgreSQL {}.{}, and outbox-relay needs PostgreSQL 14 or later (pgoutput's \
             `messages` option and protocol version 2 start there): upgrade the server, e.g. \
             with pg_upgrade",
            pg.host,
            pg.port,
            version / 10_000,
            version % 10_000
        ))));
    }
    Ok(version)
}

/// PostgreSQL 18: a slot no connection uses for longer than this is invalidated (`None`: off,
/// or an older server).
async fn idle_replication_slot_timeout(client: &Client) -> Result<Option<Duration>, RelayError> {
    Ok(client
        .query_opt(
            "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_replication_slot_timeout'",
            &[],
        )
        .await
        .map_err(query_err("read idle_replication_slot_timeout"))?
        .map(|r| r.get::<_, i64>(0))
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s as u64)))
}

/// What the checks of the `[[outbox]]` tables found, by table OID.
#[derive(Default)]
struct OutboxTables {
    /// One of them is partitioned (the publication must publish via the root).
    partitioned: bool,
    oids: std::collections::HashMap<u32, (String, String)>,
    not_null: std::collections::HashMap<u32, Vec<String>>,
    generated: std::collections::HashMap<u32, Vec<String>>,
    /// Mapped columns that are stored generated ones: the publication must carry them.
    mapped_stored_generated: Vec<String>,
}

/// Each `[[outbox]]` table, in the configured order: it exists, is a table, has every mapped
/// column, and none of them is a virtual generated column.
async fn check_outbox_tables(client: &Client, cfg: &Config) -> Result<OutboxTables, RelayError> {
    let mut found = OutboxTables::default();
    for t in &cfg.outbox {
        let (schema, table) = t.qualified_name();
        let row = look_up_outbox_table(client, cfg, &schema, &table).await?;
        let kind: String = row.get(0);
        found.partitioned |= kind == "p";
        check_is_table(&schema, &table, &kind)?;
        check_mapped_columns_exist(t, &schema, &table, &row.get::<_, Vec<String>>(3))?;
        // Generated columns: `name:s` (stored) or `name:v` (virtual, PostgreSQL 18).
        let generated: Vec<(String, String)> = row
            .get::<_, Vec<String>>(5)
            .into_iter()
            .filter_map(|g| {
                g.rsplit_once(':')
                    .map(|(n, k)| (n.to_string(), k.to_string()))
            })
            .collect();
        found
            .mapped_stored_generated
            .extend(check_mapped_columns_not_virtual(
                t, &schema, &table, &generated,
            )?);
        let oid: u32 = row.get(2);
        found.not_null.insert(oid, row.get::<_, Vec<String>>(4));
        found
            .generated
            .insert(oid, generated.into_iter().map(|(n, _)| n).collect());
        found.oids.insert(oid, (schema, table));
    }
    Ok(found)
}

/// The outbox table `schema.table` exists: its kind, whether the role may read it, its OID, and
/// its columns (all, NOT NULL, generated as `name:kind`).
async fn look_up_outbox_table(
    client: &Client,
    cfg: &Config,
    schema: &str,
    table: &str,
) -> Result<tokio_postgres::Row, RelayError> {
    let row = client
        .query_opt(
            "SELECT c.relkind::text, has_table_privilege(c.oid, 'SELECT'), c.oid, \
                    ARRAY(SELECT attname::text FROM pg_attribute \
                           WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped), \
                    ARRAY(SELECT attname::text FROM pg_attribute \
                           WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped \
                             AND attnotnull), \
                    ARRAY(SELECT attname::text || ':' || attgenerated::text FROM pg_attribute \
                           WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped \
                             AND attgenerated <> '') \
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &table],
        )
        .await
        .map_err(query_err("look up the outbox table"))?;
    row.ok_or_else(|| {
        RelayError::from(Definite::Precondition(format!(
            "outbox table {schema}.{table} does not exist in database {:?}: create it (see \
             migrations/) or fix [[outbox]] table",
            cfg.postgres.database
        )))
    })
}

/// The outbox table is a table or a partitioned one (relkind `r` or `p`), not a view.
fn check_is_table(schema: &str, table: &str, kind: &str) -> Result<(), RelayError> {
    if kind != "r" && kind != "p" {
        return Err(RelayError::from(Definite::Precondition(format!(
            "{schema}.{table} is not a table (relkind {kind}): point [[outbox]] table at the \
             outbox table itself"
        ))));
    }
    Ok(())
}

/// Every column `[[outbox]]` maps is one of the table's `columns`.
fn check_mapped_columns_exist(
    t: &OutboxTable,
    schema: &str,
    table: &str,
    columns: &[String],
) -> Result<(), RelayError> {
    for (column, role) in t.mapped_columns() {
        if !columns.contains(&column) {
            return Err(RelayError::from(Definite::Precondition(format!(
                "outbox table {schema}.{table} has no column {column:?}, which [[outbox]] \
                 configures as {role}; its columns are {}: fix the mapping or add the \
                 column",
                columns.join(", ")
            ))));
        }
    }
    Ok(())
}

/// No mapped column is a virtual generated column (PostgreSQL 18; never published); the
/// mapped stored generated ones, as `schema.table.column`.
fn check_mapped_columns_not_virtual(
    t: &OutboxTable,
    schema: &str,
    table: &str,
    generated: &[(String, String)],
) -> Result<Vec<String>, RelayError> {
    let mut stored = Vec::new();
    for (column, role) in t.mapped_columns() {
        match generated
            .iter()
            .find(|(n, _)| *n == column)
            .map(|(_, k)| k.as_str())
        {
            Some("v") => {
                return Err(RelayError::from(Definite::Precondition(format!(
                    "column {column:?} of {schema}.{table}, configured as {role}, is a \
                     virtual generated column, which logical replication never publishes: \
                     make it STORED (PostgreSQL 18 publishes stored generated columns with \
                     publish_generated_columns = stored) or map another column"
                ))));
            }
            Some(_) => stored.push(format!("{schema}.{table}.{column}")),
            None => {}
        }
    }
    Ok(stored)
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

/// `wal_sender_timeout`, in milliseconds whatever its unit.
async fn read_wal_sender_timeout(client: &Client) -> Result<Duration, RelayError> {
    let wal_sender_timeout_ms: i64 = client
        .query_one(
            "SELECT setting::bigint * CASE unit WHEN 's' THEN 1000 ELSE 1 END \
               FROM pg_settings WHERE name = 'wal_sender_timeout'",
            &[],
        )
        .await
        .map_err(query_err("read wal_sender_timeout"))?
        .get(0);
    Ok(Duration::from_millis(wal_sender_timeout_ms.max(0) as u64))
}

/// `postgres.failover_slot` needs PostgreSQL 17 (failover slots start there).
async fn check_failover_slot_version(client: &Client, cfg: &Config) -> Result<(), RelayError> {
    if !cfg.postgres.failover_slot {
        return Ok(());
    }
    let version = server_version(client)
        .await
        .map_err(query_err("read server_version_num"))?;
    if version < 170_000 {
        return Err(RelayError::from(Definite::Precondition(format!(
            "postgres.failover_slot = true needs PostgreSQL 17 or later, and this server is \
             {version}: set it to false (docs/operations.md, \"Failover\", says how to keep \
             the slot on a promoted standby without it)"
        ))));
    }
    Ok(())
}

/// The slot as `pg_replication_slots` shows it.
struct FoundSlot {
    plugin: Option<String>,
    slot_type: String,
    database: Option<String>,
    active_pid: Option<i32>,
    confirmed: Option<String>,
    /// Why PostgreSQL invalidated it, if it did.
    invalidation: Option<relay_core::invalidation::Invalidation>,
}

/// The slot `postgres.slot`, if it exists.
async fn look_up_slot(client: &Client, cfg: &Config) -> Result<Option<FoundSlot>, RelayError> {
    let slot = client
        .query_opt(
            "SELECT plugin, slot_type, database, active_pid, wal_status, \
                    confirmed_flush_lsn::text, to_jsonb(s)->>'invalidation_reason', \
                    pg_is_in_recovery() \
               FROM pg_replication_slots s WHERE slot_name = $1",
            &[&cfg.postgres.slot],
        )
        .await
        .map_err(query_err("look up the replication slot"))?;
    Ok(slot.map(|slot| {
        let wal_status: Option<String> = slot.get(4);
        FoundSlot {
            plugin: slot.get(0),
            slot_type: slot.get(1),
            database: slot.get(2),
            active_pid: slot.get(3),
            confirmed: slot.get(5),
            // invalidation_reason (17+) through to_jsonb: NULL where the server's view has no
            // such column.
            invalidation: relay_core::invalidation::Invalidation::of(
                wal_status.as_deref(),
                slot.get::<_, Option<String>>(6).as_deref(),
                slot.get::<_, bool>(7),
            ),
        }
    }))
}

/// A missing slot is created only when `policy` allows it (`run` needs `create_slot`).
fn check_missing_slot_may_be_created(cfg: &Config, policy: SlotPolicy) -> Result<(), RelayError> {
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

/// The slot is a logical one with the pgoutput plugin.
fn check_slot_is_logical_pgoutput(cfg: &Config, slot: &FoundSlot) -> Result<(), RelayError> {
    let slot_type = &slot.slot_type;
    if slot_type != "logical" || slot.plugin.as_deref() != Some("pgoutput") {
        return Err(RelayError::from(Definite::Precondition(format!(
            "replication slot {:?} is a {slot_type} slot with plugin {:?}; outbox-relay needs a \
             logical slot with pgoutput: choose another postgres.slot",
            cfg.postgres.slot,
            slot.plugin.clone().unwrap_or_default()
        ))));
    }
    Ok(())
}

/// The slot belongs to `postgres.database`.
fn check_slot_database(cfg: &Config, slot: &FoundSlot) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    if slot.database.as_deref() != Some(pg.database.as_str()) {
        return Err(RelayError::from(Definite::Precondition(format!(
            "replication slot {:?} belongs to database {:?}, not {:?}: choose another \
             postgres.slot or fix postgres.database",
            pg.slot,
            slot.database.clone().unwrap_or_default(),
            pg.database
        ))));
    }
    Ok(())
}

/// `setup --recreate-slot` on an invalidated slot (`why`): drops it and creates a new one;
/// the new slot's position. The gap between the two is logged.
async fn recreate_lost_slot(
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

/// One flag of the slot (`sql` selects it from `pg_replication_slots`), read to `what`.
async fn read_slot_flag(
    client: &Client,
    cfg: &Config,
    sql: &'static str,
    what: &'static str,
) -> Result<bool, RelayError> {
    Ok(client
        .query_one(sql, &[&cfg.postgres.slot])
        .await
        .map_err(query_err(what))?
        .get(0))
}

/// The slot was not created with two_phase (PostgreSQL 15+ can; prepared transactions would
/// come before their commit).
async fn check_slot_not_two_phase(
    client: &Client,
    cfg: &Config,
    slot: &FoundSlot,
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    let two_phase = read_slot_flag(
        client,
        cfg,
        "SELECT two_phase FROM pg_replication_slots WHERE slot_name = $1",
        "read the slot's two_phase flag",
    )
    .await?;
    if two_phase {
        return Err(RelayError::from(Definite::Precondition(format!(
            "replication slot {:?} was created with two_phase = true, so PostgreSQL sends \
             prepared transactions (PREPARE TRANSACTION) before they commit, and outbox-relay \
             publishes committed transactions only. On PostgreSQL 18 or later, while no relay \
             streams from it, run psql \"dbname={} replication=database\" -c \
             'ALTER_REPLICATION_SLOT {} (TWO_PHASE false)' (its position is kept). Before 18 the \
             flag cannot be changed: drop the slot and run `outbox-relay setup` to create one \
             without it; events committed between the old slot's confirmed position ({}) and \
             the new slot's creation are NOT relayed and must be re-published from the outbox \
             table (docs/operations.md)",
            pg.slot,
            pg.database,
            quote_ident(&pg.slot),
            slot.confirmed.as_deref().unwrap_or("unknown")
        ))));
    }
    Ok(())
}

/// With `postgres.failover_slot` (PostgreSQL 17+): the slot was created with failover, so
/// standbys keep a copy of it.
async fn check_slot_has_failover(client: &Client, cfg: &Config) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    if !pg.failover_slot {
        return Ok(());
    }
    let failover = read_slot_flag(
        client,
        cfg,
        "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
        "read the slot's failover flag",
    )
    .await?;
    if !failover {
        return Err(RelayError::from(Definite::Precondition(format!(
            "postgres.failover_slot = true, but replication slot {:?} was created without \
             failover, so standbys do not keep a copy of it: while no relay streams from it, \
             run psql \"dbname={} replication=database\" -c 'ALTER_REPLICATION_SLOT {} \
             (FAILOVER true)' (its position is kept), or set postgres.failover_slot = false",
            pg.slot,
            pg.database,
            quote_ident(&pg.slot)
        ))));
    }
    Ok(())
}

/// Creates the slot: its LSN, or `None` when another connection created it first (between
/// this one's look-up and its create).
async fn create_slot(
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
