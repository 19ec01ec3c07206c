//! What travels with a record through librdkafka and comes back with its delivery report: its
//! [`Origin`] (transaction, source position, the head rule's partition) and the report itself
//! ([`Delivered`]).

use std::sync::Arc;

use relay_core::{Lsn, watermark::TxId};

use super::Failure;

/// Where a record comes from: its transaction in the tracker and its source position.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub(crate) tx: TxId,
    pub(crate) commit_lsn: Lsn,
    pub(crate) seq: u64,
    pub(crate) commit_time_unix_us: i64,
    /// The partition the pipeline's head rule counts it under ([`relay_core::head`]; -1: the
    /// topic's partition not known), or [`NO_HEAD`] (not counted: in Kafka transactions, or a
    /// dead-letter record in a refused one's place).
    pub(crate) head: i32,
}

/// [`Origin::head`] of a record the head rule does not count.
pub(crate) const NO_HEAD: i32 = i32::MIN;

/// A delivery report, in whatever order Kafka answers.
#[derive(Debug)]
pub(crate) struct Delivered {
    pub(crate) origin: Origin,
    pub(crate) bytes: u64,
    pub(crate) topic: Arc<str>,
    /// The seam's own outcome ([`Failure`]): the client's error is mapped at the edge
    /// ([`failure_of`](super::failure_of)).
    pub(crate) outcome: Result<(), Failure>,
}

impl Delivered {
    /// Purged by librdkafka (a failed transaction, a producer being dropped), not refused.
    pub(crate) fn is_purged(&self) -> bool {
        self.outcome.as_ref().is_err_and(Failure::is_purged)
    }
}

/// What travels with each record through librdkafka: an event's origin, or nothing for a
/// checkpoint (whose outcome the sink keeps itself:
/// [`KafkaSink::checkpoint_failure`](super::KafkaSink::checkpoint_failure)).
pub(crate) struct Pending {
    pub(super) origin: Option<Origin>,
    pub(super) bytes: u64,
}
