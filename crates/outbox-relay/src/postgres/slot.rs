//! Facts about the replication slot and the server, read over a plain SQL connection: the
//! slot's row of `pg_replication_slots` and `pg_stat_replication_slots`,
//! `max_slot_wal_keep_size`, the server's WAL position and `server_version_num`.
//!
//! The monitor, the alerts, `status` and `setup` all build on these types and queries, so this
//! module depends on nothing else in the crate.
//!
//! Invariant: reading is all it does. Nothing here writes to the server, keeps state between
//! readings or decides what a reading means (that is `alert`'s job).
//!
//! The data types are `pub` because public items carry them (`status::StatusReport::snapshot`,
//! `alert::Observation::wal_status`); the queries are crate-internal.

use std::{fmt, str::FromStr};

use relay_core::Lsn;
use tokio_postgres::Client;

/// PostgreSQL's `pg_replication_slots.wal_status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalStatus {
    Reserved,
    Extended,
    Unreserved,
    Lost,
    Other(String),
}

impl FromStr for WalStatus {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "reserved" => WalStatus::Reserved,
            "extended" => WalStatus::Extended,
            "unreserved" => WalStatus::Unreserved,
            "lost" => WalStatus::Lost,
            other => WalStatus::Other(other.to_string()),
        })
    }
}

impl fmt::Display for WalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WalStatus::Reserved => "reserved",
            WalStatus::Extended => "extended",
            WalStatus::Unreserved => "unreserved",
            WalStatus::Lost => "lost",
            WalStatus::Other(s) => s,
        })
    }
}

/// Cumulative decoding statistics of the slot (`pg_stat_replication_slots`, PostgreSQL 14+).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpillStats {
    pub spill_txns: i64,
    pub spill_count: i64,
    pub spill_bytes: i64,
    pub total_txns: i64,
    pub total_bytes: i64,
}

/// The slot's row of `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub active: bool,
    pub active_pid: Option<i32>,
    pub restart_lsn: Option<Lsn>,
    pub confirmed_flush: Option<Lsn>,
    pub wal_status: Option<WalStatus>,
    pub safe_wal_size: Option<i64>,
    /// PostgreSQL 17+; `None` before.
    pub invalidation_reason: Option<String>,
    /// `inactive_since` as seconds since the Unix epoch (PostgreSQL 17+): since when no
    /// connection uses the slot; `None` while streamed, and before 17.
    pub inactive_since: Option<i64>,
    /// The server is a standby (`pg_is_in_recovery()`), where a slot may also be lost to a
    /// recovery conflict.
    pub on_standby: bool,
    pub stats: Option<SpillStats>,
    /// What the slot's walsender waits for (`pg_stat_activity`, `type:event`), `running` when
    /// it is on the CPU; `None` when no walsender holds the slot.
    pub walsender_wait: Option<String>,
}

impl SlotState {
    pub(crate) fn is_lost(&self) -> bool {
        self.invalidation().is_some()
    }

    /// Why the slot was invalidated, or `None` while it is usable.
    pub(crate) fn invalidation(&self) -> Option<relay_core::invalidation::Invalidation> {
        let wal_status = self.wal_status.as_ref().map(|w| w.to_string());
        relay_core::invalidation::Invalidation::of(
            wal_status.as_deref(),
            self.invalidation_reason.as_deref(),
            self.on_standby,
        )
    }

    /// The walsender is busy decoding (on the CPU or reading WAL or spilled changes), as while
    /// a large transaction is read back; not when it waits for WAL or for the relay to read.
    pub(crate) fn walsender_decoding(&self) -> bool {
        self.walsender_wait
            .as_deref()
            .is_some_and(|w| w == "running" || w.starts_with("IO:"))
    }
}

/// One reading of the server and the slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSnapshot {
    pub in_recovery: bool,
    /// `pg_current_wal_lsn()`, or `pg_last_wal_replay_lsn()` on a standby.
    pub server_lsn: Option<Lsn>,
    /// `max_slot_wal_keep_size` in bytes; `None` = unlimited (-1).
    pub max_slot_wal_keep_size: Option<u64>,
    /// `None` when the slot does not exist.
    pub slot: Option<SlotState>,
}

impl SlotSnapshot {
    /// Relay lag: server WAL position minus `confirmed_flush_lsn`.
    pub(crate) fn lag_bytes(&self) -> Option<u64> {
        let s = self.slot.as_ref()?;
        Some(self.server_lsn?.0.saturating_sub(s.confirmed_flush?.0))
    }

    /// WAL kept for the slot: server WAL position minus `restart_lsn`.
    pub(crate) fn retained_wal_bytes(&self) -> Option<u64> {
        let s = self.slot.as_ref()?;
        Some(self.server_lsn?.0.saturating_sub(s.restart_lsn?.0))
    }
}

