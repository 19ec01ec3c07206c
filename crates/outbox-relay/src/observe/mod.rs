//! What a person or a machine sees of the relay: every metric ([`metrics`]) and log event name
//! ([`events`]), the slot monitor ([`monitor`]) and its alerts ([`alert`]) with their
//! notifications ([`webhook`], over [`http_client`]), readiness ([`health`]), the outbox tables'
//! health ([`outbox_tables`]), the HTTP endpoint ([`http`]) with its console ([`console`]) and
//! the one-shot report `outbox-relay status` ([`status`]).

pub mod alert;
pub mod console;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod monitor;
pub mod outbox_tables;
pub mod status;
pub(crate) mod webhook;
