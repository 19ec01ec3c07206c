//! The poison policy where records are handed to Kafka: a record Kafka refuses at once is
//! replaced by its dead-letter record (on the ordinary send path, [`super::send`]); a suspect
//! (refused in a batch) is sent alone, and dead-lettered in its place only if refused again.
//! Nothing is skipped without a record.

use relay_core::{
    deadletter,
    route::{Position, Record},
};

use super::{delivery::producer_gone, publish::Change, state::Pipeline};
use crate::{
    config::PoisonPolicy,
    error::{Definite, RefusedChange, RelayError, Transient},
    postgres::session::Session,
    sink::{NO_HEAD, Origin, Sink},
    telemetry::events::EVENT_DEAD_LETTERED,
    telemetry::metrics as m,
};

/// Largest value kept in a dead-letter record (Kafka's default limit is about 1 MB).
pub(super) const MAX_DEAD_LETTER_VALUE: usize = 900_000;

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// A record Kafka refused at once (`e`) is dead-lettered in its place: under the
    /// dead-letter policy, unless it is a dead-letter record itself.
    pub(super) fn dead_letters_at_once(&self, e: &RelayError, rec: &Record) -> bool {
        let relay = &self.cfg.relay;
        matches!(e, RelayError::Definite(Definite::DeliveryRefused { .. }))
            && relay.on_poison == PoisonPolicy::DeadLetter
            && rec.topic != relay.dead_letter_topic
    }

    /// Sends the dead-letter record of `rec` (at `pos`), which Kafka refused at once (`e`),
    /// in its place (same origin, not counted by the head rule); the record sent.
    pub(super) async fn dead_letter_at_once(
        &mut self,
        rec: &Record,
        routed: &str,
        pos: Position,
        e: &RelayError,
        mut origin: Origin,
    ) -> Result<Record, RelayError> {
        let dlq = self.dead_letter_for(rec, routed, &e.to_string(), pos);
        origin.head = NO_HEAD;
        self.sink
            .send(&dlq, origin)
            .await
            .map_err(|e| e.refusing(refused_at(routed, pos)))?;
        Ok(dlq)
    }

    /// Sends a record Kafka refused in a batch on its own: waits until nothing else is in
    /// flight, sends it, and waits for its report. Accepted: it was innocent. Refused again: it
    /// goes to the dead-letter topic in its place (same position, same transaction).
    ///
    /// A stop may cut the wait for the report short (`stop::unless_stopped`), and the drain
    /// then commits the open Kafka transaction, this record in it: so the ledger names the
    /// change as soon as the record is handed over, before that wait. Named only after it, the
    /// closing checkpoint left it out and the next start sent it again, visible twice
    /// (exactly-once; the simulation's seed 5480).
    pub(super) async fn send_alone(
        &mut self,
        mut rec: Record,
        change: &Change<'_>,
    ) -> Result<(), RelayError> {
        let (pos, routed) = (change.pos, change.routed);
        while self.progress.outstanding_records() > 0 {
            self.on_next_report().await?;
        }
        let origin = self.before_send(&mut rec, pos).await?;
        self.sink
            .send(&rec, origin)
            .await
            .map_err(|e| e.refusing(refused_at(routed, pos)))?;
        self.head_sent(&rec.topic, origin.head);
        self.progress.handed(rec.bytes());
        self.ledger
            .published(pos.commit_lsn, change.index, change.fingerprint.clone());
        let d = self
            .reports
            .next(self.sink)
            .await
            .ok_or_else(producer_gone)?;
        debug_assert_eq!(
            (d.origin.commit_lsn, d.origin.seq),
            (pos.commit_lsn, pos.seq)
        );
        match &d.outcome {
            Ok(()) => {
                self.carry.refusals.clear(pos.commit_lsn, pos.seq);
                self.on_delivery(d)?;
            }
            Err(e) if e.is_refused() => {
                self.head_reported(&d);
                // Refused again: it is poison. The gapless guarantee made the producer's error
                // fatal, so the dead-letter record goes out after a restart, with a new producer,
                // in the refused record's place.
                let reason = e.to_string();
                self.carry
                    .refusals
                    .confirm(pos.commit_lsn, pos.seq, reason.clone());
                self.progress.fail();
                return Err(RelayError::from(Transient::DeadLetterPending {
                    commit_lsn: pos.commit_lsn,
                    seq: pos.seq,
                    reason,
                }));
            }
            Err(_) => self.on_delivery(d)?,
        }
        self.handed_over();
        Ok(())
    }

    /// The dead-letter record that replaces a record of `routed` Kafka refused, counted and
    /// logged.
    pub(super) fn dead_letter_for(
        &self,
        rec: &Record,
        routed: &str,
        reason: &str,
        pos: Position,
    ) -> Record {
        dead_lettered(reason, pos);
        deadletter::from_refused(
            rec,
            routed,
            reason,
            pos,
            &self.cfg.relay.dead_letter_topic,
            MAX_DEAD_LETTER_VALUE,
        )
    }
}

/// The change a record refused when it was handed to Kafka came from: `routed` (the
/// `[[outbox]]` table or `message:<prefix>`) at `pos`.
pub(super) fn refused_at(routed: &str, pos: Position) -> RefusedChange {
    RefusedChange {
        routed: Some(routed.to_string()),
        commit_lsn: pos.commit_lsn,
        seq: pos.seq,
        in_batch: false,
    }
}

pub(super) fn dead_lettered(reason: &str, pos: Position) {
    metrics::counter!(m::DEAD_LETTERED).increment(1);
    tracing::warn!(
        commit_lsn = %pos.commit_lsn, seq = pos.seq, reason,
        "{EVENT_DEAD_LETTERED}: published to the dead-letter topic instead of its own"
    );
}
