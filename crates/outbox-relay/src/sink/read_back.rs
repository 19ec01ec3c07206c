//! Reading committed records back from Kafka: the checkpoint topic at a start, the heal's
//! partitions, Connect's offsets topic at a cutover. One consumer setting for all of them (a
//! group never committed to, read committed, the end of a partition reported) and, for the
//! checkpoint and the heal, the blocking read run off the runtime's thread within its limit.
//!
//! Invariant: read-back consumers read with `isolation.level=read_committed`, so what they find
//! is in committed Kafka transactions only (a record of an aborted or still open one is never
//! taken as durable).

use std::time::Duration;

use rdkafka::ClientConfig;

use super::client_config;
use crate::{
    config::KafkaConfig,
    error::{RelayError, Transient},
};

/// A read-back consumer's settings, as consumer group `group` (which it never commits to).
pub(crate) fn read_back_config(cfg: &KafkaConfig, group: &str) -> Result<ClientConfig, RelayError> {
    let mut c = client_config(cfg)?;
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true");
    Ok(c)
}

/// Runs `read` with the consumer settings `c` on a blocking thread, with how long it may take:
/// read-committed consumers wait for open transactions of other slots' relays, which Kafka
/// ends within their transaction timeout.
pub(crate) async fn read_back<T: Send + 'static>(
    cfg: &KafkaConfig,
    c: ClientConfig,
    read: impl FnOnce(ClientConfig, Duration) -> Result<T, RelayError> + Send + 'static,
) -> Result<T, RelayError> {
    let limit = Duration::from_millis(cfg.connect_timeout_ms) + Duration::from_secs(70);
    tokio::task::spawn_blocking(move || read(c, limit))
        .await
        .map_err(Transient::checkpoint_by)?
}
