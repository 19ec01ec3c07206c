//! Logical decoding on a standby (PostgreSQL 16+): what the preflight checks on the standby
//! and, with `postgres.primary_host`, on its primary.
//!
//! Invariant: a standby's slot is never created where PostgreSQL would invalidate it by
//! design. Without `hot_standby_feedback` the primary removes catalog rows the slot needs
//! (`rows_removed`); with a primary whose `wal_level` is below logical every logical slot of
//! its standbys is invalidated (`wal_level_insufficient`); and a slot name the primary also
//! uses would share the checkpoint key (`<system id>/<database>/<slot>`: a standby and its
//! primary share the system identifier), so each relay would read the other's position.

use relay_core::invalidation::Invalidation;
use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    events::{STANDBY_WITHOUT_PHYSICAL_SLOT, STANDBY_WITHOUT_PRIMARY},
    pg::query_err,
};

/// Logical decoding on a standby (PostgreSQL 16+): what it needs from the standby and, when
/// `postgres.primary_host` is set, from its primary. Returns whether the server is a standby,
/// and the connection to the primary. `recreating`: `setup --recreate-slot`, which drops a
/// lost slot (so a lost one is not the news). Without `hot_standby_feedback` the primary
/// removes catalog rows the slot still needs, and PostgreSQL invalidates the slot
/// (`rows_removed`); without a physical slot (`primary_slot_name`) the feedback holds only
/// while the standby is connected.
pub(crate) async fn check(
    client: &Client,
    cfg: &Config,
    version: i32,
    recreating: bool,
) -> Result<(bool, Option<Client>), RelayError> {
    let pg = &cfg.postgres;
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('hot_standby_feedback'), \
                    current_setting('primary_slot_name'), \
                    (SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1), \
                    (SELECT to_jsonb(s)->>'invalidation_reason' FROM pg_replication_slots s \
                      WHERE slot_name = $1), \
                    (SELECT confirmed_flush_lsn::text FROM pg_replication_slots \
                      WHERE slot_name = $1)",
            &[&pg.slot],
        )
        .await
        .map_err(query_err("read the standby settings"))?;
    let (standby, feedback, physical): (bool, String, String) =
        (row.get(0), row.get(1), row.get(2));
    // A slot that is already lost is the news, whatever the settings now (a recovery conflict
    // after hot_standby_feedback was turned off, say): its message names the cause and the
    // setting. Not for `setup --recreate-slot`, which drops it.
    let lost = Invalidation::of(
        row.get::<_, Option<String>>(3).as_deref(),
        row.get::<_, Option<String>>(4).as_deref(),
        standby,
    );
    if let Some(why) = lost.filter(|_| standby && !recreating) {
        let confirmed = row.get::<_, Option<String>>(5).and_then(|c| c.parse().ok());
        return Err(RelayError::from(Definite::Precondition(
            crate::slot::lost_message(&pg.slot, &why, confirmed),
        )));
    }
    if !standby {
        return Ok((false, None));
    }
    if version < 160_000 {
        return Err(RelayError::from(Definite::Precondition(format!(
            "{}:{} is a standby running PostgreSQL {}, and logical decoding on a standby needs \
             PostgreSQL 16 or later: point postgres.host at the primary",
            pg.host,
            pg.port,
            version / 10_000
        ))));
    }
    if feedback != "on" {
        return Err(RelayError::from(Definite::Precondition(format!(
            "{}:{} is a standby with hot_standby_feedback = {feedback}: without it the primary \
             removes catalog rows the slot still needs and PostgreSQL invalidates the slot \
             (rows_removed). On the standby run ALTER SYSTEM SET hot_standby_feedback = on; \
             SELECT pg_reload_conf(); and set primary_slot_name to a physical slot on the \
             primary (docs/platforms.md, \"Logical decoding on a standby\")",
            pg.host, pg.port
        ))));
    }
    if physical.is_empty() {
        tracing::warn!(
            "{STANDBY_WITHOUT_PHYSICAL_SLOT}: {}:{} is a standby without primary_slot_name: \
             hot_standby_feedback protects the slot's catalog rows only while the standby is \
             connected to the primary; set primary_slot_name to a physical slot on the primary",
            pg.host,
            pg.port
        );
    }
    let Some(primary) = crate::pg::connect_primary(cfg).await else {
        tracing::warn!(
            slot = %pg.slot,
            "{STANDBY_WITHOUT_PRIMARY}: {}:{} is a standby and postgres.primary_host is not set: \
             the heartbeat is skipped (an idle outbox holds the slot), slot creation waits for \
             the primary's own running-transactions record, and a slot of the same name on the \
             primary would share this slot's checkpoint key unnoticed (docs/platforms.md)",
            pg.host,
            pg.port
        );
        return Ok((true, None));
    };
    let primary = primary?;
    let row = primary
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('wal_level'), \
                    EXISTS (SELECT 1 FROM pg_replication_slots \
                             WHERE slot_name = $1 AND slot_type = 'logical')",
            &[&pg.slot],
        )
        .await
        .map_err(query_err("read the primary's settings"))?;
    let (in_recovery, wal_level, same_name): (bool, String, bool) =
        (row.get(0), row.get(1), row.get(2));
    let at = format!(
        "{}:{}",
        pg.primary_host.as_deref().unwrap_or_default(),
        pg.primary_port.unwrap_or(pg.port)
    );
    if in_recovery {
        return Err(RelayError::from(Definite::Precondition(format!(
            "postgres.primary_host {at} is itself a standby: point it at the primary"
        ))));
    }
    if wal_level != "logical" {
        return Err(RelayError::from(Definite::Precondition(format!(
            "the primary {at} has wal_level = {wal_level}, and decoding on its standby needs \
             logical on both (a standby's logical slots are invalidated, \
             wal_level_insufficient): set wal_level = logical on the primary and restart it"
        ))));
    }
    if same_name {
        return Err(RelayError::from(Definite::Precondition(format!(
            "the primary {at} also has a logical slot named {:?}: a standby and its primary \
             share the system identifier, so the two slots would share one checkpoint key \
             (<system id>/<database>/<slot>) and each relay would read the other's position; \
             give the standby's slot another name (postgres.slot)",
            pg.slot
        ))));
    }
    Ok((true, Some(primary)))
}
