//! outbox-relay: transactional-outbox rows from PostgreSQL logical replication into Kafka.
//!
//! The pure rules (pgoutput decoding, routing, the LSN watermark, what may be confirmed) live in
//! `relay-core`; this crate holds the I/O edges, in folders layered from the bottom (each uses
//! only those above it here; docs/architecture.md, "Code layout", has every module):
//! - [`telemetry`]: every metric and log event name, the `source` label, the HTTP client.
//! - [`config`], [`error`]: every option; transient against definite errors.
//! - `sink`: the Kafka edge (the producer behind the `Sink` seam, its transactions, the
//!   checkpoint topic, the process-wide in-flight budget).
//! - [`postgres`]: everything that talks to PostgreSQL: the control connection and TLS, the
//!   preflight and setup, the replication session and its reader thread, the slot, the
//!   publication, standbys, failover checks, the passive wait and the state file.
//! - [`observe`]: the slot monitor and its alerts, webhooks, readiness, the HTTP endpoint and
//!   console, outbox table health and `status`.
//! - `pipeline`: the replication stream decoded, routed and produced in commit order, and the
//!   progress that decides what may be confirmed.
//! - [`cutover`] (from Debezium), [`republish`] (heal a lost slot) and [`supervise`] (the
//!   supervisor, several sources in one process, heartbeat and slot keeper).
//!
//! The consumer-side applier is the `outbox-apply` crate; the binary mounts it as `apply`.
//!
//! Only what the binary (`main.rs`) and the tests use is public; everything else is `pub(crate)`
//! or narrower.

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
