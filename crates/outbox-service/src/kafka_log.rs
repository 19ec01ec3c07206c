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
        || from_own_purge(log_message)
}

/// librdkafka's "Fatal error: … Gap-less ordering would not be guaranteed …: Purged in flight":
/// what a producer says as it is dropped with requests in flight (the client library purges
/// them, and the gapless guarantee calls that fatal). Only the application purges, and the
/// relay and the applier do so only by dropping a producer they are done with (a restart,
/// whose unconfirmed records are sent again; a stop) or by aborting the open Kafka transaction
/// after the pipeline failed ("Current transaction failed in state BeginAbort: … Purged in
/// queue": the abort purges what was still queued, seen as an ERROR line in the exactly-once
/// run of `sources::network` on 2026-12-07): an error of records the relay itself gave up on,
/// which a PostgreSQL connection drop used to turn into an ERROR line and two warnings.
pub fn from_own_purge(message: &str) -> bool {
    message.contains("Purged in flight") || message.contains("Purged in queue")
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
    fn a_dropped_producers_purge_is_not_an_error() {
        assert!(super::is_benign(
            "[thrd:127.0.0.1:19092/1]: Fatal error: Local: Gap-less ordering would not be \
             guaranteed if proceeding: ProduceRequest for t.order [1] with 1 message(s) failed: \
             Local: Purged in flight (broker 1 PID{Id:2,Epoch:0}, base seq 1): unable to \
             satisfy gap-less guarantee"
        ));
        assert!(!super::is_benign(
            "[thrd:127.0.0.1:19092/1]: Fatal error: Local: Gap-less ordering would not be \
             guaranteed if proceeding: ProduceRequest for t.order [1] with 1 message(s) failed: \
             Broker: Message size too large: unable to satisfy gap-less guarantee"
        ));
    }

    #[test]
    fn the_purge_of_the_relay_s_own_abort_is_not_an_error() {
        assert!(super::is_benign(
            "[thrd:127.0.0.1:19092/1]: Current transaction failed in state BeginAbort: \
             ProduceRequest for t.order [0] with 30 message(s) failed: Local: Purged in queue \
             (broker 1 PID{Id:690,Epoch:0}, base seq 14): current transaction must be aborted \
             (_PURGE_QUEUE)"
        ));
        assert!(!super::is_benign(
            "[thrd:127.0.0.1:19092/1]: Current transaction failed in state InTransaction: \
             ProduceRequest for t.order [0] with 30 message(s) failed: Broker: Topic \
             authorization failed: current transaction must be aborted"
        ));
    }

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
