//! `[relay]`: pipeline limits and behaviour: in-flight limits (backpressure), timeouts,
//! restart backoff, read coalescing, what to do with rows that cannot be delivered, and the
//! state file of the failover checks.

use super::InvalidOption;
use std::path::PathBuf;

use serde::Deserialize;

use super::lenient::{from_str_or_native, option_from_str_or_native};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Most outbox records handed to Kafka and not yet acknowledged. When reached, the relay
    /// stops reading the replication stream (PostgreSQL keeps the WAL) until acks arrive.
    /// Default 10000: at 150k events/s that is ~70 ms of acknowledgements, enough for a local
    /// broker, and it halves the relay's peak memory during a catch-up compared with 50000
    /// (docs/benchmarks.md). Raise it for brokers with high round-trip times.
    #[serde(
        default = "default_max_in_flight_records",
        deserialize_with = "from_str_or_native"
    )]
    pub max_in_flight_records: u64,
    /// Most payload bytes in flight, same rule. Default 67108864 (64 MiB).
    #[serde(
        default = "default_max_in_flight_bytes",
        deserialize_with = "from_str_or_native"
    )]
    pub max_in_flight_bytes: u64,
    /// How long the relay may wait for Kafka with the replication stream paused (the in-flight
    /// limits reached and no acknowledgement arriving) before it closes the replication
    /// connection. The slot keeps its position and the monitor keeps alerting; the relay
    /// reconnects once Kafka answers. While the connection is held the walsender blocks, and
    /// once the retained WAL passes max_slot_wal_keep_size PostgreSQL's checkpointer waits for it;
    /// the connection is also released at once when the slot's wal_status leaves
    /// reserved/extended. Default 30000; 0 releases only on wal_status.
    #[serde(
        default = "default_backpressure_release_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub backpressure_release_ms: u64,
    /// Add the headers `outbox-relay.commit-lsn`, `outbox-relay.commit-time-us` and
    /// `outbox-relay.seq` to every record. Default true.
    #[serde(
        default = "default_relay_headers",
        deserialize_with = "from_str_or_native"
    )]
    pub relay_headers: bool,
    /// On SIGINT/SIGTERM, how long to wait for in-flight acks before exiting. Default 30000.
    #[serde(
        default = "default_shutdown_timeout_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub shutdown_timeout_ms: u64,
    /// How often to send a status update to PostgreSQL, in milliseconds. Default: the smaller
    /// of 1000 and half the server's `wal_sender_timeout`.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub status_interval_ms: Option<u64>,
    /// Without Kafka transactions: a checkpoint is also written as soon as Kafka acknowledged
    /// this many payload bytes (key and value) since the last one, not only once per status
    /// interval, so that what a crash of the relay sends again in a catch-up is about this much
    /// plus what was in flight, not a second's worth. Default 1048576 (1 MiB); 0: by time only.
    #[serde(
        default = "default_checkpoint_bytes",
        deserialize_with = "from_str_or_native"
    )]
    pub checkpoint_bytes: u64,
    /// First delay before restarting after a transient failure. Default 500. Doubles up to
    /// `restart_backoff_max_ms` (default 30000), with jitter.
    #[serde(
        default = "default_restart_backoff_initial_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub restart_backoff_initial_ms: u64,
    /// Longest delay between restarts. Default 30000. A passive instance (the slot is another
    /// instance's) does not wait for it: it watches the slot and tries as soon as it is free.
    #[serde(
        default = "default_restart_backoff_max_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub restart_backoff_max_ms: u64,
    /// Replication events buffered between the socket and the pipeline. Default 1024.
    #[serde(
        default = "default_buffer_events",
        deserialize_with = "from_str_or_native"
    )]
    pub buffer_events: usize,
    /// Read-side coalescing, in microseconds: when the stream has gone quiet after some events,
    /// the relay waits this long before reading again, so that the walsender's next
    /// transactions arrive in one read instead of one wake-up each. Trades at most this much
    /// latency for fewer thread wake-ups (CPU) at steady rates and in a catch-up that reads
    /// faster than the walsender decodes; 0 turns it off. Default 1000.
    #[serde(
        default = "default_read_coalesce_us",
        deserialize_with = "from_str_or_native"
    )]
    pub read_coalesce_us: u64,
    /// What to do with an outbox row that cannot be delivered: a NULL key or topic part, a
    /// topic name Kafka rejects, a mapped column that is missing, or a record Kafka refuses for
    /// good (too large, topic missing with auto-creation off, not authorised). `halt`
    /// (default): stop with the reason and confirm nothing from that row on; the operator
    /// fixes the cause. `dead-letter`: publish a record to `dead_letter_topic` (the whole row,
    /// or the refused record's key and headers, plus the reason and the source position) and
    /// go on. Nothing is ever dropped without a record.
    #[serde(default)]
    pub on_poison: PoisonPolicy,
    /// `at-least-once` (default): nothing is lost; after a crash some events are sent again
    /// (what the last checkpoint in `kafka.checkpoint_topic` did not cover: what was in flight
    /// and what Kafka acknowledged since, see `checkpoint_bytes`). `exactly-once`: read-committed
    /// consumers see every event exactly once through relay, broker and database crashes.
    /// Requires `kafka.transactional_id`; every Kafka transaction ends with a checkpoint, and
    /// after a restart what Kafka already holds is skipped (docs/reliability.md).
    #[serde(default)]
    pub delivery: Delivery,
    /// Topic for dead-lettered rows. Default `outbox-relay.dead-letter`.
    #[serde(default = "default_dead_letter_topic")]
    pub dead_letter_topic: String,
    /// File in which the relay keeps the server's system identifier, the timeline it streamed
    /// from and the commit LSN of the last transaction it published, so that the failover
    /// checks (docs/operations.md, "Failover") also hold across restarts of the relay. Written
    /// atomically every second by the instance that streams; read at start and before every
    /// connect by all, so instances of an active/passive group share one file on a shared
    /// volume that survives restarts. Default: none (the checks cover one process's lifetime).
    #[serde(default)]
    pub state_file: Option<PathBuf>,
    /// With `[source.<name>]` tables: the most sources this process streams at once; the others
    /// wait (as passive instances do) until one of its sources stops. Instances sharing one
    /// config thereby share its sources: with S sources on I instances, `ceil(S / (I - F))`
    /// keeps every source streaming after F instances are lost (docs/operations.md, "Several
    /// instances"). Top level only. Default 0: no limit.
    #[serde(default, deserialize_with = "from_str_or_native")]
    pub max_sources: u64,
    /// With `[source.<name>]` tables: the most payload bytes in flight over all sources of the
    /// process, beside each source's own `max_in_flight_bytes`. A source with nothing in flight
    /// may always read (none starves, and none trips its back-pressure release on the others'
    /// load), so the total may pass this by about one loop turn (64 events) per source. Top
    /// level only. Default 0: no limit (the total is the sum of the sources' limits).
    #[serde(default, deserialize_with = "from_str_or_native")]
    pub max_in_flight_bytes_total: u64,
}

