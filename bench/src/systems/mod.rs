//! The systems under comparison: how each one is prepared, started and stopped.
//!
//! `env`: where things are and how each system is configured and started; `running`: a started
//! system, measured and stopped, and pg_recvlogical's own start.

use anyhow::{Result, bail};

mod env;
mod running;

pub use env::{Env, peers_dir};
pub use running::Running;

/// One relay (or the pg_recvlogical upper bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum System {
    #[serde(rename = "pg_recvlogical")]
    RecvLogical,
    #[serde(rename = "outbox-relay")]
    Relay,
    /// outbox-relay with `kafka.transactional_id` (zombie fencing, Kafka transactions).
    #[serde(rename = "outbox-relay-fenced")]
    RelayFenced,
    /// outbox-relay with `kafka.transactional_id` and `relay.delivery = "exactly-once"`.
    #[serde(rename = "outbox-relay-eos")]
    RelayEos,
    /// outbox-relay with a `[[message]]` section; the writers emit transactional logical
    /// messages instead of outbox rows (the table-less outbox). Steady runs only.
    #[serde(rename = "outbox-relay-messages")]
    RelayMessages,
    /// outbox-relay run from a second binary (`BENCH_RELAY_B_BIN`), for an A/B in one run on
    /// one stack, window after window. Steady runs only.
    #[serde(rename = "outbox-relay-b")]
    RelayB,
    /// outbox-relay-eos run from the second binary.
    #[serde(rename = "outbox-relay-eos-b")]
    RelayEosB,
    /// Kafka's floor: a bare producer in the harness (acks=all, idempotent, linger 0) writing
    /// the same records at the same rate; no PostgreSQL. Steady runs only.
    #[serde(rename = "kafka-floor-linger0")]
    Floor0,
    /// The same with linger 5 (the Kafka 4 Java client's default).
    #[serde(rename = "kafka-floor-linger5")]
    Floor5,
    /// Exactly-once's floor: a bare transactional producer (linger 0) committing back to back,
    /// read by the same read-committed consumer.
    #[serde(rename = "kafka-floor-txn")]
    FloorTxn,
    #[serde(rename = "polling")]
    Polling,
    #[serde(rename = "debezium-default")]
    DbzDefault,
    #[serde(rename = "debezium-tuned")]
    DbzTuned,
    /// outboxx (lukashes/outboxx, Zig + librdkafka), built by `bench/peers/build.sh`: its own
    /// JSON envelope per row. Catch-up only, and only when named in `--systems`.
    #[serde(rename = "outboxx")]
    Outboxx,
    /// A minimal main program on Trendyol/go-pq-cdc-kafka (`bench/peers/go-pq-cdc-kafka/`),
    /// built by `bench/peers/build.sh`. Catch-up only, and only when named in `--systems`.
    #[serde(rename = "go-pq-cdc-kafka")]
    GoPqCdc,
}

impl System {
    /// Every system, in the order a run takes them.
    pub const CANONICAL: [System; 15] = [
        System::Floor0,
        System::Floor5,
        System::FloorTxn,
        System::RecvLogical,
        System::Relay,
        System::RelayB,
        System::RelayFenced,
        System::RelayEos,
        System::RelayEosB,
        System::RelayMessages,
        System::DbzDefault,
        System::DbzTuned,
        System::Outboxx,
        System::GoPqCdc,
        System::Polling,
    ];

    /// The default selection: the peers, Kafka's floors (issue #15) and exactly-once (#11).
    pub const ALL: [System; 9] = [
        System::Floor0,
        System::Floor5,
        System::FloorTxn,
        System::RecvLogical,
        System::Relay,
        System::RelayEos,
        System::DbzDefault,
        System::DbzTuned,
        System::Polling,
    ];

