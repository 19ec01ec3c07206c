//! Everything that talks to PostgreSQL: the control connection ([`control`], with [`tls`]), the
//! preflight and setup ([`setup`], [`role`], [`standby`], [`publication`]), the replication
//! session ([`session`], read on the [`reader_thread`]), what the server says about the slot
//! ([`slot`]) and the tasks that keep it ([`slot_keeper`], [`heartbeat`]), the checks on every
//! connect ([`failover`], with the [`state_file`]) and the wait of a passive instance
//! ([`passive`]).

pub(crate) mod carry;
pub(crate) mod control;
pub(crate) mod failover;
pub(crate) mod passive;
pub(crate) mod publication;
pub(crate) mod reader_thread;
pub(crate) mod role;
pub(crate) mod session;
pub(crate) mod setup;
pub mod slot;
pub(crate) mod standby;
pub(crate) mod state_file;
pub(crate) mod tls;
