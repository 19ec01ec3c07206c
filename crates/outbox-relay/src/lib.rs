//! outbox-relay: transactional-outbox rows from PostgreSQL logical replication into Kafka.
//!
//! The pure parts (pgoutput decoding, routing, the LSN watermark) live in `relay-core`; this
//! crate holds the I/O edges: configuration, preflight/setup SQL, the replication stream, the
//! Kafka producer and the supervisor that restarts the pipeline after transient failures.
//! Beside the supervisor run the observability tasks: the slot monitor and its alerts
//! (`monitor`, `alert`, `webhook`), the heartbeat, and the HTTP endpoint (`http`, `health`);
//! `status` is the one-shot report of the same checks. `http_client` is the small HTTP client
//! of the webhook and `status`.
//! Under all of them: `pg` (the control SQL connection and its error text) and `slot` (what the
//! server reports about the slot), which use nothing of the modules built on them.

pub mod alert;
mod carry;
pub mod config;
pub mod error;
pub mod events;
pub mod failover;
pub mod health;
pub mod heartbeat;
pub mod http;
pub mod http_client;
pub mod metrics;
pub mod monitor;
pub(crate) mod pg;
pub mod pipeline;
pub mod run;
pub mod setup;
pub mod sink;
pub mod slot;
mod source;
pub mod state;
pub mod status;
mod stop;
pub mod tls;
pub mod webhook;
