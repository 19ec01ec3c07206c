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

use super::state::Pipeline;
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

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// One change of the open transaction for the skip (`pipeline::event` asks it for rows):
    /// `routed` names the `[[outbox]]` table or `message:<prefix>` it is routed by (`None`: a
    /// change without a record, which counts in the index only). `true`: Kafka holds it
    /// already (a routed change still takes its position in the transaction).
    pub(super) fn skipped_change(
        &mut self,
        routed: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> Result<bool, RelayError> {
        let index = self.change_index;
        let verdict = self
            .skip
            .change(index, routed, || fingerprint.render())
            .map_err(|e| self.contradicted(e))?;
        self.change_index += 1;
        if verdict == Verdict::Publish {
            return Ok(false);
        }
        self.skipped += 1;
        metrics::counter!(crate::telemetry::metrics::SKIPPED_CHANGES).increment(1);
        if routed.is_some() {
            self.handed_over();
        }
        Ok(true)
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
            None => self.produce(rec, pos, routed).await?,
            Some(Refusal::Suspect(_)) => self.produce_alone(rec, pos, routed).await?,
            Some(Refusal::Confirmed(reason)) => {
                let dlq = self.dead_letter_for(&rec, routed, &reason, pos);
                self.produce(dlq, pos, routed).await?;
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
        self.produce(dlq, change.pos, change.routed).await?;
        self.published(change).await
    }

    /// A change got its record: the trail names it in the next checkpoint, and a Kafka
    /// transaction that reached `kafka.max_transaction_records` is committed now (a source
    /// transaction split across Kafka transactions; the change index keeps the skip exact).
    pub(super) async fn published(&mut self, change: Change<'_>) -> Result<(), RelayError> {
        if self.checkpoints.is_some() {
            self.trail
                .published(change.pos.commit_lsn, change.index, change.fingerprint);
        }
        if self
            .progress
            .kafka_transaction_full(self.cfg.kafka.max_transaction_records)
        {
            self.commit().await?;
        }
        Ok(())
    }
}