    pub fn name(self) -> &'static str {
        match self {
            System::RecvLogical => "pg_recvlogical",
            System::Relay => "outbox-relay",
            System::RelayFenced => "outbox-relay-fenced",
            System::RelayEos => "outbox-relay-eos",
            System::RelayMessages => "outbox-relay-messages",
            System::RelayB => "outbox-relay-b",
            System::RelayEosB => "outbox-relay-eos-b",
            System::Floor0 => "kafka-floor-linger0",
            System::Floor5 => "kafka-floor-linger5",
            System::FloorTxn => "kafka-floor-txn",
            System::Polling => "polling",
            System::DbzDefault => "debezium-default",
            System::DbzTuned => "debezium-tuned",
            System::Outboxx => "outboxx",
            System::GoPqCdc => "go-pq-cdc-kafka",
        }
    }

    pub fn parse(s: &str) -> Result<System> {
        Ok(match s {
            "pg_recvlogical" | "recvlogical" | "recv" => System::RecvLogical,
            "outbox-relay" | "relay" => System::Relay,
            "outbox-relay-fenced" | "relay-fenced" => System::RelayFenced,
            "outbox-relay-eos" | "relay-eos" => System::RelayEos,
            "outbox-relay-messages" | "relay-messages" => System::RelayMessages,
            "outbox-relay-b" | "relay-b" => System::RelayB,
            "outbox-relay-eos-b" | "relay-eos-b" => System::RelayEosB,
            "kafka-floor-linger0" | "floor0" => System::Floor0,
            "kafka-floor-linger5" | "floor5" => System::Floor5,
            "kafka-floor-txn" | "floortxn" => System::FloorTxn,
            "polling" | "poll" => System::Polling,
            "debezium-default" | "dbz-default" | "dbzd" => System::DbzDefault,
            "debezium-tuned" | "dbz-tuned" | "dbzt" => System::DbzTuned,
            "outboxx" => System::Outboxx,
            "go-pq-cdc-kafka" | "go-pq-cdc" | "gopqcdc" => System::GoPqCdc,
            _ => bail!("unknown system {s:?}"),
        })
    }

    fn short(self) -> &'static str {
        match self {
            System::RecvLogical => "recv",
            System::Relay => "relay",
            System::RelayFenced => "relayf",
            System::RelayEos => "relaye",
            System::RelayMessages => "relaym",
            System::RelayB => "relayb",
            System::RelayEosB => "relayeb",
            System::Floor0 => "floor0",
            System::Floor5 => "floor5",
            System::FloorTxn => "floortxn",
            System::Polling => "poll",
            System::DbzDefault => "dbzd",
            System::DbzTuned => "dbzt",
            System::Outboxx => "outboxx",
            System::GoPqCdc => "gopq",
        }
    }

    /// Replication slot of this system (each one has its own). `None` for the polling relay
    /// and the floor producers.
    pub fn slot(self) -> Option<String> {
        (self != System::Polling && self.floor_linger_ms().is_none())
            .then(|| format!("bench_{}", self.short()))
    }

    /// The floor producers' `linger.ms`; `None` for every other system.
    pub fn floor_linger_ms(self) -> Option<u32> {
        match self {
            System::Floor0 | System::FloorTxn => Some(0),
            System::Floor5 => Some(5),
            _ => None,
        }
    }

    /// The floor producer commits Kafka transactions (exactly-once's floor).
    pub fn floor_transactional(self) -> bool {
        self == System::FloorTxn
    }

    pub fn publication(self) -> Option<String> {
        self.slot().map(|s| format!("{s}_pub"))
    }

    /// outbox-relay, in any of its delivery modes.
    pub fn is_relay(self) -> bool {
        matches!(
            self,
            System::Relay
                | System::RelayFenced
                | System::RelayEos
                | System::RelayMessages
                | System::RelayB
                | System::RelayEosB
        )
    }

    /// A native peer built from source by `bench/peers/build.sh` (catch-up only).
    pub fn is_peer(self) -> bool {
        matches!(self, System::Outboxx | System::GoPqCdc)
    }

    /// The system whose configuration this one runs (the B binary's twins run their A's).
    fn config_of(self) -> System {
        match self {
            System::RelayB => System::Relay,
            System::RelayEosB => System::RelayEos,
            s => s,
        }
    }

    /// Whether its writers emit logical messages instead of outbox rows.
    pub fn emits_messages(self) -> bool {
        self == System::RelayMessages
    }

    /// Whether it produces to Kafka (pg_recvlogical writes to /dev/null).
    pub fn produces(self) -> bool {
        self != System::RecvLogical
    }

    /// Topic prefix of run number `n` of invocation `stamp` (every run gets fresh topics).
    pub fn topic_prefix(self, stamp: i64, n: usize) -> String {
        format!("b{stamp}-{n}-{}", self.short())
    }
}

/// Where outbox-relay and pg_recvlogical reach PostgreSQL: `127.0.0.1` (TCP), or with
/// `BENCH_PG_HOST` set to the server's socket directory, a Unix-domain socket (what the
/// transport costs the walsender; outboxx and the other systems stay on TCP).
pub(crate) fn pg_host() -> String {
    std::env::var("BENCH_PG_HOST").unwrap_or_else(|_| "127.0.0.1".into())
}
