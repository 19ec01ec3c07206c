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
use tokio::sync::mpsc;

use super::{
    poison::{dead_lettered, produce},
    publish::{publish, published, skipped_change},
    state::{State, confirm, now_unix_us},
};
use crate::{
    config::{Config, PoisonPolicy},
    error::{Definite, RelayError},
    events::LOGICAL_MESSAGE_IGNORED,
    metrics as m,
    sink::{Delivered, Sink},
    source::Session,
};

#[allow(clippy::too_many_arguments)]
pub(super) async fn on_message(
    cfg: &Config,
    sink: &impl Sink,
    client: &impl Session,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    transactional: bool,
    lsn: Lsn,
    prefix: String,
    content: Bytes,
) -> Result<(), RelayError> {
    let in_txn = transactional && st.txn.is_some();
    let pos = match st.txn {
        Some(p) if transactional => p,
        // Outside a transaction: the message's own LSN is its position.
        _ => Position {
            commit_lsn: lsn,
            commit_time_unix_us: now_unix_us(),
            seq: 0,
        },
    };
    match st
        .messages
        .route(transactional, lsn, &prefix, &content, pos)
    {
        RoutedMessage::Unrouted => {
            if in_txn {
                // A change of its transaction all the same: it counts in the change index.
                skipped_change(st, None, &Fingerprint::of_message(&prefix, &content))?;
            }
            if prefix != cfg.heartbeat.prefix {
                metrics::counter!(m::LOGICAL_MESSAGES_IGNORED).increment(1);
            }
            tracing::trace!(prefix = %prefix, "{LOGICAL_MESSAGE_IGNORED}");
        }
        RoutedMessage::Record {
            record,
            routed,
            fingerprint,
        } => {
            let index = st.change_index;
            if skipped_change(st, Some(&routed), &fingerprint)? {
                return Ok(());
            }
            publish(
                cfg,
                sink,
                client,
                st,
                reports,
                record,
                &routed,
                pos,
                index,
                fingerprint,
            )
            .await?;
        }
        RoutedMessage::Poison(p) if in_txn => {
            let index = st.change_index;
            if skipped_change(st, Some(&p.routed), &p.fingerprint)? {
                return Ok(());
            }
            let dlq = dead_letter_or_halt(st, &p, pos)?;
            produce(sink, st, dlq, pos, &p.routed).await?;
            published(cfg, sink, client, st, reports, pos, index, p.fingerprint).await?;
        }
        // Not transactional (or, impossibly, transactional outside a transaction): atomic with
        // nothing. Dead-lettered in a transaction of its own at its LSN, which the skip and the
        // checkpoint trail do not see: after a slot rewind it may be dead-lettered again.
        RoutedMessage::Poison(p) => {
            let dlq = dead_letter_or_halt(st, &p, pos)?;
            st.progress.begin_alone(lsn, pos.commit_time_unix_us)?;
            produce(sink, st, dlq, pos, &p.routed).await?;
            st.progress.end_alone(lsn)?;
            confirm(client, st);
        }
    }
    Ok(())
}

/// The dead-letter record of a message that cannot be routed, or the stop that names its prefix
/// and position (`relay.on_poison = "halt"`).
fn dead_letter_or_halt(
    st: &State<'_>,
    p: &MessagePoison,
    pos: Position,
) -> Result<relay_core::route::Record, RelayError> {
    match st.policy {
        PoisonPolicy::Halt => Err(RelayError::from(Definite::Poison {
            table: p.routed.to_string(),
            reason: p.error.to_string(),
        })),
        PoisonPolicy::DeadLetter => {
            dead_lettered(&p.error.to_string(), pos);
            Ok(deadletter::from_message_poison(
                p,
                pos,
                &st.dead_letter_topic,
            ))
        }
    }
}
