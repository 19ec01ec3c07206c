//! What the applier records, named in one place: every log event name ([`events`]) and every
//! metric with its help text and the recorder it installs ([`metrics`]). Public: the relay's
//! tests check the log lines and docs/operations.md against these names. Uses nothing of the
//! crate.

pub mod events;
pub mod metrics;
