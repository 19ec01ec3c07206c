//! The slot `postgres.slot` as `pg_replication_slots` shows it, and the checks an existing slot
//! must pass: a logical pgoutput slot of this database, without two_phase, with failover when
//! `postgres.failover_slot` asks for it.

use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::{query_err, quote_ident},
};

/// The slot as `pg_replication_slots` shows it.
pub(super) struct FoundSlot {
    plugin: Option<String>,
    slot_type: String,
    database: Option<String>,
    pub(super) active_pid: Option<i32>,
    pub(super) confirmed: Option<String>,
    /// Why PostgreSQL invalidated it, if it did.
    pub(super) invalidation: Option<relay_core::invalidation::Invalidation>,
}

/// The slot `postgres.slot`, if it exists.
pub(super) async fn look_up_slot(
    client: &Client,
    cfg: &Config,
) -> Result<Option<FoundSlot>, RelayError> {
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

/// The slot is a logical one with the pgoutput plugin.
pub(super) fn check_slot_is_logical_pgoutput(
    cfg: &Config,
    slot: &FoundSlot,
) -> Result<(), RelayError> {
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
pub(super) fn check_slot_database(cfg: &Config, slot: &FoundSlot) -> Result<(), RelayError> {
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
pub(super) async fn check_slot_not_two_phase(
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
pub(super) async fn check_slot_has_failover(
    client: &Client,
    cfg: &Config,
) -> Result<(), RelayError> {
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
