//! The log event names this crate's own lines start with (the HTTP endpoint's), in one place as
//! each crate's are: the relay's in `outbox_relay::telemetry::events`, the applier's in
//! `outbox_apply::telemetry::events`. What a name is and why it is stable: see the relay's module. The
//! relay's events test reads every crate's sources and checks each against its crate's list.

// The HTTP endpoint (http.rs).
/// `/metrics`, `/healthz` and `/readyz` are served; `addr` is the bound address.
pub const HTTP_LISTENING: &str = "http_listening";
/// `http.listen` cannot be bound; retried every 10 s while the relay keeps relaying.
pub const HTTP_LISTEN_FAILED: &str = "http_listen_failed";
/// Accepting a connection failed (debug).
pub const HTTP_ACCEPT_FAILED: &str = "http_accept_failed";

/// Every event name of this crate.
pub const ALL: &[&str] = &[HTTP_LISTENING, HTTP_LISTEN_FAILED, HTTP_ACCEPT_FAILED];
