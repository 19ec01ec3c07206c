//! outbox-relay: transactional-outbox rows from PostgreSQL logical replication into Kafka.
//!
//! The pure parts (pgoutput decoding, routing, the LSN watermark) live in `relay-core`; this
//! crate holds the I/O edges: configuration, preflight/setup SQL, the replication stream, the
//! Kafka producer and the supervisor that restarts the pipeline after transient failures.
//! Beside the supervisor run the observability tasks: the slot monitor and its alerts
//! (`monitor`, `alert`, `webhook`), the heartbeat, and the HTTP endpoint (`http`, `health`);
//! `status` is the one-shot report of the same checks. `http_client` is the small HTTP client
//! of the webhook and `status`.
//! Only what the binary (`main.rs`) uses is public: `run`, `status`, `config`, `error`,
//! `metrics`, `events` (log event names, which the tests wait on), and the types their
//! signatures name (`alert`, `slot`); everything else is
//! private to the crate.
//! Under all of them: `pg` (the control SQL connection and its error text) and `slot` (what the
//! server reports about the slot), which use nothing of the modules built on them.

pub mod alert;
pub mod apply;
mod budget;
mod carry;
mod checkpoint;
pub mod config;
pub mod console;
pub mod cutover;
pub mod error;
pub mod events;
mod failover;
pub mod fleet;
mod health;
mod heartbeat;
mod http;
mod http_client;
pub mod metrics;
mod monitor;
pub mod outbox_health;
mod passive;
mod pg;
mod pipeline;
mod publication;
mod reader_thread;
mod replication_role;
pub mod republish;
pub mod run;
mod setup;
mod sink;
pub mod slot;
mod slot_keeper;
mod source;
pub(crate) mod source_scope;
mod standby;
mod state;
pub mod status;
mod stop;
mod tls;
mod webhook;
