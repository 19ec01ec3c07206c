//! What one schedule shares: PostgreSQL's model, Kafka's stored records and checkpoints, the
//! running instance's Kafka state, and the findings.

use std::{collections::HashSet, sync::Mutex};

use rand::rngs::StdRng;

use super::{Bug, poison, postgres::Pg};
use crate::pipeline::tests::memory::MemoryView;

/// Everything a schedule shares: PostgreSQL, Kafka's stored records, the findings.
pub(super) struct World {
    pub(super) bug: Bug,
    pub(super) exactly_once: bool,
    /// Some rows are written as logical messages (`[[message]]`) instead of outbox rows.
    pub(super) messages: bool,
    pub(super) pg: Mutex<Pg>,
    /// The checkpoints Kafka holds, in order: exactly-once, those of committed Kafka
    /// transactions; at-least-once, those the broker stored (`checkpoints`).
    pub(super) checkpoints: Mutex<Vec<Vec<u8>>>,
    /// At-least-once: the draws of how many of a killed run's checkpoints were stored (a
    /// generator of their own, so that a seed's other draws stay what they were).
    pub(super) checkpoint_draws: Mutex<StdRng>,
    /// Exactly-once: the running producer's transactions (those that commit become visible).
    pub(super) view: Mutex<Option<MemoryView>>,
    /// Stored records as (key, value), in each partition's order (one key, one partition).
    pub(super) log: Mutex<Vec<(String, String)>>,
    pub(super) violations: Mutex<Vec<String>>,
    pub(super) steps: Mutex<Vec<String>>,
    /// The draws of the takeovers, when the schedule plays them (`takeover`).
    pub(super) second: Mutex<Option<StdRng>>,
    /// A cut-off instance's Kafka state, until the next instance's fence settles it.
    pub(super) zombie: Mutex<Option<MemoryView>>,
    /// The running instance was cut off (set by the driver).
    pub(super) cut_off: Mutex<bool>,
    /// Events Kafka refuses for good on their own topic (`poison`).
    pub(super) poison: HashSet<String>,
    /// The producer refuses those at once (too large) rather than the broker in a batch.
    pub(super) poison_at_once: bool,
    /// The relay reads from a standby that replays each transaction late (`postgres`).
    pub(super) standby: bool,
}

impl World {
    pub(super) fn step(&self, s: String) {
        self.steps.lock().unwrap().push(s);
    }
    pub(super) fn violation(&self, s: String) {
        self.violations.lock().unwrap().push(s);
    }
    /// What a reader sees: at-least-once, every stored record; exactly-once, the committed ones
    /// (a read-committed reader).
    pub(super) fn stored(&self) -> HashSet<String> {
        let mut stored: HashSet<String> = self
            .log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| poison::event(v).0.to_string())
            .collect();
        if let Some(view) = self.view.lock().unwrap().as_ref() {
            stored.extend(view.committed(false).0.iter().map(|r| {
                poison::event(&poison::stored(&r.topic, &r.key, &r.value).1)
                    .0
                    .to_string()
            }));
        }
        stored
    }
}
