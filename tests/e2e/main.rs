//! End-to-end tests against a real PostgreSQL and a real Kafka broker (see support/mod.rs).
//! One test binary; every test has its own database, slot, publication and topics.

mod support;

mod applier;
mod applier_edges;
mod applier_ops;
mod applier_outage;
mod applier_pause;
mod applier_shared_rows;
mod backpressure;
mod balances;
mod chaos;
mod cli;
mod debezium_compat;
mod debezium_cutover;
mod delivery;
mod exactly_once;
mod failover;
mod failover_slot;
mod fencing;
mod inbox_crate;
mod inbox_rust;
mod inbox_sql;
mod kafka_security;
mod messages;
mod messages_faults;
mod observability;
mod outbox_hygiene;
mod outbox_updates;
mod platforms;
mod poison;
mod preconditions;
mod preflight;
mod progress;
mod recipes;
mod refused_order;
mod restart;
mod schema;
mod security;
mod slot_trends;
mod sources;
mod standby;
mod status_watch;
mod stop;
mod tls;
mod versions;
