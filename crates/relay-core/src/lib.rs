//! The pure core of outbox-relay: no sockets, no clocks, no Kafka.
//!
//! ```text
//! pgoutput bytes ──pgoutput::parse──▶ Message ──decode::Decoder──▶ Change(row of an outbox table)
//!        ──route::Router──▶ Record { topic, key, value, headers } ──(Kafka, in the binary)
//! Begin/Commit/keepalive/ack ──▶ watermark::AckTracker ──▶ the one LSN safe to confirm
//!   + in-flight limits, Kafka commits ──progress::Progress──▶ may read? what to confirm?
//!   + every source's in-flight bytes (several databases) ──budget::may_read──▶ may read?
//!   + skip status, checkpoints written ──progress (gate)──▶ skip over? checkpoint now, covering what? commit now?
//! checkpoint (last record of a Kafka txn) + stream ──skip::Skip──▶ skip or publish after a restart
//! idle_replication_slot_timeout, slot idle for ──idle_timeout::hold_due──▶ hold the slot now?
//! slot row (wal_status, invalidation_reason, standby?) ──invalidation──▶ why it was lost, what to do
//! the server's roles ──platform::Platform::detect──▶ the grant and switch advice for RDS, Cloud SQL, …
//! limit, safe_wal_size, retained WAL ──headroom::Series──▶ samples of one basis ──forecast──▶ when the slot is lost
//! stream up, WAL grows, markers still ──stall::StallDetector──▶ stalled for N s
//! new timeline's history + last published commit ──timeline::follow──▶ follow or refuse
//! outbox rows (xmin, commit time) + checkpoint + new slot ──heal──▶ which rows fill a lost slot's gap
//! Debezium's Connect offset ──debezium_position──▶ the cutover's checkpoint (whole txns only)
//! Kafka records of a partition + outcomes ──apply──▶ the applier's transactions, start, failures
//! ```
//!
//! Everything here is deterministic so it can be unit-, property- and fuzz-tested.

pub mod apply;
pub mod budget;
pub mod checkpoint;
pub mod deadletter;
pub mod debezium_position;
pub mod decode;
pub mod forecast;
pub mod head;
pub mod headroom;
pub mod heal;
pub mod idle_timeout;
pub mod invalidation;
pub mod lsn;
pub mod partition;
pub mod pgoutput;
pub mod platform;
pub mod progress;
pub mod route;
pub mod skip;
pub mod stall;
pub mod timeline;
pub mod watermark;

pub use lsn::Lsn;
