//! One logical message through the pipeline (`pg_logical_emit_message`): routed by its prefix
//! (`[[message]]`, `relay_core::route::MessageRoutes`) and published like an outbox row, in
//! its transaction's order, under the same confirmation rule, skip and poison policy.
//!
//! Invariant: a message with a configured prefix gets a record (its own or a dead-letter one)
//! or stops the relay; one with another prefix is counted (the heartbeat's is not published
//! and not counted as ignored) and never published.

use bytes::Bytes;
use relay_core::{
    Lsn,
    checkpoint::Fingerprint,
    deadletter,
    route::{MessagePoison, Position, RoutedMessage},
};

use super::{
    poison::dead_lettered,
    publish::Change,
    state::{Pipeline, now_unix_us},
};
use crate::{
    config::PoisonPolicy,
    error::{Definite, RelayError},
    postgres::session::Session,
    sink::Sink,
    telemetry::events::LOGICAL_MESSAGE_IGNORED,
    telemetry::metrics as m,
};

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// A logical message at `lsn` (`transactional`: a change of the open transaction).
    pub(super) async fn on_message(
        &mut self,
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    ) -> Result<(), RelayError> {
        let in_txn = transactional && self.txn.is_some();
        let pos = match self.txn {
            Some(p) if transactional => p,
            // Outside a transaction: the message's own LSN is its position.
            _ => Position {
                commit_lsn: lsn,
                commit_time_unix_us: now_unix_us(),
                seq: 0,
            },
        };
        match self
            .messages
            .route(transactional, lsn, &prefix, &content, pos)
        {
            RoutedMessage::Unrouted => {
                if in_txn {
                    // A change of its transaction all the same: it counts in the change index.
                    self.change(None, &Fingerprint::of_message(&prefix, &content))?;
                }
                if prefix != self.cfg.heartbeat.prefix {
                    metrics::counter!(m::LOGICAL_MESSAGES_IGNORED).increment(1);
                }
                tracing::trace!(prefix = %prefix, "{LOGICAL_MESSAGE_IGNORED}");
            }
            RoutedMessage::Record {
                record,
                routed,
                fingerprint,
            } => {
                let Some(index) = self.change(Some(&routed), &fingerprint)? else {
                    return Ok(());
                };
                let change = Change::new(&routed, pos, index, fingerprint);
                self.publish(record, change).await?;
            }
            RoutedMessage::Poison(p) if in_txn => {
                let Some(index) = self.change(Some(&p.routed), &p.fingerprint)? else {
                    return Ok(());
                };
                let dlq = self.dead_letter_or_halt(&p, pos)?;
                let change = Change::new(&p.routed, pos, index, p.fingerprint);
                self.publish_dead_letter(dlq, change).await?;
            }
            // Not transactional (or, impossibly, transactional outside a transaction): atomic
            // with nothing. Dead-lettered in a transaction of its own at its LSN, which the skip
            // and the checkpoint trail do not see: after a slot rewind it may be dead-lettered
            // again.
            RoutedMessage::Poison(p) => {
                let dlq = self.dead_letter_or_halt(&p, pos)?;
                self.progress.begin_alone(lsn, pos.commit_time_unix_us)?;
                self.send(dlq, pos, &p.routed).await?;
                self.progress.end_alone(lsn)?;
                self.confirm();
            }
        }
        Ok(())
    }

    /// The dead-letter record of a message that cannot be routed, or the stop that names its
    /// prefix and position (`relay.on_poison = "halt"`).
    fn dead_letter_or_halt(
        &self,
        p: &MessagePoison,
        pos: Position,
    ) -> Result<relay_core::route::Record, RelayError> {
        match self.cfg.relay.on_poison {
            PoisonPolicy::Halt => Err(RelayError::from(Definite::Poison {
                table: p.routed.to_string(),
                reason: p.error.to_string(),
            })),
            PoisonPolicy::DeadLetter => {
                dead_lettered(&p.error.to_string(), pos);
                Ok(deadletter::from_message_poison(
                    p,
                    pos,
                    &self.cfg.relay.dead_letter_topic,
                ))
            }
        }
    }
}
