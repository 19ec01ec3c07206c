//! outbox-relay: transactional-outbox rows from PostgreSQL logical replication into Kafka.
//!
//! The pure rules (pgoutput decoding, routing, the LSN watermark, what may be confirmed) live in
//! `relay-core`; this crate holds the I/O edges, grouped by concern. Follow one outbox row:
//! - [`postgres`]: everything that talks to PostgreSQL: the control connection and TLS, the
//!   preflight and setup, the replication session and its reader thread, the slot and its
//!   keeper, the publication, standbys, failover checks, the passive wait, the heartbeat and the
//!   state file.
//! - [`pipeline`]: the replication stream decoded, routed and produced in commit order, and the
//!   progress that decides what may be confirmed.
//! - [`sink`]: the Kafka edge (the producer, its transactions, the checkpoint topic).
//! - [`supervise`]: the supervisor that restarts a source after transient failures, several
//!   sources in one process (the fleet), stopping from any wait, the shared in-flight budget.
//! - [`observe`]: metric and log event names, the slot monitor and its alerts, webhooks, the HTTP
//!   endpoint and console, readiness, outbox table health and `status`.
//! - [`config`], [`error`]; the commands beside `run`: [`cutover`] (from Debezium), [`republish`]
//!   (heal a lost slot) and [`apply`] (the consumer-side applier).
//!
//! Only what the binary (`main.rs`) and the tests use is public; everything else is `pub(crate)`
//! or narrower. Under all of them: `postgres::control` (the control SQL connection and its error
//! text) and `postgres::slot` (what the server reports about the slot), which use nothing of the
//! modules built on them.

pub mod apply;
pub mod config;
pub mod cutover;
pub mod error;
pub mod observe;
mod pipeline;
pub mod postgres;
pub mod republish;
mod sink;
pub mod supervise;
pub mod telemetry;
