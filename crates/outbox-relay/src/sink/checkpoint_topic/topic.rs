//! The checkpoint topic created or checked at a start: one partition, compacted.
//!
//! Invariant: only what the operator must change stops a source. A broker that is slow or
//! busy (a CreateTopics that timed out, a topic another instance is creating and whose
//! partition or configuration the broker does not show yet) is transient: the pipeline
//! restarts after its backoff and looks again. Several instances that start together race to
//! create the topic, and on a loaded broker the loser reads it mid-creation; taking that as
//! definite stopped sources for good until a reload (issue: every red run explained, item 5).

use std::time::Duration;

use rdkafka::{
    admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication},
    error::{KafkaError, RDKafkaErrorCode},
};

use super::Quiet;
use crate::{
    config::{Config, Delivery},
    error::{Definite, RelayError, Transient},
    sink::{client::Aside, client_config},
    telemetry::events::{CHECKPOINT_TOPIC_CREATED, CHECKPOINT_TOPIC_UNUSABLE},
};

/// Creates the checkpoint topic if it is missing and checks its settings (one partition,
/// compacted). `Ok(false)`: unusable in at-least-once mode, for a reason the operator must
/// change (warned; the relay goes on without checkpoints and looks again at the pipeline's next
/// start). Otherwise every problem is an error: transient when the broker may yet answer (the
/// pipeline restarts after its backoff, in either mode: an at-least-once relay that went on
/// without checkpoints for a slow broker could not heal a slot lost later), definite when the
/// topic is wrong or the principal may not use it.
pub(crate) async fn prepare_topic(cfg: &Config) -> Result<bool, RelayError> {
    let exactly_once = cfg.relay.delivery == Delivery::ExactlyOnce;
    match ensure_topic(cfg).await {
        Ok(()) => Ok(true),
        Err(e) if exactly_once || e.is_transient() => Err(e),
        Err(e) => {
            tracing::warn!(
                topic = %cfg.kafka.checkpoint_topic, error = %e,
                "{CHECKPOINT_TOPIC_UNUSABLE}: going on without checkpoints; after a PostgreSQL \
                 crash more events are sent again (docs/security.md lists the grants)"
            );
            Ok(false)
        }
    }
}

