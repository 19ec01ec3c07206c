//! A second instance taking over (exactly-once): the first instance's host is cut off from
//! PostgreSQL (its replication session ends, the slot is free) while its producer may still
//! have a Kafka commit running: a zombie. The second instance, a fresh process, takes the slot,
//! fences the zombie's producer and only then reads the newest checkpoint back.
//!
//! Invariant modelled: the fence settles the zombie's running commit (the coordinator completes
//! a commit that had started, aborts an open transaction), so a checkpoint read after it is the
//! last one that will ever be committed under the old holder. Read before the fence
//! ([`Bug::ReadBeforeFence`](super::Bug)), a commit that lands in between is missing from the
//! start, and what it held is sent again: visible twice to a read-committed reader.
//!
//! At-least-once has no fence: a cut-off instance's records in flight land or not, as after a
//! kill -9, which the model already plays.

use rand::{Rng, rngs::StdRng};

use super::{MemoryView, World};

/// Takeovers play in a quarter of the exactly-once seeds (16-31 of every 64), drawn from the
/// seed alone so that the other seeds' schedules stay what they were.
pub(super) fn plays_in(seed: u64, exactly_once: bool) -> bool {
    exactly_once && (seed / 16) % 4 == 1
}

/// Whether the running instance's host is cut off now; drawn from the schedule's second
/// generator, so that the draws do not move the first one's.
pub(super) fn cut_off_now(world: &World) -> bool {
    match world.second.lock().unwrap().as_mut() {
        Some(rng) => rng.random_bool(0.004),
        None => false,
    }
}

/// The cut-off instance's Kafka state is left running until a later instance fences it.
pub(super) fn leave_running(world: &World, view: MemoryView) {
    *world.zombie.lock().unwrap() = Some(view);
}

/// The fence of a starting instance: the zombie's commits that succeeded are visible, and one
/// that had started may have been completed by the coordinator (`rng`); its open transaction is
/// aborted.
pub(super) fn fence(world: &World, rng: &mut StdRng) {
    let Some(zombie) = world.zombie.lock().unwrap().take() else {
        return;
    };
    let uncertain = rng.random_bool(0.5);
    world.step(format!(
        "kafka: the second instance fences the first; its running commit {}",
        if uncertain { "completes" } else { "is aborted" }
    ));
    super::make_visible(world, &zombie, uncertain);
}
