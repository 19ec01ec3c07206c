//! Logical decoding on a standby (PostgreSQL 16+): what the preflight checks on the standby
//! and, with `postgres.primary_host`, on its primary.
//!
//! Invariant: a standby's slot is never created where PostgreSQL would invalidate it by
//! design. Without `hot_standby_feedback` the primary removes catalog rows the slot needs
//! (`rows_removed`); with a primary whose `wal_level` is below logical every logical slot of
//! its standbys is invalidated (`wal_level_insufficient`). A standby and its primary share the
//! system identifier, so a standby's slot keeps its checkpoints under a key that names the
//! standby (`checkpoint::Scope`); in exactly-once mode that needs `primary_slot_name`, which
//! also finds the key again after a promotion.

use relay_core::invalidation::Invalidation;
use tokio_postgres::Client;

use crate::{
    config::{Config, Delivery},
    error::{Definite, RelayError},
    postgres::control::query_err,
    sink::checkpoint_topic::Scope,
    telemetry::events::{STANDBY_WITHOUT_PHYSICAL_SLOT, STANDBY_WITHOUT_PRIMARY},
};

/// Logical decoding on a standby (PostgreSQL 16+): what it needs from the standby and, when
/// `postgres.primary_host` is set, from its primary. Returns the key scope of the slot's
/// checkpoints (whether the server is a standby, and which), and the connection to the primary. `recreating`: `setup --recreate-slot`, which drops a
/// lost slot (so a lost one is not the news). Without `hot_standby_feedback` the primary
/// removes catalog rows the slot still needs, and PostgreSQL invalidates the slot
/// (`rows_removed`); without a physical slot (`primary_slot_name`) the feedback holds only
/// while the standby is connected.
pub(crate) async fn check(
    client: &Client,
    cfg: &Config,
    version: i32,
    recreating: bool,
) -> Result<(Scope, Option<Client>), RelayError> {
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
            crate::postgres::slot::lost_message(&pg.slot, &why, confirmed),
        )));
    }
    if !standby {
        return Ok((Scope::of(false, physical), None));
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
    if let Some(refused) = without_physical_slot(cfg, &physical) {
        return Err(refused);
    }
    if physical.is_empty() {
        tracing::warn!(
            "{STANDBY_WITHOUT_PHYSICAL_SLOT}: {}:{} is a standby without primary_slot_name: \
             hot_standby_feedback protects the slot's catalog rows only while the standby is \
             connected to the primary, and after a promotion the relay cannot tell the slot's \
             checkpoints from a primary slot's (events are sent again, none is lost); set \
             primary_slot_name to a physical slot on the primary",
            pg.host,
            pg.port
        );
    }
    let Some(primary) = crate::postgres::control::connect_primary(cfg).await else {
        tracing::warn!(
            slot = %pg.slot,
            "{STANDBY_WITHOUT_PRIMARY}: {}:{} is a standby and postgres.primary_host is not set: \
             the heartbeat is skipped (an idle outbox holds the slot) and slot creation waits \
             for the primary's own running-transactions record (docs/platforms.md)",
            pg.host,
            pg.port
        );
        return Ok((Scope::Standby(physical), None));
    };
    let primary = primary?;
    let row = primary
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('wal_level')",
            &[],
        )
        .await
        .map_err(query_err("read the primary's settings"))?;
    let (in_recovery, wal_level): (bool, String) = (row.get(0), row.get(1));
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
    Ok((Scope::Standby(physical), Some(primary)))
}

/// Exactly-once on a standby without `primary_slot_name` (`physical`): refused, since the
/// slot's checkpoints are kept under that name and found by it after a promotion.
fn without_physical_slot(cfg: &Config, physical: &str) -> Option<RelayError> {
    let pg = &cfg.postgres;
    (physical.is_empty() && cfg.relay.delivery == Delivery::ExactlyOnce).then(|| {
        RelayError::from(Definite::Precondition(format!(
            "{}:{} is a standby without primary_slot_name, and exactly-once on a standby needs \
             it: the slot's checkpoints are kept under the standby's physical slot name, which \
             is how the relay finds them again after a promotion (and hot_standby_feedback \
             protects the slot only while the standby is connected without it). Set \
             primary_slot_name to a physical slot on the primary",
            pg.host, pg.port
        )))
    })
}

/// The key scope of the slot's checkpoints on the server `client` is connected to, for a
/// command that writes one without the preflight (`setup --from-debezium`).
pub(crate) async fn scope(client: &Client) -> Result<Scope, RelayError> {
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('primary_slot_name')",
            &[],
        )
        .await
        .map_err(query_err("read whether the server is a standby"))?;
    Ok(Scope::of(row.get(0), row.get(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let toml = format!("[kafka]\nbrokers = \"k:9092\"\n{extra}");
        crate::config::test_support::load(&toml, &[]).unwrap()
    }

    #[test]
    fn exactly_once_on_a_standby_needs_primary_slot_name_and_at_least_once_does_not() {
        let eos = config("transactional_id = \"t\"\n[relay]\ndelivery = \"exactly-once\"\n");
        let refused = without_physical_slot(&eos, "")
            .expect("refused")
            .to_string();
        assert!(
            refused.contains("without primary_slot_name") && refused.contains("exactly-once"),
            "{refused}"
        );
        assert!(without_physical_slot(&eos, "standby_phys").is_none());
        assert!(without_physical_slot(&config(""), "").is_none());
    }

    #[test]
    fn a_server_with_primary_slot_name_but_not_in_recovery_is_a_promoted_standby() {
        assert_eq!(Scope::of(true, "p".into()), Scope::Standby("p".into()));
        assert_eq!(
            Scope::of(true, String::new()),
            Scope::Standby(String::new())
        );
        assert_eq!(Scope::of(false, String::new()), Scope::Primary);
        assert_eq!(Scope::of(false, "p".into()), Scope::Promoted("p".into()));
    }
}
