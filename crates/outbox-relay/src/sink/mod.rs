//! The Kafka side: an idempotent producer fed strictly in source order, whose delivery reports
//! come back as values on a channel.
//!
//! Ordering rules (correctness notes K1-K6): `enable.idempotence=true` (acks=all, one request
//! in flight per connection, infinite retries, FIFO) keeps per-partition order across retries
//! and leaves no gap at a partition's head (see [`KafkaSink::new`]);
//! records are enqueued one at a time in source order, and a full local queue is waited out by
//! retrying *the same* record before anything later; `murmur2_random` makes key → partition
//! agree with Java clients. A delivery error is never skipped: the pipeline stops confirming
//! and restarts from the last confirmed LSN.
//!
//! The files: what travels with a record ([`origin`]), the producers' callbacks ([`context`]),
//! the producer ([`producer`]) and its local queue ([`queue`]), the client settings every Kafka
//! client shares ([`client`]) and those of a consumer reading committed records back
//! ([`read_back`]), the mapping of the client's errors to the seam's
//! ([`client_error`]); the seam itself is [`seam::Sink`].

pub(crate) mod budget;
pub(crate) mod checkpoint_topic;
pub(crate) mod client;
mod client_error;
mod context;
mod kick;
mod kicker;
mod origin;
mod outcome;
mod poller;
mod producer;
mod queue;
pub(crate) mod read_back;
mod seam;
#[cfg(test)]
mod tests;
mod transaction;

pub(crate) use client::client_config;
pub(crate) use client_error::{delivery_error, failure_of};
pub(crate) use origin::{Delivered, NO_HEAD, Origin};
pub(crate) use outcome::{Failed, Failure};
pub(crate) use producer::KafkaSink;
pub(crate) use seam::Sink;
pub(crate) use transaction::{CommitEnded, RunningCommit};

use client_error::IMPLICIT_ACK;
use context::SinkContext;
use origin::Pending;
use transaction::is_fenced;