/// Reads the server and the slot. `server_version_num` selects the columns that exist.
pub(crate) async fn query(
    client: &Client,
    slot: &str,
    server_version_num: i32,
) -> Result<SlotSnapshot, tokio_postgres::Error> {
    let (invalidation, inactive_since) = if server_version_num >= 170_000 {
        (
            "s.invalidation_reason",
            "extract(epoch FROM s.inactive_since)::bigint",
        )
    } else {
        ("NULL::text", "NULL::bigint")
    };
    let sql = format!(
        "SELECT pg_is_in_recovery(), \
                (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                      ELSE pg_current_wal_lsn() END)::text, \
                (SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'), \
                s.slot_name IS NOT NULL, s.active, s.active_pid, s.restart_lsn::text, \
                s.confirmed_flush_lsn::text, s.wal_status, s.safe_wal_size, {invalidation}, \
                (SELECT coalesce(a.wait_event_type || ':' || a.wait_event, 'running') \
                   FROM pg_stat_activity a WHERE a.pid = s.active_pid), \
                {inactive_since} \
           FROM (SELECT 1) AS one \
           LEFT JOIN pg_replication_slots s ON s.slot_name = $1"
    );
    let row = client.query_one(&sql, &[&slot]).await?;
    let lsn = |i: usize| -> Option<Lsn> { row.get::<_, Option<String>>(i)?.parse().ok() };
    let max_mb: Option<i64> = row.get(2);
    let exists: bool = row.get(3);
    // Decoding statistics are a nicety: a managed server that hides or trims the view (or a
    // role that may not read it) costs the spill counters, never the slot's own reading.
    let stats = if exists && server_version_num >= 140_000 {
        client
            .query_opt(
                "SELECT spill_txns, spill_count, spill_bytes, total_txns, total_bytes \
                   FROM pg_stat_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .ok()
            .flatten()
            .map(|r| SpillStats {
                spill_txns: r.get::<_, Option<i64>>(0).unwrap_or(0),
                spill_count: r.get::<_, Option<i64>>(1).unwrap_or(0),
                spill_bytes: r.get::<_, Option<i64>>(2).unwrap_or(0),
                total_txns: r.get::<_, Option<i64>>(3).unwrap_or(0),
                total_bytes: r.get::<_, Option<i64>>(4).unwrap_or(0),
            })
    } else {
        None
    };
    Ok(SlotSnapshot {
        in_recovery: row.get(0),
        server_lsn: lsn(1),
        max_slot_wal_keep_size: max_mb.filter(|v| *v >= 0).map(|mb| (mb as u64) << 20),
        slot: exists.then(|| SlotState {
            active: row.get::<_, Option<bool>>(4).unwrap_or(false),
            active_pid: row.get(5),
            restart_lsn: lsn(6),
            confirmed_flush: lsn(7),
            wal_status: row
                .get::<_, Option<String>>(8)
                .map(|s| s.parse().unwrap_or(WalStatus::Other(s))),
            safe_wal_size: row.get(9),
            invalidation_reason: row.get(10),
            inactive_since: row.get(12),
            on_standby: row.get(0),
            stats,
            walsender_wait: row.get(11),
        }),
    })
}

/// The operator's message for slot `slot`, invalidated for `why`, last confirmed at
/// `confirmed`: what happened, that events after it may be missing, what to change, and how to
/// re-create the slot. One text for `setup`, `run` and the slot monitor.
pub(crate) fn lost_message(
    slot: &str,
    why: &relay_core::invalidation::Invalidation,
    confirmed: Option<Lsn>,
) -> String {
    let from = confirmed.map_or("its confirmed_flush_lsn".into(), |l| l.to_string());
    format!(
        "replication slot {slot:?} was invalidated (wal_status = lost, reason {why}): {}, so \
         events committed after {from} may never reach Kafka. To keep it from happening again, \
         {}. outbox-relay stops and will not re-create the slot silently: run `outbox-relay \
         setup --recreate-slot --heal`, which re-publishes the gap from the outbox table \
         (docs/operations.md#slot-lost)",
        why.what_happened(),
        why.prevention()
    )
}

/// `server_version_num` of the connected server.
pub(crate) async fn server_version(client: &Client) -> Result<i32, tokio_postgres::Error> {
    let v: String = client
        .query_one("SELECT current_setting('server_version_num')", &[])
        .await?
        .get(0);
    Ok(v.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_arithmetic_and_lost_detection() {
        let mut snap = SlotSnapshot {
            in_recovery: false,
            server_lsn: Some(Lsn(1000)),
            max_slot_wal_keep_size: Some(64 << 20),
            slot: Some(SlotState {
                active: true,
                active_pid: Some(7),
                restart_lsn: Some(Lsn(400)),
                confirmed_flush: Some(Lsn(900)),
                wal_status: Some("reserved".parse().unwrap()),
                safe_wal_size: Some(1),
                invalidation_reason: None,
                inactive_since: None,
                on_standby: false,
                stats: None,
                walsender_wait: Some("Client:WalSenderWriteData".into()),
            }),
        };
        assert_eq!(snap.lag_bytes(), Some(100));
        assert_eq!(snap.retained_wal_bytes(), Some(600));
        assert!(!snap.slot.as_ref().unwrap().is_lost());
        assert!(!snap.slot.as_ref().unwrap().walsender_decoding());
        let s = snap.slot.as_mut().unwrap();
        s.wal_status = Some("lost".parse().unwrap());
        s.restart_lsn = None;
        assert!(snap.slot.as_ref().unwrap().is_lost());
        assert_eq!(snap.retained_wal_bytes(), None);
        assert_eq!(
            "something_new".parse::<WalStatus>().unwrap().to_string(),
            "something_new"
        );
    }
}
