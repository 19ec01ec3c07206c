//! Why PostgreSQL invalidated a replication slot, and what the operator does about it.
//!
//! Invariant: every invalidated slot is a definite stop (the relay never re-creates one), but
//! the *reason* decides the advice. From PostgreSQL 16 on, `wal_status` reads `lost` for every
//! invalidated slot, whatever the cause, so "PostgreSQL removed WAL it still needed" is only
//! true for `wal_removed`; an `idle_timeout` (18) needs the timeout raised, a recovery conflict
//! on a standby needs `hot_standby_feedback`. The reason comes from the slot's row:
//! `invalidation_reason` (17+), `conflicting` (16+: set for the two conflict reasons), and
//! `wal_status = lost` (13+). Pure, so every combination is unit-tested here.

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
    /// `conflicting = true` on 16, which has no `invalidation_reason`: one of the two standby
    /// conflicts, not told apart.
    RecoveryConflict,
    /// A reason this build does not know (a newer server).
    Other(String),
}

impl Invalidation {
    /// The cause read from the slot's row, or `None` while the slot is usable. `reason` is
    /// `invalidation_reason` (`None` before 17), `conflicting` the column of that name (`None`
    /// before 16 and for physical slots), `wal_status` the column's text.
    pub fn of(
        wal_status: Option<&str>,
        reason: Option<&str>,
        conflicting: Option<bool>,
    ) -> Option<Invalidation> {
        match reason {
            Some("wal_removed") => Some(Invalidation::WalRemoved),
            Some("idle_timeout") => Some(Invalidation::IdleTimeout),
            Some("rows_removed") => Some(Invalidation::RowsRemoved),
            Some("wal_level_insufficient") => Some(Invalidation::WalLevelInsufficient),
            Some(other) => Some(Invalidation::Other(other.to_string())),
            None if conflicting == Some(true) => Some(Invalidation::RecoveryConflict),
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
            Invalidation::RecoveryConflict => "conflicting",
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
            Invalidation::RecoveryConflict => "a recovery conflict on this standby \
                 (conflicting = true): the primary removed catalog rows the slot needed, or its \
                 wal_level was lowered below logical"
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
            Invalidation::RowsRemoved | Invalidation::RecoveryConflict => {
                "on the standby set hot_standby_feedback = on and primary_slot_name to a \
                 physical slot on the primary (docs/platforms.md, standbys)"
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
            assert_eq!(Invalidation::of(ws, None, None), None);
            assert_eq!(Invalidation::of(ws, None, Some(false)), None);
        }
    }

    #[test]
    fn the_reason_column_wins_over_wal_status() {
        assert_eq!(
            Invalidation::of(Some("lost"), Some("idle_timeout"), Some(false)),
            Some(Invalidation::IdleTimeout)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("rows_removed"), Some(true)),
            Some(Invalidation::RowsRemoved)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("wal_level_insufficient"), Some(true)),
            Some(Invalidation::WalLevelInsufficient)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("wal_removed"), None),
            Some(Invalidation::WalRemoved)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), Some("brand_new"), None),
            Some(Invalidation::Other("brand_new".into()))
        );
    }

    #[test]
    fn older_servers_fall_back_to_conflicting_then_wal_status() {
        // 16: no invalidation_reason; conflicting marks the standby conflicts.
        assert_eq!(
            Invalidation::of(Some("lost"), None, Some(true)),
            Some(Invalidation::RecoveryConflict)
        );
        assert_eq!(
            Invalidation::of(Some("lost"), None, Some(false)),
            Some(Invalidation::WalRemoved)
        );
        // 14-15: wal_status alone.
        assert_eq!(
            Invalidation::of(Some("lost"), None, None),
            Some(Invalidation::WalRemoved)
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
        assert!(
            Invalidation::RecoveryConflict
                .prevention()
                .contains("hot_standby_feedback")
        );
    }
}
