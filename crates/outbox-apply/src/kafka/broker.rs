//! The Kafka connection as the applier's log tells it (`relay_core::apply::outage`): librdkafka
//! reports every failed reconnect, through the error callback and through the consumer's poll,
//! several times a second for a whole outage. This turns them into one line when the broker
//! goes (`apply_kafka_unreachable`), a reminder every minute, and one line when it is back
//! (`apply_kafka_reachable`). Other errors are logged as they come (`apply_kafka_error`).

use std::{sync::Mutex, time::Instant};

use rdkafka::{
    config::RDKafkaLogLevel,
    error::{KafkaError, RDKafkaErrorCode},
};
use relay_core::apply::outage::{Outage, REMIND_EVERY, Say};

use crate::telemetry::events::{APPLY_KAFKA_ERROR, APPLY_KAFKA_REACHABLE, APPLY_KAFKA_UNREACHABLE};

pub(super) struct BrokerLog {
    epoch: Instant,
    outage: Mutex<Outage>,
}

/// An error that says the brokers cannot be reached (retried by librdkafka by itself).
fn is_connectivity(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
                | RDKafkaErrorCode::BrokerNotAvailable
                | RDKafkaErrorCode::NetworkException
        )
    )
}

impl BrokerLog {
    pub(super) fn new() -> BrokerLog {
        BrokerLog {
            epoch: Instant::now(),
            outage: Mutex::new(Outage::default()),
        }
    }

    fn outage(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An error from the consumer (its poll, or librdkafka's error callback with `reason`).
    pub(super) fn error(&self, e: &KafkaError, reason: &str) {
        if !is_connectivity(e) {
            tracing::warn!(error = %e, reason, "{APPLY_KAFKA_ERROR}: the consumer reported an error; it reconnects by itself");
            return;
        }
        let said = self.outage().error(self.epoch.elapsed());
        match said {
            Some(Say::Down) => {
                tracing::warn!(error = %e, reason, remind_every_s = REMIND_EVERY.as_secs(), "{APPLY_KAFKA_UNREACHABLE}: the brokers cannot be reached; the consumer reconnects by itself, records already read are still applied")
            }
            Some(Say::Still { for_, errors }) => {
                tracing::warn!(error = %e, reason, for_s = for_.as_secs(), errors, "{APPLY_KAFKA_UNREACHABLE}: the brokers are still unreachable")
            }
            _ => {}
        }
    }

    /// A sign of a reachable broker: a record read, or a broker up in the statistics.
    pub(super) fn up(&self) {
        if !self.outage().is_away() {
            return;
        }
        if let Some(Say::Back { after, errors }) = self.outage().up(self.epoch.elapsed()) {
            tracing::info!(
                after_s = after.as_secs(),
                errors,
                "{APPLY_KAFKA_REACHABLE}: the brokers are reachable again"
            );
        }
    }

    /// librdkafka's statistics: a broker (not the bootstrap entry) in state UP.
    pub(super) fn stats(&self, s: &rdkafka::Statistics) {
        if s.brokers.values().any(|b| b.nodeid >= 0 && b.state == "UP") {
            self.up();
        }
    }

    /// librdkafka's own log lines: while the brokers are away, its connection failures
    /// (facility FAIL, and the like) are at debug, the outage's lines say it.
    pub(super) fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let level = if self.outage().is_away() || fac == "FAIL" {
            RDKafkaLogLevel::Debug
        } else {
            level
        };
        outbox_service::kafka_log::log_librdkafka(level, fac, message);
    }
}
