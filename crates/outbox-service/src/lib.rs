//! What both long-running programs of the workspace stand on: the relay (`outbox-relay run`)
//! and the applier (`outbox-relay apply`).
//!
//! - [`backoff`]: the one exponential backoff of every retry loop (reconnects, restarts,
//!   a full local queue);
//! - [`config`]: loading a config file and the environment, typed values, secrets, errors
//!   that name the option;
//! - [`postgres`]: the PostgreSQL connection section both configs share, opening a connection
//!   (TLS included), identifier quoting and error text;
//! - [`http_client`]: a minimal plain-HTTP client (webhooks, `status` reading `/status.json`).
//!
//! Layers: `backoff`, `config` and `http_client` use nothing here; `postgres` uses `config`.

pub mod backoff;
pub mod config;
pub mod http_client;
pub mod postgres;

pub use backoff::Backoff;
