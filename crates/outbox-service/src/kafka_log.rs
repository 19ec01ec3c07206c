//! librdkafka's own log lines, forwarded to `tracing` at their level for every Kafka client of
//! the relay and the applier (producer, checkpoint reader, admin client, consumer), with the
//! notices every healthy start prints lowered to debug.

use rdkafka::config::RDKafkaLogLevel;

/// librdkafka warnings that every healthy start prints: the transaction coordinator still
/// loading on a fresh broker (retried by librdkafka), and the notice that
/// `enable.gapless.guarantee`, which the relay sets on purpose, is marked experimental. Logged
/// at debug so that the first lines a new user sees are the relay's own.
fn is_benign(log_message: &str) -> bool {
    log_message.contains("Coordinator load in progress")
        // The checkpoint reader and the admin client get the producer's extra properties.
        || log_message.contains("is a producer property and will be ignored")
        || log_message.contains("enable.gapless.guarantee is experimental")
}

/// librdkafka's log lines, for every client of the relay and the applier: the benign ones at debug.
pub fn log_librdkafka(level: RDKafkaLogLevel, fac: &str, log_message: &str) {
    if is_benign(log_message) {
        tracing::debug!(facility = fac, "librdkafka: {log_message}");
        return;
    }
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(facility = fac, "librdkafka: {log_message}")
        }
        RDKafkaLogLevel::Warning => tracing::warn!(facility = fac, "librdkafka: {log_message}"),
        _ => tracing::debug!(facility = fac, "librdkafka: {log_message}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn startup_notices_are_not_warnings() {
        assert!(super::is_benign(
            "[thrd:app]: Configuration property enable.gapless.guarantee is experimental: ..."
        ));
        assert!(super::is_benign(
            "TxnCoordinator/1: FindCoordinator: Coordinator load in progress: retrying"
        ));
        assert!(!super::is_benign(
            "ProduceRequest failed: Broker: Message size too large"
        ));
    }
}
