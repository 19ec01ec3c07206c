//! What a person or a machine sees of the relay: every metric ([`metrics`]) and log event name
//! ([`events`]), the slot monitor ([`monitor`]) and its alerts ([`alert`]) with their
//! notifications ([`webhook`], over [`http_client`]), readiness ([`health`]), the outbox tables'
//! health ([`outbox_tables`]), the relay's document of the HTTP endpoint's console ([`console`]; the endpoint and the page are `outbox_service`'s) and
//! the one-shot report `outbox-relay status` ([`status`]).

pub mod alert;
pub mod console;
pub(crate) mod health;
pub(crate) mod monitor;
pub mod outbox_tables;
pub mod status;
pub(crate) mod webhook;
