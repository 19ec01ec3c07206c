//! What every part of the relay records, named in one place: every metric ([`metrics`]) and
//! log event name ([`events`]), the `source` label a task of one configured database carries
//! on both ([`source_scope`]), `RUST_LOG` written for the module paths before the re-housing
//! ([`log_targets`]), and the small HTTP client the webhooks and `status` use
//! (`http_client`, from `outbox_service`; also how the configuration validates a webhook URL). Nothing here depends
//! on any other module of the crate: everything else may use it.

pub mod events;
/// The client moved to the shared crate (the applier's `apply status` uses it too).
pub(crate) use outbox_service::http_client;
pub mod log_targets;
pub mod metrics;
pub(crate) mod source_scope;
