//! Test fixtures: a fresh database, slot, publication and topic namespace per test; the real
//! `outbox-relay` binary as a child process; an independent Kafka consumer; and the checker
//! that turns "what was committed" and "what Kafka holds" into figures.
//!
//! Servers come from `infra/` (started by `scripts/test.sh`): PostgreSQL at `RELAY_TEST_PG`
//! (default `host=127.0.0.1 port=15432 user=postgres`), Kafka at `RELAY_TEST_KAFKA` (default
//! `127.0.0.1:19092`). Servers a test starts for itself listen on fixed ports in 25000-26999:
//! below Linux's ephemeral range (32768-60999), so no client socket of a parallel test can be
//! holding the port when the server binds it.

#![allow(dead_code)]

pub mod applier;
pub mod broker;
pub mod browser;
pub mod certs;
pub mod check;
pub mod cluster;
pub mod consumer;
pub mod debezium;
pub mod http;
pub mod inbox;
pub mod kafka;
pub mod proxy;
pub mod recipe;
pub mod relay;
pub mod stored;
pub mod timing;
pub mod writer;

use std::time::{Duration, Instant};

use relay_core::Lsn;
use tokio_postgres::{Client, NoTls};

pub fn pg_base() -> String {
    std::env::var("RELAY_TEST_PG")
        .unwrap_or_else(|_| "host=127.0.0.1 port=15432 user=postgres".into())
}

