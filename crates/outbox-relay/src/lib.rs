//! outbox-relay: transactional-outbox rows from PostgreSQL logical replication into Kafka.
//!
//! The pure parts (pgoutput decoding, routing, the LSN watermark) live in `relay-core`; this
//! crate holds the I/O edges: configuration, preflight/setup SQL, the replication stream, the
//! Kafka producer and the supervisor that restarts the pipeline after transient failures.

pub mod config;
pub mod error;
pub mod metrics;
pub mod pipeline;
pub mod run;
pub mod setup;
pub mod sink;
