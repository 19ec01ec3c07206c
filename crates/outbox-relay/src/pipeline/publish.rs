//! The publish step that rows and logical messages share: each change of a transaction is
//! counted in its change index and either skipped (Kafka holds it after a start) or handed to
//! Kafka (alone if refused in a batch before, dead-lettered if refused alone), then named in
//! the checkpoint trail (the index, the skip and the trail are the ledger's,
//! [`super::ledger`]); a Kafka transaction that reached `kafka.max_transaction_records` is
//! committed.

use relay_core::{
    checkpoint::Fingerprint,
    deadletter::Refusal,
    route::{Position, Record},
};

use super::{deliberate, state::Pipeline};
use crate::{error::RelayError, postgres::session::Session, sink::Sink};

/// A change that has a record, and where it stands in its transaction.
pub(super) struct Change<'r> {
    /// Routed by this `[[outbox]]` table or `message:<prefix>`.
    pub(super) routed: &'r str,
    pub(super) pos: Position,
    /// Its index among its transaction's changes.
    pub(super) index: u64,
    pub(super) fingerprint: Fingerprint,
}

impl<'r> Change<'r> {
    /// The change at `index` of the transaction at `pos`, routed by `routed`.
    pub(super) fn new(
        routed: &'r str,
        pos: Position,
        index: u64,
        fingerprint: Fingerprint,
    ) -> Self {
        Self {
            routed,
            pos,
            index,
            fingerprint,
        }
    }
}

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// One change of the open transaction, counted in its change index and asked the skip
    /// about ([`super::ledger`]): `routed` names the `[[outbox]]` table or `message:<prefix>`
    /// it is routed by (`None`: a change without a record, which counts in the index only).
    /// `Some(index)`: publish it at that index; `None`: Kafka holds it already (a routed change
    /// still takes its position in the transaction).
    pub(super) fn change(
        &mut self,
        routed: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> Result<Option<u64>, RelayError> {
        let index = self
            .ledger
            .change(routed, fingerprint)
            .map_err(|e| self.contradicted(e))?;
        if index.is_none() {
            metrics::counter!(crate::telemetry::metrics::SKIPPED_CHANGES).increment(1);
            if routed.is_some() {
                self.handed_over();
            }
        }
        Ok(index)
    }

    /// Hands the record of `change` to Kafka (alone if Kafka refused it in a batch before, its
    /// dead-letter record if refused alone), then [`published`](Self::published).
    pub(super) async fn publish(
        &mut self,
        rec: Record,
        change: Change<'_>,
    ) -> Result<(), RelayError> {
        let (pos, routed) = (change.pos, change.routed);
        match self.carry.refusals.get(pos.commit_lsn, pos.seq).cloned() {
            None => self.send(rec, pos, routed).await?,
            Some(Refusal::Suspect(reason))
                if deliberate::on(deliberate::Bug::SuspectDeadLettered) =>
            {
                let dlq = self.dead_letter_for(&rec, routed, &reason, pos);
                self.send(dlq, pos, routed).await?;
            }
            Some(Refusal::Suspect(_)) => self.send_alone(rec, &change).await?,
            Some(Refusal::Confirmed(reason)) => {
                let dlq = self.dead_letter_for(&rec, routed, &reason, pos);
                self.send(dlq, pos, routed).await?;
            }
        }
        self.published(change).await
    }

    /// Hands the dead-letter record of a change that cannot be routed (poison) to Kafka in
    /// its place, then [`published`](Self::published).
    pub(super) async fn publish_dead_letter(
        &mut self,
        dlq: Record,
        change: Change<'_>,
    ) -> Result<(), RelayError> {
        self.send(dlq, change.pos, change.routed).await?;
        self.published(change).await
    }

    /// A change got its record: the trail names it in the next checkpoint, and a Kafka
    /// transaction that reached `kafka.max_transaction_records` is committed now (a source
    /// transaction split across Kafka transactions; the change index keeps the skip exact).
    pub(super) async fn published(&mut self, change: Change<'_>) -> Result<(), RelayError> {
        self.ledger
            .published(change.pos.commit_lsn, change.index, change.fingerprint);
        if self
            .progress
            .kafka_transaction_full(self.cfg.kafka.max_transaction_records)
        {
            self.commit().await?;
        }
        Ok(())
    }
}
