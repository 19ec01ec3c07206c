//! The pipeline's state for one connection: the ack tracker, what was received and
//! confirmed, the bytes in flight and the Kafka-transaction confirmation cap.
//!
//! Invariant: [`confirm`] hands PostgreSQL only the tracker's watermark, capped (with Kafka
//! transactions) at the watermark when the open Kafka transaction got its first record: what
//! an aborted transaction held must not be confirmed.

use std::time::{SystemTime, UNIX_EPOCH};

use pgwire_replication::ReplicationClient;
use relay_core::{
    Lsn,
    deadletter::Refusals,
    decode::Decoder,
    route::{Position, Record},
    watermark::AckTracker,
};

use crate::{
    config::PoisonPolicy, error::RelayError, failover::Memory, metrics as m, sink::Origin,
};

pub(super) struct State<'a> {
    pub(super) tracker: AckTracker,
    pub(super) decoder: Decoder,
    pub(super) confirmed: Lsn,
    pub(super) received: Lsn,
    pub(super) in_flight_bytes: u64,
    pub(super) txn: Option<Position>,
    pub(super) policy: PoisonPolicy,
    pub(super) dead_letter_topic: String,
    /// Events Kafka refused for good, kept by the supervisor across restarts.
    pub(super) refusals: &'a mut Refusals,
    /// [`Carry::published`].
    pub(super) published: &'a mut Lsn,
    /// Where [`Carry`]'s failover memory is kept across restarts (`relay.state_file`).
    pub(super) memory: Option<Memory>,
    /// `kafka.transactional_id` is set: records go out in Kafka transactions.
    pub(super) transactional: bool,
    /// With transactions, while the open Kafka transaction holds records: the watermark when
    /// it got its first one. Every transaction below it had its records in committed Kafka
    /// transactions; nothing beyond it may be confirmed before the next commit, because an
    /// aborted transaction's records are invisible to read-committed consumers.
    pub(super) confirm_cap: Option<Lsn>,
    /// Records Kafka acknowledged so far (progress while the loop waits for Kafka).
    pub(super) acked: u64,
}

/// Counts one more record of the open transaction in the tracker and the failover memory;
/// what travels with it through the producer.
pub(super) fn next_record(st: &mut State<'_>, pos: Position) -> Result<Origin, RelayError> {
    let tx = st.tracker.add_record()?;
    *st.published = pos.commit_lsn;
    Ok(Origin {
        tx,
        commit_lsn: pos.commit_lsn,
        seq: pos.seq,
        commit_time_unix_us: pos.commit_time_unix_us,
    })
}

/// A record of the open source transaction is in Kafka's hands.
pub(super) fn handed_over(st: &mut State<'_>) {
    if st.transactional && st.confirm_cap.is_none() {
        st.confirm_cap = Some(st.tracker.watermark());
    }
    if let Some(p) = st.txn.as_mut() {
        p.seq += 1;
    }
}

/// Hands the watermark to the replication client, which sends it with its next status update.
pub(super) fn confirm(client: &ReplicationClient, st: &mut State<'_>) {
    let w = match st.confirm_cap {
        Some(limit) => st.tracker.watermark().min(limit),
        None => st.tracker.watermark(),
    };
    if w > st.confirmed {
        client.update_applied_lsn(pgwire_replication::Lsn::from_u64(w.0));
        st.confirmed = w;
        st.refusals.forget_below(w);
        metrics::gauge!(m::CONFIRMED_LSN).set(w.0 as f64);
    }
}

pub(super) fn report_gauges(st: &State<'_>) {
    metrics::gauge!(m::INFLIGHT_EVENTS).set(st.tracker.outstanding_records() as f64);
    metrics::gauge!(m::INFLIGHT_TRANSACTIONS).set(st.tracker.pending_txns() as f64);
    metrics::gauge!(m::RECEIVED_LSN).set(st.received.0 as f64);
    let lag = st
        .tracker
        .oldest_pending_commit_time()
        .map_or(0.0, |t| (now_unix_us() - t).max(0) as f64 / 1e6);
    metrics::gauge!(m::TIME_LAG_SECONDS).set(lag);
}

pub(super) fn record_bytes(rec: &Record) -> u64 {
    (rec.key.len() + rec.value.as_ref().map_or(0, |v| v.len())) as u64
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
