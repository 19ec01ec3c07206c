//! What every part of the relay records, named in one place: every metric ([`metrics`]) and
//! log event name ([`events`]), the `source` label a task of one configured database carries
//! on both ([`source_scope`]), and the small HTTP client the webhooks and `status` use
//! (`http_client`, from `outbox_service`; also how the configuration validates a webhook URL). Nothing here depends
//! on any other module of the crate: everything else may use it.

pub mod events;
/// The client moved to the shared crate (the applier's `apply status` uses it too).
pub(crate) use outbox_service::http_client;
pub mod metrics;
pub(crate) mod source_scope;
