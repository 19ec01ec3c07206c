//! A delivery's failure as the seam states it ([`Failure`]): what the pipeline decides on
//! (retry after a restart, stop, dead-letter, look further for the cause) and the text the
//! operator reads. The Kafka sink maps the client's errors into it at the edge
//! ([`super::failure_of`]); the pipeline and the in-memory sink of its tests never see the
//! client's error type.
//!
//! Invariant: the mapping from a failure to the relay's error ([`Failure::error`]) is the one
//! place that decides which failures stop the relay for good ([`Definite::DeliveryRefused`],
//! the poison policy's case) and which end the connection for a restart; the client's error
//! stays the error's `source()`.

use std::fmt;

use crate::error::{ClientError, Definite, RelayError, Transient};

/// Why Kafka did not take a record.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    kind: Failed,
    /// The client's error: its text is the operator's and the dead-letter record's reason.
    cause: ClientError,
}

/// What the pipeline decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// Refused for good: sent again, it is refused again (too large, not authorized, no such
    /// topic, invalid). `hint` tells the operator what to change.
    Refused { hint: &'static str },
    /// Another producer with the same transactional id fenced this one.
    Fenced,
    /// Purged by the client (a failed transaction, a producer being dropped), not refused:
    /// the record at fault, if any, is reported on its own.
    Purged,
    /// Reported delivered without an offset: acknowledged only implicitly, by a later
    /// request's success, so not taken as acknowledged.
    Unacknowledged,
    /// Anything else: a restart sends it again, and it may go through.
    Transient,
}

impl Failure {
    /// A failure of `kind`, caused by the client's error `cause`.
    pub(crate) fn new(kind: Failed, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            kind,
            cause: ClientError::new(cause),
        }
    }

    /// Purged, not refused ([`Failed::Purged`]).
    pub(crate) fn is_purged(&self) -> bool {
        self.kind == Failed::Purged
    }

    /// Refused for good ([`Failed::Refused`]): the poison policy's case.
    pub(crate) fn is_refused(&self) -> bool {
        matches!(self.kind, Failed::Refused { .. })
    }

    /// The relay's error for a record of `topic` that failed so (the caller names the change:
    /// [`RelayError::refusing`]).
    pub(crate) fn error(&self, topic: &str) -> RelayError {
        let source = || Box::new(self.cause.clone());
        match self.kind {
            Failed::Fenced => RelayError::from(Transient::fenced_by(self.cause.clone())),
            Failed::Refused { hint } => RelayError::from(Definite::DeliveryRefused {
                topic: topic.to_string(),
                change: None,
                code: self.cause.to_string(),
                hint,
                source: source(),
            }),
            Failed::Unacknowledged => Transient::Delivery {
                topic: topic.to_string(),
                code: "reported delivered without an offset (acknowledged only implicitly, by a \
                       later request's success), so not taken as acknowledged"
                    .to_string(),
                source: Some(source()),
            }
            .into(),
            Failed::Purged | Failed::Transient => Transient::Delivery {
                topic: topic.to_string(),
                code: self.cause.to_string(),
                source: Some(source()),
            }
            .into(),
        }
    }
}

/// The client's error, as the operator reads it.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.cause.fmt(f)
    }
}
