//! One replication event through the pipeline: a transaction's boundaries into the progress
//! rule and the skip; each row change decoded and, through the publish step it shares with
//! logical messages (`publish`), counted in its transaction's change index and either skipped
//! (Kafka holds it) or routed and handed to Kafka under the poison policy.

use relay_core::{
    Lsn, deadletter,
    decode::Decoded,
    route::{Position, debezium::OpInvalidBehavior},
};

use super::{poison::dead_lettered, publish::Change, state::Pipeline};
use crate::{
    config::PoisonPolicy,
    error::{Definite, RelayError},
    postgres::session::{Session, StreamEvent},
    sink::Sink,
    telemetry::events::{OUTBOX_DELETE_IGNORED, OUTBOX_TABLE_RENAMED, OUTBOX_UPDATE_IGNORED},
};

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// One replication event.
    pub(super) async fn on_event(&mut self, ev: StreamEvent) -> Result<(), RelayError> {
        match ev {
            StreamEvent::Begin {
                commit_lsn,
                commit_time_unix_us,
            } => {
                self.ledger
                    .begin(commit_lsn)
                    .map_err(|e| self.contradicted(e))?;
                self.progress.begin(commit_lsn, commit_time_unix_us)?;
                self.txn = Some(Position {
                    commit_lsn,
                    commit_time_unix_us,
                    seq: 0,
                });
            }
            StreamEvent::Data { data, wal_end } => {
                self.progress.saw(wal_end);
                // Relation messages may come outside a transaction; they need no position.
                let pos = self.txn.unwrap_or(Position {
                    commit_lsn: Lsn::ZERO,
                    commit_time_unix_us: 0,
                    seq: 0,
                });
                let decoded = self.decoder.decode(data, pos)?;
                self.on_decoded(decoded, pos).await?;
            }
            StreamEvent::Commit { lsn, end_lsn } => {
                self.ledger
                    .committed(end_lsn)
                    .map_err(|e| self.contradicted(e))?;
                self.progress.commit(lsn, end_lsn)?;
                self.txn = None;
                self.confirm();
            }
            StreamEvent::KeepAlive { wal_end } => {
                self.ledger.keepalive(wal_end);
                self.progress.keepalive(wal_end);
                self.confirm();
            }
            StreamEvent::Message {
                transactional,
                lsn,
                prefix,
                content,
            } => {
                // pgwire-replication decodes logical messages itself. A transactional one is a
                // change of its transaction: it counts in the change index.
                self.on_message(transactional, lsn, prefix, content).await?;
            }
            StreamEvent::StoppedAt => {}
        }
        Ok(())
    }

    /// A decoded pgoutput message at `pos` (the open transaction's position, if any).
    async fn on_decoded(&mut self, decoded: Decoded, pos: Position) -> Result<(), RelayError> {
        if let Decoded::LogicalMessage {
            transactional,
            lsn,
            prefix,
            content,
        } = decoded
        {
            return self.on_message(transactional, lsn, prefix, content).await;
        }
        // Each change that has a record or could have one is counted in its transaction's change
        // index and asked the skip about first: a change Kafka holds already goes no further.
        match decoded {
            Decoded::Record {
                record: rec,
                routed,
                fingerprint,
            } => {
                let Some(index) = self.change(Some(&routed), &fingerprint)? else {
                    return Ok(());
                };
                let change = Change::new(&routed, pos, index, fingerprint);
                self.publish(rec, change).await?;
            }
            // Handed to `on_message` above.
            Decoded::LogicalMessage { .. } => {}
            Decoded::Poison(p) => {
                let Some(index) = self.change(Some(&p.routed), &p.fingerprint)? else {
                    return Ok(());
                };
                match self.cfg.relay.on_poison {
                    PoisonPolicy::Halt => {
                        return Err(RelayError::from(Definite::Poison {
                            table: p.table,
                            reason: p.error.to_string(),
                        }));
                    }
                    PoisonPolicy::DeadLetter => {
                        dead_lettered(&p.error.to_string(), pos);
                        let dlq =
                            deadletter::from_poison(&p, pos, &self.cfg.relay.dead_letter_topic);
                        let change = Change::new(&p.routed, pos, index, p.fingerprint);
                        self.publish_dead_letter(dlq, change).await?;
                    }
                }
            }
            Decoded::OutboxRenamed { configured, now } => {
                tracing::warn!(
                    configured = %configured, now = %now,
                    "{OUTBOX_TABLE_RENAMED}: the outbox table was renamed while in the \
                     publication; its rows are still published with its [[outbox]] mapping \
                     (matched by OID). Point [[outbox]] table at the new name"
                );
            }
            Decoded::OutboxModified {
                routed,
                delete,
                behavior,
            } => modified(&routed, delete, behavior, pos)?,
            Decoded::OtherInsert(fingerprint) => {
                self.change(None, &fingerprint)?;
            }
            Decoded::Nothing => {}
        }
        Ok(())
    }
}

/// An UPDATE or DELETE of an outbox row: counted and logged, never published; an UPDATE stops
/// the relay under `table.op.invalid.behavior = "fatal"` (nothing from it on is confirmed).
fn modified(
    table: &str,
    delete: bool,
    behavior: OpInvalidBehavior,
    pos: Position,
) -> Result<(), RelayError> {
    // One of metrics::OUTBOX_CHANGE_OPS.
    let op = if delete { "delete" } else { "update" };
    metrics::counter!(crate::telemetry::metrics::OUTBOX_CHANGES_IGNORED, "op" => op).increment(1);
    let lsn = pos.commit_lsn;
    if delete {
        tracing::debug!(table, commit_lsn = %lsn, "{OUTBOX_DELETE_IGNORED}");
        return Ok(());
    }
    const WHY: &str = "an outbox row was updated; outbox events are INSERTs, the UPDATE is not \
                       published (table.op.invalid.behavior)";
    match behavior {
        OpInvalidBehavior::Warn => {
            tracing::warn!(table, commit_lsn = %lsn, "{OUTBOX_UPDATE_IGNORED}: {WHY}");
        }
        OpInvalidBehavior::Error => {
            tracing::error!(table, commit_lsn = %lsn, "{OUTBOX_UPDATE_IGNORED}: {WHY}");
        }
        OpInvalidBehavior::Fatal => {
            return Err(RelayError::from(Definite::OutboxUpdated {
                table: table.to_string(),
                commit_lsn: lsn,
            }));
        }
    }
    Ok(())
}
