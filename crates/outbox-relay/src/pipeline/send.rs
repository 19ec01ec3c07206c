//! The ordinary send path: every record of a change (its own, or the dead-letter record in its
//! place) is handed to Kafka here, in source order, one at a time. Before a record goes out:
//! the partition the head rule counts it under ([`super::head`]), the primer that opens a Kafka
//! transaction ([`super::ledger`]) and the record's origin in the progress rule; after: its
//! bytes counted in flight and the next position taken.
//!
//! Invariants:
//! - A record is counted in the progress rule ([`Progress::record`]) before it is handed over,
//!   so its report always finds its transaction; the failover memory names its commit from then
//!   on.
//! - With transactions, a Kafka transaction that carries records opens with a copy of the
//!   previous checkpoint ([`Pipeline::prime`]), so that the checkpoint partition is already
//!   part of the transaction when the closing checkpoint is written: the commit then waits for
//!   one round trip less (no AddPartitionsToTxn on its critical path). The copy is safe because
//!   it never ends up last: the closing checkpoint follows it in the same transaction and
//!   partition, and it covers no more than what an earlier checkpoint already named. Nothing is
//!   primed before the first checkpoint of this connection (the skip may not be verified yet).
//! - A record Kafka refuses at once is never skipped: under the dead-letter policy its
//!   dead-letter record takes its place ([`super::poison`]); otherwise the refusal, naming the
//!   change, stops the pipeline.
//!
//! [`Progress::record`]: relay_core::progress::Progress::record

use relay_core::route::{Position, Record};

use super::state::Pipeline;
use crate::{
    error::RelayError,
    postgres::session::Session,
    sink::{NO_HEAD, Origin, Sink},
};

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// Hands one record of the open transaction to Kafka; `routed` names its source (the
    /// `[[outbox]]` table or `message:<prefix>`). Under the dead-letter policy a record Kafka
    /// refuses at once (larger than `message.max.bytes`, say) is replaced by its dead-letter
    /// record; under `halt` the refusal names the change.
    pub(super) async fn send(
        &mut self,
        mut rec: Record,
        pos: Position,
        routed: &str,
    ) -> Result<(), RelayError> {
        let origin = self.before_send(&mut rec, pos).await?;
        let sent = match self.sink.send(&rec, origin).await {
            Err(e) if self.dead_letters_at_once(&e, &rec) => {
                self.dead_letter_at_once(&rec, routed, pos, &e, origin)
                    .await?
            }
            other => {
                other.map_err(|e| e.refusing(super::poison::refused_at(routed, pos)))?;
                self.head_sent(&rec.topic, origin.head);
                rec
            }
        };
        self.progress.handed(sent.bytes());
        self.handed_over();
        Ok(())
    }

    /// What comes before a record of the open transaction is handed over: its partition
    /// (`rec`'s own, for the head rule), the primer, and its origin, counted in the progress
    /// rule and the failover memory.
    pub(super) async fn before_send(
        &mut self,
        rec: &mut Record,
        pos: Position,
    ) -> Result<Origin, RelayError> {
        let head = self.choose_partition(rec).await;
        self.prime().await?;
        let mut origin = self.next_record(pos)?;
        origin.head = head;
        Ok(origin)
    }

    /// Before the first record of a Kafka transaction: puts a copy of the previous checkpoint
    /// into it (module comment). Nothing before the first checkpoint of this connection.
    async fn prime(&mut self) -> Result<(), RelayError> {
        let Some((topic, key, value)) = self.ledger.unprimed() else {
            return Ok(());
        };
        self.sink.send_checkpoint(topic, key, value, true).await?;
        self.ledger.primed();
        Ok(())
    }

    /// Counts one more record of the open transaction in the tracker and the failover memory;
    /// what travels with it through the producer.
    fn next_record(&mut self, pos: Position) -> Result<Origin, RelayError> {
        let tx = self.progress.record()?;
        self.carry.published = pos.commit_lsn;
        Ok(Origin {
            tx,
            commit_lsn: pos.commit_lsn,
            seq: pos.seq,
            commit_time_unix_us: pos.commit_time_unix_us,
            head: NO_HEAD,
        })
    }

    /// A record of the open source transaction is in Kafka's hands (its bytes counted with
    /// [`Progress::handed`](relay_core::progress::Progress::handed)), or the skip passed it:
    /// the next one takes the next position.
    pub(super) fn handed_over(&mut self) {
        if let Some(p) = self.txn.as_mut() {
            p.seq += 1;
        }
    }
}
