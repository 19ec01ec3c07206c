//! Why PostgreSQL invalidated a replication slot, and what the operator does about it.
//!
//! Invariant: every invalidated slot is a definite stop (the relay never re-creates one), but
//! the *reason* decides the advice. From PostgreSQL 16 on, `wal_status` reads `lost` for every
//! invalidated slot, whatever the cause, so "PostgreSQL removed WAL it still needed" is only
//! true for `wal_removed`; an `idle_timeout` (18) needs the timeout raised, a recovery conflict
//! on a standby needs `hot_standby_feedback`. The reason comes from the slot's row:
//! `invalidation_reason` (17+), else `wal_status = lost` (13+). PostgreSQL 16's `conflicting`
//! column does not help: it is true for *every* invalidated logical slot there (seen on 16.11:
//! a `max_slot_wal_keep_size` loss on a primary reads `conflicting = t`), 17 narrowed it. So
//! before 17 the cause is `wal_removed` on a primary (the conflicts happen on standbys only)
//! and unknown on a standby. Pure, so every combination is unit-tested here.

use std::fmt;

/// The cause of a slot's invalidation, as far as the server's version can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    /// `wal_removed` (or `wal_status = lost` without a reason, before 17): WAL beyond
    /// `max_slot_wal_keep_size` was removed.
    WalRemoved,
    /// `idle_timeout` (18): no replication connection used the slot for longer than
    /// `idle_replication_slot_timeout`.
    IdleTimeout,
    /// `rows_removed` (16+, on a standby): the primary removed catalog rows the slot needed.
    RowsRemoved,
    /// `wal_level_insufficient` (16+, on a standby): the primary's `wal_level` fell below
    /// `logical`.
    WalLevelInsufficient,
    /// A slot on a PostgreSQL 16 standby, which has no `invalidation_reason`: WAL removal or
    /// one of the two recovery conflicts, not told apart.
    UnknownOnStandby,
    /// A reason this build does not know (a newer server).
    Other(String),
}

impl Invalidation {
    /// The cause read from the slot's row, or `None` while the slot is usable. `reason` is
    /// `invalidation_reason` (`None` before 17), `wal_status` the column's text, `on_standby`
    /// `pg_is_in_recovery()`.
    pub fn of(
        wal_status: Option<&str>,
        reason: Option<&str>,
        on_standby: bool,
    ) -> Option<Invalidation> {
        match reason {
            Some("wal_removed") => Some(Invalidation::WalRemoved),
            Some("idle_timeout") => Some(Invalidation::IdleTimeout),
            Some("rows_removed") => Some(Invalidation::RowsRemoved),
            Some("wal_level_insufficient") => Some(Invalidation::WalLevelInsufficient),
            Some(other) => Some(Invalidation::Other(other.to_string())),
            None if wal_status == Some("lost") && on_standby => {
                Some(Invalidation::UnknownOnStandby)
            }
            None if wal_status == Some("lost") => Some(Invalidation::WalRemoved),
            None => None,
        }
    }

    /// The label used in `status`, logs and the `reason` label of the metric: PostgreSQL's
    /// own `invalidation_reason` where there is one.
    pub fn label(&self) -> &str {
        match self {
            Invalidation::WalRemoved => "wal_removed",
            Invalidation::IdleTimeout => "idle_timeout",
            Invalidation::RowsRemoved => "rows_removed",
            Invalidation::WalLevelInsufficient => "wal_level_insufficient",
            Invalidation::UnknownOnStandby => "unknown_on_standby",
            Invalidation::Other(s) => s,
        }
    }

