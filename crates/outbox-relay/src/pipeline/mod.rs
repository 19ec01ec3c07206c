//! The one loop that owns the replication connection:
//!
//! ```text
//! replication stream ─▶ decode ─▶ route ─▶ Kafka (in source order)
//!        ▲                                   │ delivery reports (any order)
//!        └── update_applied_lsn ◀─ relay_core::progress::Progress
//! ```
//!
//! Progress rule ([`Progress`]): the only LSN ever confirmed is the end of the longest prefix of
//! transactions Kafka fully acknowledged (or an idle keepalive behind it), and with Kafka
//! transactions only what a committed Kafka transaction holds.
//! Backpressure: when too many records or bytes are in flight the loop stops reading the stream;
//! pgwire-replication then stops reading the socket but keeps sending status updates, so
//! PostgreSQL keeps the WAL. The connection is let go after `relay.backpressure_release_ms`
//! without an acknowledgement, or at once when the slot's `wal_status` leaves
//! reserved/extended (`reactions::release_due`). A delivery error freezes the watermark and ends the
//! loop; the supervisor restarts from the last confirmed LSN.

mod ack_metrics;
mod checkpoints;
mod deliberate;
mod delivery;
mod drain;
mod event;
mod head;
mod ledger;
mod message;
mod poison;
mod publish;
mod reactions;
mod reports;
mod send;
mod state;
pub(crate) mod stop;
mod trickle;
mod txn;

#[cfg(test)]
mod tests;

use relay_core::decode::Decoder;
use tokio::sync::{mpsc, watch};

use self::{
    reports::Reports,
    state::{Connection, Pipeline},
    txn::{abort_open_transaction, transaction_timeout},
};
use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
    observe::health::Shared,
    pipeline::stop::unless_stopped,
    postgres::carry::Carry,
    postgres::session::{close, open, replication_config, status_interval},
    postgres::setup::SlotInfo,
    sink::{Delivered, Sink, checkpoint_topic::prepare_topic},
    telemetry::events::{KAFKA_PRODUCER_FENCED_OTHERS, SHUTDOWN_COMPLETE, STREAMING_STARTED},
};

/// Streams until shutdown (`Ok`) or a failure (`Err`, nothing confirmed past the failure).
pub(crate) async fn stream(
    cfg: &Config,
    slot: &SlotInfo,
    sink: &impl Sink,
    reports: mpsc::UnboundedReceiver<Delivered>,
    shutdown: &mut watch::Receiver<bool>,
    carry: &mut Carry,
    health: &Shared,
) -> Result<(), RelayError> {
    let interval = status_interval(cfg, slot.wal_sender_timeout);
    let pg = &cfg.postgres;
    let rcfg = replication_config(cfg, interval)?;

    // The checkpoint topic is created or checked while the replication session opens: the
    // two need nothing of each other, and each costs a few round trips at a start.
    let topic_ready = carry.checkpoint_topic_ready;
    let prepared = async move { (!topic_ready).then_some(prepare_topic(cfg).await) };
    // A server that accepts the connection and never answers must not delay a stop.
    let opened = unless_stopped(shutdown, async {
        tokio::join!(open(cfg, rcfg, carry, slot.platform), prepared)
    })
    .await;
    let Some((opened, prepared)) = opened else {
        tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming (PostgreSQL did not answer)");
        return Ok(());
    };
    // A topic found usable stays so across restarts, even when this open failed: the next
    // attempt does not create or check it again.
    if matches!(prepared, Some(Ok(true))) {
        carry.checkpoint_topic_ready = true;
    }
    let opened = opened?;
    let (mut client, memory) = (opened.client, opened.memory);
    // The slot is ours: only now fence the producers of earlier holders (never the active
    // instance's while this one merely waits for the slot).
    if let Some(id) = &cfg.kafka.transactional_id {
        // This waits for Kafka's transaction coordinator; a stop must not wait for it.
        let fenced = unless_stopped(shutdown, sink.fence_and_begin(transaction_timeout(cfg))).await;
        let Some(fenced) = fenced else {
            client.abort();
            tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming (Kafka did not answer)");
            return Ok(());
        };
        fenced?;
        tracing::info!(transactional_id = %id, "{KAFKA_PRODUCER_FENCED_OTHERS}: earlier producers with this transactional id can no longer write");
    }
    // What Kafka already holds: read only now, after the fencing ended the previous holder's
    // transaction.
    let begun = checkpoints::start(
        cfg,
        slot.confirmed_flush,
        &opened.system_id,
        &opened.history,
        &slot.checkpoint_scope,
        carry,
        prepared,
    );
    let Some(begun) = unless_stopped(shutdown, begun).await else {
        client.abort();
        tracing::info!("{SHUTDOWN_COMPLETE}: stopped before streaming (reading the checkpoint)");
        return Ok(());
    };
    let begun = match begun {
        Ok(b) => b,
        Err(e) => {
            client.abort();
            return Err(e);
        }
    };
    health.set_streaming(true);
    metrics::gauge!(crate::telemetry::metrics::OUTBOX_TABLES).set(cfg.outbox.len() as f64);
    metrics::gauge!(crate::telemetry::metrics::MESSAGE_PREFIXES).set(cfg.message.len() as f64);
    tracing::info!(
        slot = %pg.slot, confirmed_flush = %begun.start,
        status_interval_ms = interval.as_millis() as u64, "{STREAMING_STARTED}"
    );
    let decoder = Decoder::new(&cfg.outbox, cfg.relay.relay_headers)
        .with_oids(slot.outbox_oids.clone())
        .with_compat(slot.outbox_not_null.clone(), &run_id())
        .with_generated(slot.outbox_generated.clone());
    let conn = Connection {
        client,
        start: begun,
        decoder,
        memory,
    };
    let mut reports = Reports::new(reports);
    let mut p = Pipeline::new(cfg, sink, &mut reports, carry, health, conn);
    p.confirm();
    // A state file that cannot be written is found now, not after a failover.
    let published = p.carry.published;
    let saved = match p.memory.as_mut() {
        Some(m) => m.save(published).await,
        None => Ok(()),
    };
    saved.map_err(|e| {
        Definite::Precondition(format!(
            "cannot write relay.state_file {}: {e}; fix its directory's permissions or space, \
             or remove the option",
            cfg.relay
                .state_file
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        ))
    })?;
    let result = p.run(shutdown).await;
    health.set_streaming(false);
    p.remember().await;
    match result {
        Ok(()) => {
            p.drain(interval).await?;
            close(&mut p.client).await;
            tracing::info!(confirmed = %p.progress.confirmed(), "{SHUTDOWN_COMPLETE}");
            Ok(())
        }
        Err(e) => {
            p.carry.ignore_checkpoint = matches!(
                e,
                RelayError::Transient(Transient::CheckpointContradicted(_))
            );
            p.progress.fail();
            p.client.abort();
            if p.transactional {
                abort_open_transaction(cfg, sink, &e).await;
            }
            Err(e)
        }
    }
}

/// This run's id, as Debezium 3.x's `__debezium.context.runId` header carries one per task
/// run: a UUID version 7 (time-ordered) string.
pub(crate) fn run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
