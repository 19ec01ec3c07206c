//! The publish step that rows and logical messages share: each change of a transaction is
//! counted in its change index and either skipped (Kafka holds it after a start) or handed to
//! Kafka (alone if refused in a batch before, dead-lettered if refused alone), then named in
//! the checkpoint trail; a Kafka transaction that reached `kafka.max_transaction_records` is
//! committed.

use relay_core::{
    checkpoint::Fingerprint,
    deadletter::Refusal,
    route::{Position, Record},
    skip::Verdict,
};
use tokio::sync::mpsc;

use super::{
    poison::{dead_letter_for, produce, produce_alone},
    state::{State, contradicted, handed_over},
    txn::commit,
};
use crate::{
    config::Config,
    error::RelayError,
    sink::{Delivered, Sink},
    source::Session,
};

/// One change of the open transaction for the skip (`pipeline::event` asks it for rows): `routed` names the `[[outbox]]` table or `message:<prefix>` it
/// is routed by (`None`: a change without a record, which counts in the index only).
pub(super) fn skipped_change(
    st: &mut State<'_>,
    routed: Option<&str>,
    fingerprint: &Fingerprint,
) -> Result<bool, RelayError> {
    let index = st.change_index;
    let verdict = st
        .skip
        .change(index, routed, || fingerprint.render())
        .map_err(|e| contradicted(st, e))?;
    st.change_index += 1;
    if verdict == Verdict::Publish {
        return Ok(false);
    }
    st.skipped += 1;
    metrics::counter!(crate::metrics::SKIPPED_CHANGES).increment(1);
    if routed.is_some() {
        handed_over(st);
    }
    Ok(true)
}

/// Hands the record of a change routed by `routed` (an `[[outbox]]` table or
/// `message:<prefix>`) to Kafka (alone if Kafka refused it in a batch before, its dead-letter
/// record if refused alone), then [`published`].
#[allow(clippy::too_many_arguments)]
pub(super) async fn publish(
    cfg: &Config,
    sink: &impl Sink,
    client: &impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    rec: Record,
    routed: &str,
    pos: Position,
    index: u64,
    fingerprint: Fingerprint,
) -> Result<(), RelayError> {
    match st.refusals.get(pos.commit_lsn, pos.seq).cloned() {
        None => produce(sink, st, rec, pos, routed).await?,
        Some(Refusal::Suspect(_)) => produce_alone(sink, st, reports, rec, pos, routed).await?,
        Some(Refusal::Confirmed(reason)) => {
            let dlq = dead_letter_for(st, &rec, routed, &reason, pos);
            produce(sink, st, dlq, pos, routed).await?;
        }
    }
    published(cfg, sink, client, st, reports, pos, index, fingerprint).await
}

/// A change got its record: the trail names it in the next checkpoint, and a Kafka transaction
/// that reached `kafka.max_transaction_records` is committed now (a source transaction split
/// across Kafka transactions; the change index keeps the skip exact).
#[allow(clippy::too_many_arguments)]
pub(super) async fn published(
    cfg: &Config,
    sink: &impl Sink,
    client: &impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    pos: Position,
    index: u64,
    fingerprint: Fingerprint,
) -> Result<(), RelayError> {
    if st.checkpoints.is_some() {
        st.trail.published(pos.commit_lsn, index, fingerprint);
    }
    if st
        .progress
        .kafka_transaction_full(cfg.kafka.max_transaction_records)
    {
        commit(cfg, sink, client, st, reports).await?;
    }
    Ok(())
}
