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
}
