//! One replication event through the pipeline: a transaction's boundaries into the progress
//! rule and the skip; each row change decoded and, through the publish step it shares with
//! logical messages (`publish`), counted in its transaction's change index and either skipped
//! (Kafka holds it) or routed and handed to Kafka under the poison policy.

use relay_core::{
    Lsn, deadletter,
    decode::Decoded,
    route::{Position, debezium::OpInvalidBehavior},
};
use tokio::sync::mpsc;

use super::{
    message::on_message,
    poison::{dead_lettered, produce},
    publish::{publish, published, skipped_change},
    state::{State, confirm, contradicted},
};
use crate::{
    config::{Config, PoisonPolicy},
    error::{Definite, RelayError},
    events::{OUTBOX_DELETE_IGNORED, OUTBOX_TABLE_RENAMED, OUTBOX_UPDATE_IGNORED},
    sink::{Delivered, Sink},
    source::{Session, StreamEvent},
};

pub(super) async fn on_event(
    cfg: &Config,
    sink: &impl Sink,
    client: &impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    ev: StreamEvent,
) -> Result<(), RelayError> {
    match ev {
        StreamEvent::Begin {
            commit_lsn,
            commit_time_unix_us,
        } => {
            st.skip.begin(commit_lsn).map_err(|e| contradicted(st, e))?;
            st.progress.begin(commit_lsn, commit_time_unix_us)?;
            st.change_index = 0;
            st.txn = Some(Position {
                commit_lsn,
                commit_time_unix_us,
                seq: 0,
            });
        }
        StreamEvent::Data { data, wal_end } => {
            st.progress.saw(wal_end);
            // Relation messages may come outside a transaction; they need no position.
            let pos = st.txn.unwrap_or(Position {
                commit_lsn: Lsn::ZERO,
                commit_time_unix_us: 0,
                seq: 0,
            });
            let decoded = st.decoder.decode(data, pos)?;
            if let Decoded::LogicalMessage {
                transactional,
                lsn,
                prefix,
                content,
            } = decoded
            {
                return on_message(
                    cfg,
                    sink,
                    client,
                    st,
                    reports,
                    transactional,
                    lsn,
                    prefix,
                    content,
                )
                .await;
            }
            if skipped(st, &decoded)? {
                return Ok(());
            }
            let index = st.change_index.wrapping_sub(1);
            match decoded {
                Decoded::Record {
                    record: rec,
                    routed,
                    fingerprint,
                } => {
                    publish(
                        cfg,
                        sink,
                        client,
                        st,
                        reports,
                        rec,
                        &routed,
                        pos,
                        index,
                        fingerprint,
                    )
                    .await?;
                }
                // Handed to `on_message` above.
                Decoded::LogicalMessage { .. } => {}
                Decoded::Poison(p) => match st.policy {
                    PoisonPolicy::Halt => {
                        return Err(RelayError::from(Definite::Poison {
                            table: p.table,
                            reason: p.error.to_string(),
                        }));
                    }
                    PoisonPolicy::DeadLetter => {
                        dead_lettered(&p.error.to_string(), pos);
                        let dlq = deadletter::from_poison(&p, pos, &st.dead_letter_topic);
                        produce(sink, st, dlq, pos, &p.routed).await?;
                        published(cfg, sink, client, st, reports, pos, index, p.fingerprint)
                            .await?;
                    }
                },
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
                Decoded::OtherInsert(_) | Decoded::Nothing => {}
            }
        }
        StreamEvent::Commit { lsn, end_lsn } => {
            st.skip.commit().map_err(|e| contradicted(st, e))?;
            st.progress.commit(lsn, end_lsn)?;
            if st.checkpoints.is_some() {
                st.trail.committed(end_lsn);
            }
            st.txn = None;
            confirm(client, st);
        }
        StreamEvent::KeepAlive { wal_end } => {
            st.skip.keepalive(wal_end);
            st.progress.keepalive(wal_end);
            confirm(client, st);
        }
        StreamEvent::Message {
            transactional,
            lsn,
            prefix,
            content,
        } => {
            // pgwire-replication decodes logical messages itself. A transactional one is a
            // change of its transaction: it counts in the change index.
            on_message(
                cfg,
                sink,
                client,
                st,
                reports,
                transactional,
                lsn,
                prefix,
                content,
            )
            .await?;
        }
        StreamEvent::StoppedAt => {}
    }
    Ok(())
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
    metrics::counter!(crate::metrics::OUTBOX_CHANGES_IGNORED, "op" => op).increment(1);
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

/// Counts a change in the open transaction's change index and asks the skip about it. `true`:
/// Kafka holds it already (a routed change still takes its position in the transaction).
fn skipped(st: &mut State<'_>, decoded: &Decoded) -> Result<bool, RelayError> {
    match decoded {
        Decoded::Record {
            routed,
            fingerprint,
            ..
        } => skipped_change(st, Some(routed), fingerprint),
        Decoded::Poison(p) => skipped_change(st, Some(&p.routed), &p.fingerprint),
        Decoded::OtherInsert(fp) => skipped_change(st, None, fp),
        _ => Ok(false),
    }
}