async fn ensure_topic(cfg: &Config) -> Result<(), RelayError> {
    let topic = &cfg.kafka.checkpoint_topic;
    let timeout = Duration::from_millis(cfg.kafka.connect_timeout_ms);
    let admin: Aside<std::sync::Arc<AdminClient<Quiet>>> = Aside::new(
        client_config(&cfg.kafka)?
            .create_with_context::<Quiet, AdminClient<Quiet>>(Quiet)
            .map_err(Definite::kafka_setup_by)?
            .into(),
    );
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
    let created = admin
        .create_topics([&new], &opts)
        .await
        .map_err(|e| failed(topic, "cannot create it", &e))?;
    match created.first() {
        Some(Ok(_)) => {
            tracing::info!(topic = %topic, "{CHECKPOINT_TOPIC_CREATED}: 1 partition, cleanup.policy=compact");
            return Ok(());
        }
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {}
        Some(Err((_, code))) if is_definite(*code) => {
            return Err(unusable(
                topic,
                format!(
                    "cannot create it ({code:?}); create it with 1 partition and cleanup.policy=compact, or grant CREATE"
                ),
            ));
        }
        Some(Err((_, code))) => {
            return Err(not_ready(topic, format!("creating it answered {code:?}")));
        }
        None => return Err(not_ready(topic, "no answer to CreateTopics".into())),
    }
    // A blocking call: off the runtime's one thread, which opens the replication session
    // meanwhile (pipeline::stream).
    let meta = {
        let (admin, name) = (std::sync::Arc::clone(&admin), topic.clone());
        tokio::task::spawn_blocking(move || admin.inner().fetch_metadata(Some(&name), timeout))
            .await
            .map_err(|e| not_ready(topic, format!("describing it did not finish: {e}")))?
            .map_err(|e| failed(topic, "cannot describe it", &e))?
    };
    let partitions = match meta.topics().first() {
        None => return Err(not_ready(topic, "the broker does not list it yet".into())),
        Some(t) => match t.error().map(RDKafkaErrorCode::from) {
            Some(code) if is_definite(code) => {
                return Err(unusable(topic, format!("cannot describe it ({code:?})")));
            }
            Some(code) => return Err(not_ready(topic, format!("its metadata says {code:?}"))),
            None => t.partitions().len(),
        },
    };
    // rust-rdkafka drops DescribeConfigs' per-resource error: a principal without
    // DESCRIBE_CONFIGS gets an empty answer, as a broker whose metadata lags behind the one that
    // listed the partitions may. Asked again briefly, then taken as the operator's to fix.
    let mut asked = 0;
    let policy = loop {
        let configs = admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
            .await
            .map_err(|e| failed(topic, "cannot describe its configuration", &e))?;
        asked += 1;
        match configs.first() {
            None => return Err(not_ready(topic, "no answer to DescribeConfigs".into())),
            Some(Err(code)) if is_definite(*code) => {
                return Err(unusable(
                    topic,
                    format!("cannot describe its configuration ({code:?}); grant DESCRIBE_CONFIGS"),
                ));
            }
            Some(Err(code)) => {
                return Err(not_ready(
                    topic,
                    format!("describing its configuration answered {code:?}"),
                ));
            }
            Some(Ok(r)) if r.entries.is_empty() && partitions > 0 => {
                if asked >= HIDDEN_ASKS {
                    return Err(unusable(
                        topic,
                        format!(
                            "the broker lists its {partitions} partition(s) but describes no \
                             configuration of it ({asked} times): the principal may lack \
                             DESCRIBE_CONFIGS on it; grant it (docs/security.md)"
                        ),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Some(Ok(r)) => break r.get("cleanup.policy").and_then(|e| e.value.clone()),
        }
    };
    match check_settings(partitions, policy.as_deref()) {
        Settings::Usable => Ok(()),
        Settings::Incomplete => Err(not_ready(
            topic,
            format!(
                "the broker shows {partitions} partitions and cleanup.policy={policy:?}: it is \
                 still being created"
            ),
        )),
        Settings::Wrong => Err(unusable(
            topic,
            format!(
                "it has {partitions} partitions and cleanup.policy={:?}; the relay needs 1 \
                 partition and cleanup.policy=compact: delete it (the relay re-creates it) or \
                 set kafka.checkpoint_topic to another topic",
                policy.unwrap_or_default()
            ),
        )),
    }
}

/// How many times an empty DescribeConfigs answer for a listed topic is asked again.
const HIDDEN_ASKS: u32 = 5;

/// What the broker shows of an existing checkpoint topic.
#[derive(Debug, PartialEq, Eq)]
enum Settings {
    Usable,
    /// No partition or no cleanup policy yet: a topic being created (read mid-creation by the
    /// instance that lost the race to create it).
    Incomplete,
    /// Settings the operator must change.
    Wrong,
}

fn check_settings(partitions: usize, policy: Option<&str>) -> Settings {
    match (partitions, policy) {
        (1, Some("compact")) => Settings::Usable,
        (0, _) | (_, None) | (_, Some("")) => Settings::Incomplete,
        _ => Settings::Wrong,
    }
}

/// A broker's answer that retrying cannot change: the principal's rights or the request itself.
pub(super) fn is_definite(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::PolicyViolation
            | C::InvalidConfig
            | C::InvalidReplicationFactor
            | C::InvalidPartitions
            | C::InvalidTopic
            | C::InvalidRequest
            | C::UnsupportedVersion
            | C::SaslAuthenticationFailed
            | C::Authentication
    )
}

/// A request that failed as a whole: definite only for an answer the operator must act on.
fn failed(topic: &str, what: &str, e: &KafkaError) -> RelayError {
    let code = match e {
        // rdkafka gives an admin request's code only through the variant.
        KafkaError::AdminOp(code) => Some(*code),
        e => e.rdkafka_error_code(),
    };
    match code {
        Some(code) if is_definite(code) => unusable(topic, format!("{what}: {e}")),
        _ => not_ready(topic, format!("{what}: {e}")),
    }
}

/// A definite problem with the checkpoint topic: the operator's to fix.
pub(super) fn unusable(topic: &str, detail: String) -> RelayError {
    Definite::CheckpointTopic {
        topic: topic.to_string(),
        detail,
    }
    .into()
}

fn not_ready(topic: &str, detail: String) -> RelayError {
    Transient::CheckpointTopicNotReady {
        topic: topic.to_string(),
        detail,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_read_mid_creation_is_incomplete_not_wrong() {
        // What CI and a loaded broker showed the instance that lost the race to create it.
        assert_eq!(check_settings(0, Some("")), Settings::Incomplete);
        assert_eq!(check_settings(0, None), Settings::Incomplete);
        assert_eq!(check_settings(1, None), Settings::Incomplete);
        assert_eq!(check_settings(0, Some("compact")), Settings::Incomplete);
        assert_eq!(check_settings(1, Some("compact")), Settings::Usable);
        assert_eq!(check_settings(3, Some("compact")), Settings::Wrong);
        assert_eq!(check_settings(1, Some("delete")), Settings::Wrong);
        assert_eq!(check_settings(1, Some("compact,delete")), Settings::Wrong);
    }

    #[test]
    fn a_slow_broker_is_transient_and_a_refusal_definite() {
        let slow = KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut);
        assert!(failed("t", "cannot create it", &slow).is_transient());
        let timed_out = KafkaError::AdminOp(RDKafkaErrorCode::RequestTimedOut);
        assert!(failed("t", "cannot create it", &timed_out).is_transient());
        let denied = KafkaError::AdminOp(RDKafkaErrorCode::TopicAuthorizationFailed);
        let e = failed("t", "cannot create it", &denied);
        assert!(!e.is_transient());
        assert_eq!(e.reason(), "checkpoint_topic");
        assert_eq!(
            not_ready("t", "x".into()).reason(),
            "checkpoint_topic_not_ready"
        );
    }
}
