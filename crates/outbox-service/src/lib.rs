//! What both long-running programs of the workspace stand on: the relay (`outbox-relay run`)
//! and the applier (`outbox-relay apply`).
//!
//! - [`backoff`]: the one exponential backoff of every retry loop (reconnects, restarts,
//!   a full local queue);
//! - [`config`]: loading a config file and the environment, typed values, secrets, errors
//!   that name the option;
//! - [`postgres`]: the PostgreSQL connection section both configs share, opening a connection
//!   (TLS included), identifier quoting and error text;
//! - [`http_client`]: a minimal plain-HTTP client (webhooks, `status` reading `/status.json`);
//! - [`http`]: the HTTP endpoint (`/metrics`, `/healthz`, `/readyz` and the pages beside them),
//!   with [`console`], the read-only page over a process's own document and its history;
//! - [`kafka_log`]: librdkafka's log lines, for every Kafka client of both programs;
//! - [`events`]: the log event names this crate's own lines start with.
//!
//! Layers: `backoff`, `config`, `events`, `http_client` and `kafka_log` use nothing here;
//! `postgres` uses `config`; `http` uses `events`; `console` uses `http`.

pub mod backoff;
pub mod config;
pub mod console;
pub mod events;
pub mod http;
pub mod http_client;
pub mod kafka_log;
pub mod postgres;

pub use backoff::Backoff;
