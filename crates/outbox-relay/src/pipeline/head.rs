//! The head rule's wiring ([`relay_core::head`]): outside Kafka transactions a record is handed
//! over on the partition the relay chose for it, a partition's first record of this producer is
//! sent at once, and while it is unacknowledged the loop reads no further change (its
//! reactions, the back-pressure release among them, go on). In Kafka transactions a refused
//! record aborts the transaction, so nothing is gated.

use relay_core::route::Record;

use super::state::Pipeline;
use crate::{
    postgres::session::Session,
    sink::{Delivered, NO_HEAD, Sink},
};

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// Sets the partition `rec` lands on (its own, else its key's) and returns what the
    /// record's [`Origin::head`] must say.
    ///
    /// [`Origin::head`]: crate::sink::Origin::head
    pub(super) async fn choose_partition(&mut self, rec: &mut Record) -> i32 {
        if self.heads.is_none() {
            return NO_HEAD;
        }
        let chosen = self.sink.partition_of(rec).await;
        if chosen.is_some() {
            rec.partition = chosen;
        }
        chosen.unwrap_or(-1)
    }

    /// A record counted under `head` was handed over; a partition's head record is kicked out
    /// at once, since nothing more is read until its report.
    pub(super) fn head_sent(&mut self, topic: &str, head: i32) {
        let now = self.head_clock_ms();
        if head != NO_HEAD
            && let Some(h) = self.heads.as_mut()
            && h.sent(topic, head, now)
        {
            self.sink.kick();
        }
    }

    /// Its report came back.
    pub(super) fn head_reported(&mut self, d: &Delivered) {
        let now = self.head_clock_ms();
        if d.origin.head != NO_HEAD
            && let Some(h) = self.heads.as_mut()
        {
            h.reported(&d.topic, d.origin.head, d.outcome.is_ok(), now);
        }
    }

    /// A head record is in flight: read no further change until its report.
    pub(super) fn heads_waiting(&self) -> bool {
        self.heads.as_ref().is_some_and(|h| h.waiting())
    }
}