    /// Whether events may be missing from the slot's stream (every cause: the slot cannot be
    /// read again, so what was committed after its `confirmed_flush_lsn` was not relayed).
    pub fn what_happened(&self) -> String {
        match self {
            Invalidation::WalRemoved => "PostgreSQL removed WAL it still needed \
                 (the slot retained more than max_slot_wal_keep_size)"
                .into(),
            Invalidation::IdleTimeout => "PostgreSQL invalidated it because no replication \
                 connection used it for longer than idle_replication_slot_timeout (PostgreSQL \
                 18; checked at each checkpoint)"
                .into(),
            Invalidation::RowsRemoved => "a recovery conflict on this standby: the primary \
                 removed catalog rows the slot still needed (invalidation_reason = rows_removed)"
                .into(),
            Invalidation::WalLevelInsufficient => "the primary's wal_level was lowered below \
                 logical, which invalidates every logical slot on its standbys"
                .into(),
            Invalidation::UnknownOnStandby => "PostgreSQL invalidated it on this standby and \
                 (before 17) does not say why: WAL beyond max_slot_wal_keep_size was removed, or \
                 a recovery conflict (the primary removed catalog rows the slot needed, or its \
                 wal_level went below logical); the standby's server log names it"
                .into(),
            Invalidation::Other(r) => format!("PostgreSQL invalidated it ({r})"),
        }
    }

    /// What to change so that it does not happen again, before the slot is re-created.
    pub fn prevention(&self) -> &'static str {
        match self {
            Invalidation::WalRemoved => {
                "raise max_slot_wal_keep_size (or fix what kept the relay from confirming: \
                 Kafka down, the relay stopped) and watch the slot_forecast alert"
            }
            Invalidation::IdleTimeout => {
                "raise idle_replication_slot_timeout above the longest time the relay may be \
                 stopped plus checkpoint_timeout, or set it to 0 (off); see docs/platforms.md \
                 (PostgreSQL 18)"
            }
            Invalidation::RowsRemoved => {
                "on the standby set hot_standby_feedback = on and primary_slot_name to a \
                 physical slot on the primary (docs/platforms.md, standbys)"
            }
            Invalidation::UnknownOnStandby => {
                "on the standby set hot_standby_feedback = on and primary_slot_name to a \
                 physical slot on the primary, keep wal_level = logical on the primary, and \
                 size max_slot_wal_keep_size for the outages you tolerate"
            }
            Invalidation::WalLevelInsufficient => {
                "set wal_level = logical on the primary again and restart it"
            }
            Invalidation::Other(_) => "read the server log for the invalidation",
        }
    }
}

impl fmt::Display for Invalidation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_slots_have_no_invalidation() {
        for ws in [None, Some("reserved"), Some("extended"), Some("unreserved")] {
            assert_eq!(Invalidation::of(ws, None, false), None);
            assert_eq!(Invalidation::of(ws, None, true), None);
        }
    }

    #[test]
    fn the_reason_column_wins_over_wal_status() {
        assert_eq!(
            Invalidation::of(Some("lost"), Some("idle_timeout"), false),
            Some(Invalidation::IdleTimeout)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("rows_removed"), true),
            Some(Invalidation::RowsRemoved)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("wal_level_insufficient"), true),
            Some(Invalidation::WalLevelInsufficient)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("wal_removed"), true),
            Some(Invalidation::WalRemoved)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("brand_new"), false),
            Some(Invalidation::Other("brand_new".into()))
        );
    }

    #[test]
    fn before_17_a_primary_lost_wal_and_a_standby_does_not_say() {
        assert_eq!(
            Invalidation::of(Some("lost"), None, false),
            Some(Invalidation::WalRemoved)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), None, true),
            Some(Invalidation::UnknownOnStandby)
        );
    }

    #[test]
    fn the_idle_timeout_advice_names_the_setting_and_never_says_wal_was_removed() {
        let i = Invalidation::IdleTimeout;
        assert!(i.what_happened().contains("idle_replication_slot_timeout"));
        assert!(!i.what_happened().contains("removed WAL"));
        assert!(i.prevention().contains("idle_replication_slot_timeout"));
        assert_eq!(i.label(), "idle_timeout");
        assert!(
            Invalidation::WalRemoved
                .what_happened()
                .contains("removed WAL")
        );
        for standby in [Invalidation::RowsRemoved, Invalidation::UnknownOnStandby] {
            assert!(standby.prevention().contains("hot_standby_feedback"));
        }
    }
}
