//! What the supervisor keeps across pipeline restarts: refused events (dead-letter policy) and
//! the failover memory (the server's identity and the last published commit).

use relay_core::{Lsn, deadletter::Refusals};

/// What the supervisor keeps across pipeline restarts.
#[derive(Debug, Default)]
pub(crate) struct Carry {
    /// Events Kafka refused for good (dead-letter policy).
    pub(crate) refusals: Refusals,
    /// The server's system identifier and the timeline last streamed from.
    pub(crate) identity: Option<(String, u32)>,
    /// Commit LSN of the last transaction with a record handed to Kafka (`ZERO`: none yet);
    /// a promoted server must have it in its history ([`relay_core::timeline`]).
    pub(crate) published: Lsn,
    /// The checkpoint topic was created or checked ([`crate::sink::checkpoint_topic::prepare_topic`]).
    pub(crate) checkpoint_topic_ready: bool,
    /// At-least-once mode: the last connection found the checkpoint contradicted by the
    /// stream; the next start skips nothing (and writes checkpoints of the new history).
    pub(crate) ignore_checkpoint: bool,
    /// What `idle_replication_slot_timeout` means was logged (once, not on every attempt).
    pub(crate) idle_timeout_told: bool,
}
