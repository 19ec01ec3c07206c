//! The Kafka client's errors as the seam's failures ([`Failure`]): the Kafka edge's one
//! mapping, so the pipeline and the in-memory sink never see the client's error type.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::{Failed, Failure, is_fenced};
use crate::error::RelayError;

/// The outcome given to a success report that carries no offset (the delivery callback of
/// [`SinkContext`](super::SinkContext)).
pub(super) const IMPLICIT_ACK: RDKafkaErrorCode = RDKafkaErrorCode::Inconsistent;

/// The seam's failure for the client's error `e` (the Kafka edge's one mapping): errors
/// retrying cannot fix are refusals with a hint for the operator.
pub(crate) fn failure_of(e: &KafkaError) -> Failure {
    let code = e.rdkafka_error_code();
    let kind = match code {
        Some(c) if is_fenced(c) => Failed::Fenced,
        Some(RDKafkaErrorCode::MessageSizeTooLarge)
        | Some(RDKafkaErrorCode::InvalidMessageSize) => Failed::Refused {
            hint: "the event is larger than the topic's max.message.bytes or the producer's message.max.bytes; raise both (kafka.properties.\"message.max.bytes\") or shrink the payload",
        },
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => Failed::Refused {
            hint: "the relay's Kafka principal may not write to this topic; grant WRITE on it",
        },
        Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => Failed::Refused {
            hint: "the relay's Kafka principal lacks IDEMPOTENT_WRITE on the cluster; grant it",
        },
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) | Some(RDKafkaErrorCode::UnknownTopic) => {
            Failed::Refused {
                hint: "the topic does not exist and the brokers do not create topics automatically; create it",
            }
        }
        Some(RDKafkaErrorCode::InvalidRecord) | Some(RDKafkaErrorCode::InvalidMessage) => {
            Failed::Refused {
                hint: "the broker rejected the record as invalid",
            }
        }
        Some(RDKafkaErrorCode::InvalidTopic) => Failed::Refused {
            hint: "the topic name is not valid for this cluster",
        },
        Some(IMPLICIT_ACK) => Failed::Unacknowledged,
        Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight) => Failed::Purged,
        _ => Failed::Transient,
    };
    Failure::new(kind, e.clone())
}

/// Classifies a failed delivery ([`failure_of`], [`Failure::error`]): errors retrying cannot
/// fix stop the relay with a hint (the caller names the change: [`RelayError::refusing`]).
pub(crate) fn delivery_error(e: &KafkaError, topic: &str) -> RelayError {
    failure_of(e).error(topic)
}
