//! Poison records (`relay.on_poison = "dead-letter"`): in a quarter of the schedules (seeds
//! 32-47 of every 64, drawn from the seed alone) some events are refused for good on their own
//! topic (not authorised: sent again, refused again). The broker refuses a whole batch for one
//! such record, so the relay cannot tell which record of the batch was at fault: it suspects the
//! first refused one, sends it alone after a restart and dead-letters it only if it is refused
//! again (`pipeline::poison`).
//!
//! Invariants added: every poison event reaches the dead-letter topic in its place (nothing
//! lost, its key's order kept), and no other event ever does (an innocent event dead-lettered is
//! missing from its topic for every consumer).

use std::collections::HashSet;

use super::{World, postgres::Pg};

/// The prefix a dead-letter record's value carries in the model's log.
const DEAD_LETTERED: &str = "dlq:";
/// `relay.dead_letter_topic` in these schedules.
pub(super) const TOPIC: &str = "dlq";

/// Poison plays in seeds 32-47 of every 64, in both delivery modes.
pub(super) fn plays_in(seed: u64) -> bool {
    (seed / 16) % 4 == 2
}

/// The events refused for good: every seventh row of the WAL, from the third.
pub(super) fn draw(pg: &Pg) -> HashSet<String> {
    pg.txns
        .iter()
        .flat_map(|t| &t.rows)
        .enumerate()
        .filter(|(i, _)| i % 7 == 2)
        .map(|(_, (_, v))| v.clone())
        .collect()
}

/// A stored record as the model's log keeps it: a dead-letter record's value marked.
pub(super) fn stored(topic: &str, key: &[u8], value: &[u8]) -> (String, String) {
    let value = String::from_utf8_lossy(value);
    let value = if topic == TOPIC {
        format!("{DEAD_LETTERED}{value}")
    } else {
        value.into_owned()
    };
    (String::from_utf8_lossy(key).into_owned(), value)
}

/// The event a logged value stands for, and whether it went to the dead-letter topic.
pub(super) fn event(value: &str) -> (&str, bool) {
    match value.strip_prefix(DEAD_LETTERED) {
        Some(v) => (v, true),
        None => (value, false),
    }
}

/// Whether the broker refuses this logged value for good (a poison event on its own topic).
pub(super) fn refused(world: &World, value: &str) -> bool {
    world.poison.contains(value)
}
