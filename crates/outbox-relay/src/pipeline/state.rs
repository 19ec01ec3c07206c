//! The pipeline's state for one connection: the progress rule (`relay_core::progress`, which
//! decides what may be read and confirmed), the decoder, the open transaction's position and
//! what the supervisor keeps across restarts.
//!
//! Invariant: [`confirm`] hands PostgreSQL only [`Progress::take_confirmation`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use relay_core::{
    Lsn,
    checkpoint::Trail,
    deadletter::Refusals,
    decode::Decoder,
    progress::Progress,
    route::{MessageRoutes, Position},
    skip::Skip,
};

use super::ack_metrics::AckMetrics;
use crate::{
    checkpoint::Identity,
    config::{Config, PoisonPolicy},
    error::RelayError,
    events::CHECKPOINT_SKIP_DONE,
    failover::Memory,
    health::Shared,
    metrics as m,
    sink::{Origin, RunningCommit},
    source::Session,
};

pub(super) struct State<'a> {
    /// What may be read and confirmed ([`relay_core::progress`]).
    pub(super) progress: Progress,
    pub(super) decoder: Decoder,
    /// The `[[message]]` sections, by prefix.
    pub(super) messages: MessageRoutes,
    pub(super) txn: Option<Position>,
    pub(super) policy: PoisonPolicy,
    pub(super) dead_letter_topic: String,
    /// The `[[outbox]]` table or `message:<prefix>` of every record, when there is one only
    /// ([`only_source`]).
    pub(super) only_source: Option<String>,
    /// Events Kafka refused for good, kept by the supervisor across restarts.
    pub(super) refusals: &'a mut Refusals,
    /// [`crate::carry::Carry::published`].
    pub(super) published: &'a mut Lsn,
    /// Where [`crate::carry::Carry`]'s failover memory is kept across restarts (`relay.state_file`).
    pub(super) memory: Option<Memory>,
    /// `kafka.transactional_id` is set: records go out in Kafka transactions.
    pub(super) transactional: bool,
    /// `relay.delivery = "exactly-once"`: a contradicted checkpoint stops the relay.
    pub(super) exactly_once: bool,
    /// What Kafka already holds after the start ([`relay_core::skip`]).
    pub(super) skip: Skip,
    pub(super) skipped: u64,
    /// The change index of the next change of the open transaction.
    pub(super) change_index: u64,
    /// Checkpoints are written (the topic is usable): under this identity, naming the
    /// trail's last change.
    pub(super) checkpoints: Option<Identity>,
    pub(super) trail: Trail,
    /// With transactions: the last checkpoint put into a Kafka transaction, repeated as the
    /// first record of the next one that carries records ([`super::checkpoints::prime`]).
    pub(super) primer: Option<Primer>,
    /// Handles of the acknowledgement metrics.
    pub(super) acks: AckMetrics,
    /// A Kafka commit sent and not answered yet (two producers: the next transaction fills
    /// meanwhile).
    pub(super) committing: Option<Committing>,
    /// What the run's other tasks see of this pipeline (streaming, progress markers) and tell
    /// it (the slot's WAL at risk): one per relay run, outliving the pipeline.
    pub(super) health: &'a Shared,
}

/// A commit sent and not yet answered ([`crate::sink::KafkaSink::commit_start`]).
pub(super) struct Committing {
    pub(super) commit: RunningCommit,
    pub(super) covered: Option<Lsn>,
    pub(super) started: Instant,
    pub(super) handed: Duration,
    pub(super) flushed: Duration,
}

/// The last checkpoint put into a Kafka transaction ([`super::checkpoints::write`]), to open the next one with.
pub(super) struct Primer {
    pub(super) topic: String,
    pub(super) key: String,
    pub(super) value: Vec<u8>,
    /// Already sent in the open transaction.
    pub(super) primed: bool,
}

/// Counts one more record of the open transaction in the tracker and the failover memory;
/// what travels with it through the producer.
pub(super) fn next_record(st: &mut State<'_>, pos: Position) -> Result<Origin, RelayError> {
    let tx = st.progress.record()?;
    *st.published = pos.commit_lsn;
    Ok(Origin {
        tx,
        commit_lsn: pos.commit_lsn,
        seq: pos.seq,
        commit_time_unix_us: pos.commit_time_unix_us,
    })
}

/// A record of the open source transaction is in Kafka's hands (its bytes counted with
/// [`Progress::handed`]): the next one takes the next position.
pub(super) fn handed_over(st: &mut State<'_>) {
    if let Some(p) = st.txn.as_mut() {
        p.seq += 1;
    }
}

/// The stream contradicts the checkpoint: a definite stop in exactly-once mode; in
/// at-least-once mode a restart that skips nothing.
pub(super) fn contradicted(st: &State<'_>, e: relay_core::skip::HistoryChanged) -> RelayError {
    if st.exactly_once {
        crate::error::Definite::HistoryChanged(e).into()
    } else {
        crate::error::Transient::CheckpointContradicted(e).into()
    }
}

/// Hands the watermark to the replication client, which sends it with its next status update.
pub(super) fn confirm(client: &impl Session, st: &mut State<'_>) {
    if let Some(covered) = st.progress.release_skip(st.skip.status()) {
        tracing::info!(
            skipped = st.skipped, covered = %covered,
            "{CHECKPOINT_SKIP_DONE}: every later change is published"
        );
    }
    if let Some(w) = st.progress.take_confirmation() {
        client.update_applied_lsn(w);
        st.refusals.forget_below(w);
        metrics::gauge!(m::CONFIRMED_LSN).set(w.0 as f64);
    }
}

pub(super) fn report_gauges(st: &State<'_>) {
    metrics::gauge!(m::INFLIGHT_EVENTS).set(st.progress.outstanding_records() as f64);
    metrics::gauge!(m::INFLIGHT_TRANSACTIONS).set(st.progress.pending_txns() as f64);
    metrics::gauge!(m::RECEIVED_LSN).set(st.progress.received().0 as f64);
    let acked = st.progress.acked();
    st.health
        .pipeline_progress(acked + st.progress.outstanding_records(), acked);
    let lag = st
        .progress
        .oldest_pending_commit_time()
        .map_or(0.0, |t| (now_unix_us() - t).max(0) as f64 / 1e6);
    metrics::gauge!(m::TIME_LAG_SECONDS).set(lag);
}

/// The one `[[outbox]]` table (`schema.table`) or `message:<prefix>` the relay publishes, if
/// it publishes one only: then a delivery report, which carries a change's position and not its
/// source, names the source all the same.
pub(super) fn only_source(cfg: &Config) -> Option<String> {
    match (cfg.outbox.as_slice(), cfg.message.as_slice()) {
        ([table], []) => {
            let (schema, table) = table.qualified_name();
            Some(format!("{schema}.{table}"))
        }
        ([], [message]) => Some(message.routed_name()),
        _ => None,
    }
}

pub(super) fn now_unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Writes the failover memory if `relay.state_file` is set; failures are logged.
pub(super) fn remember(st: &mut State<'_>) {
    let published = *st.published;
    if let Some(m) = st.memory.as_mut() {
        m.save_or_warn(published);
    }
}
