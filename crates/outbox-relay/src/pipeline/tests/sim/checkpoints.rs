//! At-least-once checkpoints in the model. Without Kafka transactions the relay writes a
//! checkpoint after the acknowledgements it covers (once per status interval, and once
//! `relay.checkpoint_bytes` were acknowledged since the last), and a start skips what the newest
//! one Kafka holds covers: the path a restart after a PostgreSQL crash takes, where the slot
//! comes back behind what Kafka holds.
//!
//! The broker stores one producer's records of a partition in order, so what a run leaves
//! stored is a prefix of the checkpoints it wrote: all of them, unless the process was killed
//! (kill -9), then any prefix. A checkpoint covers only records Kafka acknowledged, which the
//! model stored when it acknowledged them.

use rand::Rng;

use super::{Bug, Carry, Config, Identity, Lsn, MemorySink, World};
use crate::pipeline::state::Start;

/// `relay.checkpoint_bytes` of an at-least-once schedule, from its seed alone (the in-memory
/// sink reports 10 bytes a record: a checkpoint after every record, every third, or by time
/// only, as with the default 1 MiB here, or never by volume).
pub(super) fn bytes_of(seed: u64) -> u64 {
    [10, 30, 1 << 20, 0][((seed / 128) % 4) as usize]
}

/// After an at-least-once run: the checkpoints it wrote that the broker stored.
pub(super) fn store(world: &World, sink: &MemorySink, killed: bool) {
    let written = sink.checkpoints();
    let kept = if killed {
        world
            .checkpoint_draws
            .lock()
            .unwrap()
            .random_range(0..=written.len())
    } else {
        written.len()
    };
    if kept < written.len() {
        world.step(format!(
            "kafka: {kept} of the killed run's {} checkpoints stored",
            written.len()
        ));
    }
    world
        .checkpoints
        .lock()
        .unwrap()
        .extend(written.into_iter().take(kept));
}

/// Where a run starts: the slot's position, and the skip and trail of the newest checkpoint
/// Kafka holds, as `checkpoints::start` reads them back.
pub(super) fn start_of(world: &World, cfg: &Config, slot: u64, carry: &mut Carry) -> Start {
    let start = Lsn(slot);
    let id = Identity::new(cfg, "42", 1);
    // As `checkpoints::start`: at-least-once, a checkpoint the last run found contradicted by
    // the stream is ignored once (no skip); exactly-once stops instead.
    if std::mem::take(&mut carry.ignore_checkpoint) && !world.exactly_once {
        return crate::pipeline::checkpoints::resume(None, start, id);
    }
    let c = world
        .checkpoints
        .lock()
        .unwrap()
        .last()
        .map(|v| relay_core::checkpoint::Checkpoint::from_json(v).unwrap());
    let c = c.filter(|_| world.bug != Bug::NoSkip);
    crate::pipeline::checkpoints::resume(c, start, id)
}
