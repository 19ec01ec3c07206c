//! Both ends of the transactional outbox for Rust services on PostgreSQL and
//! outbox-relay (the relay that publishes the events to Kafka, `crates/outbox-relay`):
//!
//! * **Producer**: [`Outbox::enqueue`] writes an event in the caller's transaction, as a row of
//!   an outbox table (Debezium's `public.outbox(id, aggregatetype, aggregateid, type, payload)`
//!   by default, or a configured layout) or as a transactional logical message
//!   (`pg_logical_emit_message(true, prefix, content)`, the relay's `[[message]]` sections). The
//!   event is published if and only if the transaction commits. Event ids are UUIDv7, chosen by
//!   the producer, so a redelivered record carries the same id.
//! * **Consumer**: [`Inbox::process_once`] inserts `(consumer, event id)` into the inbox table
//!   with `ON CONFLICT DO NOTHING` in the caller's transaction and says whether to apply the
//!   effect. The inbox row and the effect commit together or not at all, so an event delivered
//!   twice (Kafka is at-least-once) is applied once.
//! * **Retention**: [`RetentionJob`] deletes old inbox rows in small batches, only with an
//!   [`Allowed`] from [`decide`], which refuses a retention shorter than the topic can replay a
//!   record (with the `kafka` feature, [`kafka::check_retention`] reads the topic's settings).
//!
//! The tables: `migrations/0001_outbox.sql` (producer) and `migrations/0003_inbox.sql`
//! (consumer). The pattern and its classic mistakes: `docs/inbox.md`.
//!
//! ```no_run
//! # async fn demo(pg: &mut tokio_postgres::Client) -> Result<(), outbox_inbox::Error> {
//! use outbox_inbox::{Event, Inbox, Outbox};
//! use serde_json::json;
//!
//! // Producer: the business change and its event in one transaction.
//! let outbox = Outbox::table();
//! let tx = pg.transaction().await.map_err(outbox_inbox::Error::pg("BEGIN"))?;
//! tx.execute("UPDATE account SET balance = balance + 5 WHERE id = 'a-1'", &[])
//!     .await
//!     .map_err(outbox_inbox::Error::pg("UPDATE account"))?;
//! let event = Event::new("account", "a-1", "BalanceChanged", json!({"delta": 5}));
//! let id = outbox.enqueue(&tx, &event).await?;
//! tx.commit().await.map_err(outbox_inbox::Error::pg("COMMIT"))?;
//!
//! // Consumer (in its own database): the inbox row and the effect in one transaction.
//! let inbox = Inbox::new();
//! let tx = pg.transaction().await.map_err(outbox_inbox::Error::pg("BEGIN"))?;
//! if inbox.process_once(&tx, "client-balances", &id.to_string()).await? {
//!     // apply the effect here, with `tx`
//! }
//! tx.commit().await.map_err(outbox_inbox::Error::pg("COMMIT"))?;
//! // ... and only then commit the Kafka offset.
//! # Ok(()) }
//! ```

mod error;
mod event;
mod identifier;
mod inbox;
mod outbox;
mod retention;

#[cfg(feature = "kafka")]
pub mod kafka;

pub use error::Error;
pub use event::Event;
pub use inbox::{Inbox, process_once};
pub use outbox::{Layout, Outbox};
pub use retention::{Allowed, Deleted, Refusal, RetentionJob, TopicRetention, decide};
