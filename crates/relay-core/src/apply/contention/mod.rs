//! Transactions of different partitions that wait on each other: handlers that update rows
//! shared across partitions (events keyed by account, effect on a client row many accounts
//! share). Two multi-record transactions take the shared rows in their records' orders, which
//! differ, and PostgreSQL breaks the cycle by rolling one back (40P01, after its
//! `deadlock_timeout`); a serializable or repeatable-read handler meets 40001 instead. These
//! rules decide what the applier does about it; the binary only follows them.
//!
//! ```text
//! SQLSTATE ──Cause::of──▶ a conflict with another transaction, or the server away
//! each failure ──Retry::wait──▶ conflict: at once, jittered, under CONFLICT_WAIT_CAP
//!                               away: doubled from retry_backoff_initial_ms to _max_ms
//! conflicts and commits ──Width──▶ records per transaction: 1 after a conflict, doubled back
//! conflicts over time ──Turns──▶ while on, multi-record transactions run one at a time
//! ```
//!
//! Why this avoids the storm: a one-record transaction whose handler takes one shared row
//! holds nothing another transaction waits for before it has all it needs, so it cannot be in
//! a deadlock cycle; and while [`Turns`] is on, at most one transaction of more than one record
//! runs at a time in the process, so no two of them can wait on each other. Records still
//! commit in offset order, each batch in one transaction with its claims and position.

use std::time::Duration;

/// SQLSTATE `40P01`: the transaction was chosen to break a deadlock.
pub const DEADLOCK_DETECTED: &str = "40P01";
/// SQLSTATE `40001`: a serializable (or repeatable-read) transaction lost a conflict.
pub const SERIALIZATION_FAILURE: &str = "40001";

/// The longest wait before a conflict's retry: a conflict is over as soon as the other
/// transaction commits, so waiting long only stalls the partition.
pub const CONFLICT_WAIT_CAP: Duration = Duration::from_millis(50);
/// The first conflict retry waits up to this (jittered), doubled per conflict in a row.
const CONFLICT_WAIT_FIRST: Duration = Duration::from_millis(5);

/// How long multi-record transactions take turns after the first conflict.
pub const TURNS_FIRST: Duration = Duration::from_secs(300);
/// The longest such period: a conflict soon after one ended doubles the next, up to this.
pub const TURNS_MAX: Duration = Duration::from_secs(3600);

/// Why a transaction was rolled back for a transient reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A deadlock or a serialization failure: another transaction of the database (most
    /// likely another partition's) holds what this one needs. Over when that one commits.
    Conflict,
    /// Anything else transient: the server away, restarting, out of connections.
    Away,
}

impl Cause {
    /// The cause of a transient failure with `sqlstate` (`None`: no server error).
    pub fn of(sqlstate: Option<&str>) -> Cause {
        match sqlstate {
            Some(DEADLOCK_DETECTED | SERIALIZATION_FAILURE) => Cause::Conflict,
            _ => Cause::Away,
        }
    }
}

/// The waits between the retries of one partition's transaction.
#[derive(Debug, Clone)]
pub struct Retry {
    initial: Duration,
    max: Duration,
    /// Retries in a row of each cause since the last commit.
    conflicts: u32,
    away: u32,
}

impl Retry {
    /// `initial` and `max`: `apply.retry_backoff_initial_ms` and `_max_ms` (for [`Cause::Away`]).
    pub fn new(initial: Duration, max: Duration) -> Retry {
        Retry {
            initial: initial.max(Duration::from_millis(1)),
            max: max.max(Duration::from_millis(1)),
            conflicts: 0,
            away: 0,
        }
    }

    /// The wait before the next retry after a failure of `cause`; `jitter` in `[0, 1)` (a
    /// random draw: two transactions that conflicted do not retry in step).
    ///
    /// A conflict: at once, within `5 ms × 2^n` (n conflicts in a row before it), never above
    /// [`CONFLICT_WAIT_CAP`]. The server away: `initial × 2^n`, never above `max`.
    pub fn wait(&mut self, cause: Cause, jitter: f64) -> Duration {
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        match cause {
            Cause::Conflict => {
                let upper = doubled(CONFLICT_WAIT_FIRST, self.conflicts, CONFLICT_WAIT_CAP);
                self.conflicts = self.conflicts.saturating_add(1);
                upper.mul_f64(jitter)
            }
            Cause::Away => {
                let wait = doubled(self.initial, self.away, self.max);
                self.away = self.away.saturating_add(1);
                wait
            }
        }
    }

    /// A transaction committed (or a record was handed to its failure policy): the next
    /// failure starts the schedules again.
    pub fn reset(&mut self) {
        self.conflicts = 0;
        self.away = 0;
    }
}

/// `first × 2^n`, never above `cap`.
fn doubled(first: Duration, n: u32, cap: Duration) -> Duration {
    first
        .checked_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX))
        .unwrap_or(cap)
        .min(cap)
}

/// Records per transaction of one partition: `apply.batch_records` normally, one after a
/// conflict (a one-record transaction is not in a deadlock cycle with a handler that takes one
/// shared row), then doubled per commit back to `apply.batch_records`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Width {
    max: usize,
    now: usize,
}

impl Width {
    pub fn new(max: usize) -> Width {
        let max = max.max(1);
        Width { max, now: max }
    }

    /// The most records the next transaction takes.
    pub fn get(&self) -> usize {
        self.now
    }

    pub fn conflicted(&mut self) {
        self.now = 1;
    }

    pub fn committed(&mut self) {
        self.now = self.now.saturating_mul(2).min(self.max);
    }
}

/// Whether the process's multi-record transactions take turns (one at a time), from the
/// conflicts seen. Off until the first conflict; then on for [`TURNS_FIRST`] after the latest
/// conflict. A conflict within one period of the last one's end doubles the period (up to
/// [`TURNS_MAX`]): a workload that conflicts again as soon as transactions run side by side
/// pays one deadlock per period, fewer and fewer. A workload that never conflicts (handlers
/// that touch only their key's rows) never takes turns. Times are since any fixed instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turns {
    period: Duration,
    until: Option<Duration>,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            period: TURNS_FIRST,
            until: None,
        }
    }
}

impl Turns {
    /// A conflict at `now`.
    pub fn conflict(&mut self, now: Duration) {
        if let Some(until) = self.until
            && now >= until
        {
            self.period = if now < until.saturating_add(self.period) {
                self.period.saturating_mul(2).min(TURNS_MAX)
            } else {
                TURNS_FIRST
            };
        }
        let until = now.saturating_add(self.period);
        self.until = Some(self.until.map_or(until, |u| u.max(until)));
    }

    /// Whether transactions take turns at `now`.
    pub fn on(&self, now: Duration) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// Whether a transaction of `records` records must wait for its turn at `now`.
    pub fn turn_needed(&self, now: Duration, records: usize) -> bool {
        records > 1 && self.on(now)
    }

    /// The current (or next) period.
    pub fn period(&self) -> Duration {
        self.period
    }
}

#[cfg(test)]
mod tests;
