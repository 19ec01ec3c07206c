//! Poison records (`relay.on_poison = "dead-letter"`): in a quarter of the schedules (seeds
//! 32-47 of every 64, drawn from the seed alone) some events are refused for good on their own
//! topic (not authorised: sent again, refused again). The broker refuses a whole batch for one
//! such record, so the relay cannot tell which record of the batch was at fault: it suspects the
//! first refused one, sends it alone after a restart and dead-letters it only if it is refused
//! again (`pipeline::poison`).
//!
//! In half of those schedules (seeds 40-47 of every 64) the producer refuses the poison events
//! at once instead (too large): they are dead-lettered as they are handed over.
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

/// Of those, seeds 40-47 have the producer refuse the poison events at once (larger than
/// `message.max.bytes`): the relay dead-letters them in their place as it hands them over
/// (`pipeline::poison::dead_letter_at_once`), with nothing to suspect.
pub(super) fn refused_at_once_in(seed: u64) -> bool {
    (seed / 8) % 2 == 1
}

/// `sink`, refusing the poison events at once when the schedule says so.
pub(super) fn at_once(
    world: &World,
    sink: crate::pipeline::tests::memory::MemorySink,
) -> crate::pipeline::tests::memory::MemorySink {
    if !world.poison_at_once {
        return sink;
    }
    let values = world.poison.iter().map(|v| v.as_bytes().to_vec()).collect();
    sink.refusing_at_once(values, TOPIC)
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

/// Whether the broker refuses this logged value for good (a poison event on its own topic;
/// one the producer refuses at once never reaches it).
pub(super) fn refused(world: &World, value: &str) -> bool {
    !world.poison_at_once && world.poison.contains(value)
}
