//! Multi-record transactions taking turns after a conflict (`relay_core::apply::contention`
//! decides when): handlers that update rows shared across partitions deadlock each other when
//! two batches take the shared rows in different orders. While turns are on, a transaction of
//! more than one record waits for the process's one turn before it takes a connection; a
//! one-record transaction does not wait (it cannot be in a deadlock cycle with a handler that
//! takes one shared row).
//!
//! Invariant: the turn is held from before the connection is taken until the transaction has
//! ended (committed or rolled back), and only transactions of more than one record take it.

use std::{sync::Mutex, time::Instant};

use relay_core::apply::contention::Turns;

use crate::telemetry::{events::APPLY_TAKING_TURNS, metrics as m};

pub(crate) struct Contention {
    epoch: Instant,
    turns: Mutex<Turns>,
    turn: tokio::sync::Mutex<()>,
}

/// A transaction's turn; the next one's when dropped.
pub(crate) type Turn<'c> = Option<tokio::sync::MutexGuard<'c, ()>>;

impl Contention {
    pub(super) fn new() -> Contention {
        Contention {
            epoch: Instant::now(),
            turns: Mutex::new(Turns::default()),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.turns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the turn of a transaction of `records` records, if it must take one.
    pub(crate) async fn turn(&self, records: usize) -> Turn<'_> {
        let now = self.epoch.elapsed();
        let (on, needed) = {
            let t = self.turns();
            (t.on(now), t.turn_needed(now, records))
        };
        metrics::gauge!(m::APPLY_TAKING_TURNS).set(if on { 1.0 } else { 0.0 });
        if needed {
            Some(self.turn.lock().await)
        } else {
            None
        }
    }

    /// A transaction was rolled back by a deadlock or a serialization failure.
    pub(crate) fn conflicted(&self) {
        let now = self.epoch.elapsed();
        let mut t = self.turns();
        let was_on = t.on(now);
        t.conflict(now);
        metrics::gauge!(m::APPLY_TAKING_TURNS).set(1.0);
        if !was_on {
            tracing::info!(
                for_s = t.period().as_secs(),
                "{APPLY_TAKING_TURNS}: a deadlock or serialization failure between this \
                 applier's transactions; transactions of more than one record run one at a time \
                 until no conflict was seen for this long (docs/inbox.md, \"Handlers that touch \
                 shared rows\")"
            );
        }
    }
}