fn default_max_in_flight_records() -> u64 {
    10_000
}
fn default_max_in_flight_bytes() -> u64 {
    64 << 20
}
fn default_backpressure_release_ms() -> u64 {
    30_000
}
fn default_relay_headers() -> bool {
    true
}
fn default_shutdown_timeout_ms() -> u64 {
    30_000
}
fn default_checkpoint_bytes() -> u64 {
    1 << 20
}
fn default_restart_backoff_initial_ms() -> u64 {
    500
}
fn default_restart_backoff_max_ms() -> u64 {
    30_000
}
fn default_buffer_events() -> usize {
    1024
}
fn default_read_coalesce_us() -> u64 {
    1000
}
fn default_dead_letter_topic() -> String {
    "outbox-relay.dead-letter".into()
}

/// See [`RelayConfig::on_poison`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoisonPolicy {
    #[default]
    Halt,
    DeadLetter,
}

/// See [`RelayConfig::delivery`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    #[default]
    AtLeastOnce,
    ExactlyOnce,
}

impl RelayConfig {
    pub(super) fn validate(&self) -> Result<(), InvalidOption> {
        if !relay_core::route::valid_topic(&self.dead_letter_topic) {
            return Err(InvalidOption::new(
                "relay.dead_letter_topic",
                format!(
                    "relay.dead_letter_topic = {:?} is not a valid Kafka topic name",
                    self.dead_letter_topic
                ),
            ));
        }
        for (option, value) in [
            ("relay.max_in_flight_records", self.max_in_flight_records),
            ("relay.max_in_flight_bytes", self.max_in_flight_bytes),
        ] {
            if value == 0 {
                return Err(InvalidOption::new(
                    option,
                    format!(
                        "{option} = 0: it must be > 0 (the relay could never hand Kafka a record)"
                    ),
                ));
            }
        }
        if self.read_coalesce_us > 100_000 {
            return Err(InvalidOption::new(
                "relay.read_coalesce_us",
                format!(
                    "relay.read_coalesce_us = {} adds that much latency to every quiet moment; use \
                 at most 100000 (0 turns coalescing off)",
                    self.read_coalesce_us
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;
    use super::*;

    #[test]
    fn defaults() {
        let r = load("", &[]).unwrap().relay;
        assert_eq!(
            (r.max_in_flight_records, r.max_in_flight_bytes),
            (10_000, 64 << 20)
        );
        assert_eq!(r.backpressure_release_ms, 30_000);
        assert!(r.relay_headers && r.status_interval_ms.is_none());
        assert_eq!(r.on_poison, PoisonPolicy::Halt);
        assert_eq!(r.dead_letter_topic, "outbox-relay.dead-letter");
    }

    #[test]
    fn backpressure_release_ms_from_file_and_environment() {
        let r = load("[relay]\nbackpressure_release_ms = 0\n", &[])
            .unwrap()
            .relay;
        assert_eq!(r.backpressure_release_ms, 0);
        let r = load(
            "[relay]\nbackpressure_release_ms = 5\n",
            &[("OUTBOX_RELAY__RELAY__BACKPRESSURE_RELEASE_MS", "120000")],
        )
        .unwrap()
        .relay;
        assert_eq!(r.backpressure_release_ms, 120_000);
        let e = load("[relay]\nbackpressure_release_ms = -1\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("relay.backpressure_release_ms = -1"), "{e}");
    }

    #[test]
    fn limits_and_topic_are_validated_with_the_key_in_the_message() {
        for (toml, needle) in [
            (
                "[relay]\nmax_in_flight_bytes = 0\n",
                "relay.max_in_flight_bytes",
            ),
            (
                "[relay]\nread_coalesce_us = 100001\n",
                "relay.read_coalesce_us",
            ),
            (
                "[relay]\ndead_letter_topic = \"a b\"\n",
                "relay.dead_letter_topic",
            ),
            (
                "[relay]\non_poison = \"skip\"\n",
                "relay.on_poison = \"skip\"",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err().to_string();
            assert!(e.contains(needle), "{toml:?} -> {e}");
        }
        let r = load("[relay]\non_poison = \"dead-letter\"\n", &[])
            .unwrap()
            .relay;
        assert_eq!(r.on_poison, PoisonPolicy::DeadLetter);
    }

    #[test]
    fn exactly_once_needs_a_transactional_id() {
        assert_eq!(load("", &[]).unwrap().relay.delivery, Delivery::AtLeastOnce);
        let err = load("[relay]\ndelivery = \"exactly-once\"\n", &[]).unwrap_err();
        assert!(
            err.to_string().contains("requires kafka.transactional_id"),
            "{err}"
        );
        let c = load(
            "[relay]\ndelivery = \"exactly-once\"\n[kafka]\ntransactional_id = \"t\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.relay.delivery, Delivery::ExactlyOnce);
        assert_eq!(c.kafka.checkpoint_topic, "outbox-relay.checkpoints");
        assert!(load("[relay]\ndelivery = \"twice\"\n", &[]).is_err());
    }
}
