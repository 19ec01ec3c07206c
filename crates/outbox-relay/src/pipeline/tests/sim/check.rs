//! The invariants checked once a schedule is over (the confirmations are checked as they
//! happen, in `postgres`): nothing lost; each key's first occurrences on its topic in commit
//! order (dead-letter records are on a topic of their own, so outside a key's order);
//! exactly-once, nothing visible twice to a read-committed reader; a poison event only ever on
//! the dead-letter topic, and nothing else there.

use std::collections::{HashMap, HashSet};

use super::{World, poison};

/// Checks what Kafka holds against the WAL.
pub(super) fn delivery(world: &World) {
    let pg = world.pg.lock().unwrap();
    let log = world.log.lock().unwrap();
    let mut want: HashMap<&str, Vec<&str>> = HashMap::new();
    for t in &pg.txns {
        for (k, v) in &t.rows {
            want.entry(k).or_default().push(v);
        }
    }
    let mut got: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut seen = HashSet::new();
    for (k, logged) in log.iter() {
        let (v, dead_lettered) = poison::event(logged);
        if dead_lettered != world.poison.contains(v) {
            world.violation(if dead_lettered {
                format!("key {k}: {v}, which Kafka accepts, was dead-lettered")
            } else {
                format!("key {k}: {v}, which Kafka refuses for good, stored on its topic")
            });
        }
        if seen.insert(v) {
            // Order is a topic's: a dead-letter record is on a topic of its own.
            if !dead_lettered {
                got.entry(k).or_default().push(v);
            }
        } else if world.exactly_once {
            world.violation(format!(
                "key {k}: {v} visible twice to a read-committed reader"
            ));
        }
    }
    for (k, w) in &want {
        let g = got.get(k).cloned().unwrap_or_default();
        let lost: Vec<&&str> = w.iter().filter(|v| !seen.contains(**v)).collect();
        if !lost.is_empty() {
            world.violation(format!("key {k}: lost {lost:?}"));
        } else if g
            != w.iter()
                .copied()
                .filter(|v| !world.poison.contains(*v))
                .collect::<Vec<_>>()
        {
            world.violation(format!(
                "key {k}: first seen in the order {g:?}, committed {w:?}"
            ));
        }
    }
}