pub fn kafka_brokers() -> String {
    std::env::var("RELAY_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

pub fn pg_port() -> u16 {
    pg_base()
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .unwrap_or(5432)
}

/// The fenced pass of scripts/test.sh (`RELAY_TEST_FENCED=1`): relays run with
/// `kafka.transactional_id` and consumers read committed.
pub fn fenced_pass() -> bool {
    std::env::var("RELAY_TEST_FENCED").is_ok_and(|v| v == "1")
}

/// Where `infra/stack.sh` and the tests' own servers keep their data (`$STACK_DIR`, else
/// `.stack` in the repository).
pub fn stack_dir() -> std::path::PathBuf {
    std::env::var("STACK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".stack"))
}

pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub async fn connect(conninfo: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("cannot connect to {conninfo}: {e}; start the stack with infra/stack.sh up")
        });
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// One test's world: database `name`, slot `name`, publication `name`, topics `name.*`.
pub struct TestDb {
    pub name: String,
    pub client: Client,
    /// Connection string of the cluster without `dbname`.
    pub base: String,
    pub port: u16,
}

impl TestDb {
    /// Creates the database with the Debezium outbox table and an `agg` table for sequence
    /// numbers per aggregate (a row lock per aggregate makes its order the commit order).
    pub async fn new(hint: &str) -> TestDb {
        Self::new_on(&pg_base(), pg_port(), hint).await
    }

    /// The same on another cluster (`base` = connection string without dbname).
    pub async fn new_on(base: &str, port: u16, hint: &str) -> TestDb {
        timing::begin();
        let name = format!(
            "t_{hint}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let admin = connect(&format!("{base} dbname=postgres")).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let client = connect(&format!("{base} dbname={name}")).await;
        let migration =
            std::fs::read_to_string(repo_root().join("migrations/0001_outbox.sql")).unwrap();
        client.batch_execute(&migration).await.unwrap();
        client
            .batch_execute(
                "CREATE TABLE agg (id text PRIMARY KEY, seq int NOT NULL DEFAULT 0);
                 CREATE TABLE business (id bigserial PRIMARY KEY, note text);",
            )
            .await
            .unwrap();
        TestDb {
            name,
            client,
            base: base.to_string(),
            port,
        }
    }

    /// The same database with a new connection (after a restart of the server).
    pub async fn reconnect(self) -> TestDb {
        let client = connect(&self.conninfo()).await;
        TestDb { client, ..self }
    }

    pub fn conninfo(&self) -> String {
        format!("{} dbname={}", self.base, self.name)
    }

    /// Relay config for this test; `extra` is appended verbatim (more sections or keys).
    /// With `RELAY_TEST_FENCED=1` in the environment every relay runs with
    /// `kafka.transactional_id` (unless the test sets one itself): the whole suite in fenced mode.
    pub fn relay_config(&self, extra: &str) -> String {
        let fenced = fenced_pass() && !extra.contains("transactional_id");
        format!(
            "[postgres]\nport = {port}\ndatabase = \"{db}\"\nslot = \"{db}\"\npublication = \"{db}\"\n\
             create_slot = true\n\n[kafka]\nbrokers = \"{brokers}\"\n{txn}{checkpoints}\n{extra}\n",
            port = self.port,
            db = self.name,
            brokers = kafka_brokers(),
            // Each test its own checkpoint topic: a relay killed in the middle of a commit
            // leaves a transaction open on it, which read-committed readers wait behind.
            // RELAY_TEST_NO_CHECKPOINT_TOPIC=1: for builds before checkpoints (RELAY_TEST_BIN).
            checkpoints = if extra.contains("checkpoint_topic")
                || std::env::var("RELAY_TEST_NO_CHECKPOINT_TOPIC").is_ok_and(|v| v == "1")
            {
                String::new()
            } else {
                format!("checkpoint_topic = \"{}.checkpoints\"\n", self.name)
            },
            txn = if fenced {
                format!("transactional_id = \"outbox-relay-{}\"\n", self.name)
            } else {
                String::new()
            },
        )
    }

    /// The default outbox mapping with this test's topic namespace.
    pub fn outbox_section(&self) -> String {
        format!(
            "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{}.{{aggregatetype}}\"\n",
            self.name
        )
    }

    pub fn topic(&self, aggregate_type: &str) -> String {
        format!("{}.{aggregate_type}", self.name)
    }

    pub async fn confirmed_flush(&self) -> Option<Lsn> {
        let row = self
            .client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.name],
            )
            .await
            .unwrap()?;
        row.get::<_, Option<String>>(0).map(|s| s.parse().unwrap())
    }

    pub async fn current_wal_lsn(&self) -> Lsn {
        let s: String = self
            .client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        s.parse().unwrap()
    }

    /// One column of this test's slot's row in `pg_replication_slots` (`None`: no slot, or
    /// NULL there).
    async fn slot_column<T: for<'a> tokio_postgres::types::FromSql<'a>>(
        &self,
        column: &str,
    ) -> Option<T> {
        self.client
            .query_opt(
                &format!("SELECT {column} FROM pg_replication_slots WHERE slot_name = $1"),
                &[&self.name],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0))
    }

    pub async fn slot_active_pid(&self) -> Option<i32> {
        self.slot_column("active_pid").await
    }

    /// The pid streaming from this test's slot, once the slot is complete. A slot being
    /// created is already listed as active (its creator holds it) while it waits for running
    /// transactions, with no `confirmed_flush_lsn` yet: events committed then, before its
    /// consistent point, are not in it. Writers must wait for this, not for `active_pid`
    /// (issue 40: the red CI of 750b8b1).
    pub async fn slot_streaming_pid(&self) -> Option<i32> {
        self.slot_column("CASE WHEN confirmed_flush_lsn IS NOT NULL THEN active_pid END")
            .await
    }

    /// Whether this test's slot exists.
    pub async fn slot_exists(&self) -> bool {
        self.slot_column::<i32>("1").await.is_some()
    }

    /// The slot's `wal_status` (`None`: no slot, or none reported).
    pub async fn slot_wal_status(&self) -> Option<String> {
        self.slot_column("wal_status").await
    }

    /// Writes WAL the slot cannot keep (1,000 rows of 1.9 kB into `business`, a WAL switch and
    /// a checkpoint), at most `rounds` times, until its `wal_status` is `lost`; whether it was.
    pub async fn write_wal_until_slot_lost(&self, rounds: usize) -> bool {
        for _ in 0..rounds {
            self.client
                .batch_execute(
                    "INSERT INTO business(note) SELECT repeat('x', 1900) FROM generate_series(1, 1000);
                     SELECT pg_switch_wal(); CHECKPOINT;",
                )
                .await
                .unwrap();
            if self.slot_wal_status().await.as_deref() == Some("lost") {
                return true;
            }
        }
        false
    }

    /// The slot's `invalidation_reason` (PostgreSQL 17 on; `None` while the slot is valid).
    pub async fn invalidation_reason(&self) -> Option<String> {
        self.client
            .query_one(
                "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.name],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// A checkpoint every 0.5 s, for 20 s at most, until the slot is invalidated: the reason
    /// (`None`: still valid).
    pub async fn wait_invalidated(&self) -> Option<String> {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            self.client.batch_execute("CHECKPOINT").await.unwrap();
            if let Some(reason) = self.invalidation_reason().await {
                return Some(reason);
            }
        }
        None
    }

    /// The WAL the slot holds back, in bytes: from its `restart_lsn` to the current position.
    pub async fn retained_wal(&self) -> f64 {
        self.client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8 \
                   FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.name],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// The server's `server_version_num` (e.g. 150014).
    pub async fn server_version_num(&self) -> i32 {
        self.client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Replaces the outbox with one partitioned by range of a `created_at` column, whose
    /// partitions `partitions` creates (`CREATE TABLE … PARTITION OF outbox …;`).
    pub async fn partitioned_outbox(&self, partitions: &str) {
        self.client
            .batch_execute(&format!(
                "DROP TABLE outbox;
                 CREATE TABLE outbox (
                     id uuid NOT NULL, aggregatetype varchar(255) NOT NULL,
                     aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL,
                     payload jsonb, created_at timestamptz NOT NULL DEFAULT now(),
                     PRIMARY KEY (id, created_at)
                 ) PARTITION BY RANGE (created_at);
                 {partitions}"
            ))
            .await
            .unwrap();
    }

    /// The publication the relay would create, made beforehand (named after the test).
    pub async fn create_publication(&self) {
        self.client
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'insert')",
                self.name
            ))
            .await
            .unwrap();
    }

    /// Waits until the slot has confirmed at least `lsn`.
    pub async fn wait_confirmed(&self, lsn: Lsn, timeout: Duration) -> Lsn {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            let c = self.confirmed_flush().await.unwrap_or(Lsn::ZERO);
            if c >= lsn {
                timing::waited(&format!("slot confirmed {lsn}"), start.elapsed());
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "slot {} confirmed {c}, expected >= {lsn}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reads this test's `order` topic until every `written` event is there (or `timeout`
    /// passes) and checks it, recording the figures under `test` ([`check::check`]).
    pub async fn check_order_topic(
        &self,
        test: &str,
        written: &[writer::Written],
        timeout: Duration,
    ) -> check::Figures {
        let got = kafka::consume(vec![self.topic("order")], timeout, written.len()).await;
        check::check(test, |t| self.topic(t), written, &got)
    }

    /// Copies the slot as it is now to `copy` (`pg_copy_logical_replication_slot`).
    pub async fn copy_slot(&self, copy: &str) {
        self.client
            .execute(
                "SELECT pg_copy_logical_replication_slot($1, $2)",
                &[&self.name, &copy],
            )
            .await
            .unwrap();
    }

    /// Once the relay released the slot, drops it and puts `copy` (taken earlier with
    /// [`copy_slot`](Self::copy_slot)) in its place: the slot goes back in time, as after a
    /// PostgreSQL crash that lost its position.
    pub async fn rewind_slot(&self, copy: &str) {
        eventually(
            "the slot to be released",
            Duration::from_secs(20),
            || async { self.slot_active_pid().await.is_none().then_some(()) },
        )
        .await;
        self.client
            .execute("SELECT pg_drop_replication_slot($1)", &[&self.name])
            .await
            .unwrap();
        self.client
            .execute(
                "SELECT pg_copy_logical_replication_slot($1, $2)",
                &[&copy, &self.name],
            )
            .await
            .unwrap();
    }

    /// Drops another slot of this test (a copy), if it exists.
    pub async fn drop_slot(&self, slot: &str) {
        let _ = self
            .client
            .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
            .await;
    }

    /// Drops `slot` once its holder let it go, and makes sure it is gone. A relay's process
    /// ends before the server's walsender does: dropped at once, the slot can still be active,
    /// and the drop fails ([`drop_slot`](Self::drop_slot) ignores that; a fenced CI pass of
    /// 6085305 then healed a slot that was never dropped: "the slot was not lost").
    pub async fn drop_released_slot(&self, slot: &str) {
        eventually(
            &format!("slot {slot} released and dropped"),
            Duration::from_secs(30),
            || async {
                drop_slot_if_released(&self.client, slot)
                    .await
                    .then_some(())
            },
        )
        .await;
    }

    /// Drops the slot (after the relay stopped) and the database.
    pub async fn cleanup(self) {
        let admin = connect(&format!("{} dbname=postgres", self.base)).await;
        timing::timed("cleanup", drop_slot_and_db(&admin, &self.name)).await;
        timing::end();
    }
}

async fn drop_slot_and_db(admin: &Client, name: &str) {
    for _ in 0..50 {
        if drop_slot_if_released(admin, name).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
}

/// One try: drops the slot if no walsender holds it; true once it is gone. Best effort (an
/// error counts as "still there"): a walsender may let the slot go after its client exited.
async fn drop_slot_if_released(client: &Client, slot: &str) -> bool {
    let dropped = client
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = $1 AND NOT active",
            &[&slot],
        )
        .await;
    let left = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map(|r| r.is_some())
        .unwrap_or(true);
    dropped.is_ok() && !left
}

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
