//! The Kafka side: the consumer on its own thread ([`reader`]), its rebalance (positions read
//! from the database before partitions are assigned: [`rebalance`]) and the brokers'
//! reachability as the log tells it ([`broker`]). Uses `partition` and `postgres` below it.

mod broker;
pub(crate) mod reader;
mod rebalance;
