//! The applier's rules (`outbox-relay apply`): which Kafka records of a partition go into the
//! next PostgreSQL transaction, what a failure means, where a partition starts, and what a
//! COMMIT with an unknown outcome left behind. The binary only runs the SQL these rules ask for.
//!
//! ```text
//! stored next offset + log start/end + `start` ──position::start──▶ where the partition reads
//! record offsets ──position::Cursor──▶ redeliveries below the cursor dropped
//! batch of records + each attempt's outcome ──batch::Plan──▶ commit these / fail this one / done
//! SQLSTATE (or none) ──failure::classify──▶ retry the transaction, or the record's policy
//! a transient failure ──contention──▶ at once and narrower (a conflict), or backoff (away);
//!                                   multi-record transactions taking turns after a conflict
//! the broker's errors and signs of life ──outage::Outage──▶ one log line per state
//! a handler's SQL with :named parameters ──sql::Statement::parse──▶ $n, wire types, casts
//! ```

pub mod batch;
pub mod contention;
pub mod failure;
pub mod outage;
pub mod position;
pub mod sql;
