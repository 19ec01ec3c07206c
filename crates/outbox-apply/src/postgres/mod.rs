//! The consumer's database: the bookkeeping tables and a prepared connection ([`store`]), a
//! record bound to its handler's statement ([`handler`]), the transaction that claims, applies
//! and moves the position ([`txn`]), the pool of connections ([`pool`]) and the turns taken
//! after a conflict ([`contention`]). Uses `telemetry`, `config`, `error` and `record`.

pub(crate) mod contention;
pub(crate) mod handler;
pub(crate) mod pool;
pub(crate) mod store;
pub(crate) mod txn;
