//! What both long-running programs of the workspace stand on: the relay (`outbox-relay run`)
//! and the applier (`outbox-relay apply`).
//!
//! - [`backoff`]: the one exponential backoff of every retry loop (reconnects, restarts,
//!   a full local queue).

pub mod backoff;

pub use backoff::Backoff;
