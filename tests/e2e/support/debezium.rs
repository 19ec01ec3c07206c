//! Kafka Connect workers running Debezium (`infra/debezium/start.sh`), for the tests that
//! compare with it or cut over from it.
//!
//! Invariant: at most one test of this binary runs Connect workers at a time. Each worker is a
//! JVM of up to 512 MiB that takes tens of seconds of CPU to start; two tests starting three of
//! them together beside the broker, PostgreSQL and the other tests' relays on a two-core machine
//! made both fail in CI. A test takes its turn with [`turn`] before its first worker
//! and holds it to its end. A worker is stopped and its slots dropped when it is dropped, passed
//! or not; when the test failed, the end of the worker's log is printed first.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use tokio::sync::{Mutex, MutexGuard};

use super::{kafka_brokers, pg_port, repo_root};

static TURN: Mutex<()> = Mutex::const_new(());

/// This test's turn to run Connect workers (a test that panicked in its turn released it).
pub async fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().await
}

/// `infra/debezium/start.sh` for a worker with its files in `data` and its REST API on
/// `rest_port`, against the tests' broker, with the heap every test's worker gets; the caller
/// adds its connectors' properties files (and `CONNECT_MODE` and the like).
pub fn start_command(data: &Path, rest_port: u16) -> Command {
    let mut c = Command::new(repo_root().join("infra/debezium/start.sh"));
    c.env("CONNECT_DATA", data)
        .env("CONNECT_REST_PORT", rest_port.to_string())
        .env("KAFKA_BOOTSTRAP", kafka_brokers())
        .env("CONNECT_HEAP_OPTS", "-Xms128M -Xmx512M");
    c
}

/// A worker started by `infra/debezium/start.sh` with `CONNECT_DATA = data`, holding `slots`.
pub struct Worker {
    pub data: PathBuf,
    pub slots: Vec<String>,
}

impl Worker {
    /// Stops the JVM (gracefully, then killed after `CONNECT_STOP_TIMEOUT`); its slots stay.
    pub fn stop(&self) {
        let _ = Command::new(repo_root().join("infra/debezium/stop.sh"))
            .env("CONNECT_DATA", &self.data)
            .env("CONNECT_STOP_TIMEOUT", "20")
            .status();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.data.join("connect.out");
            eprintln!(
                "[connect] the end of {}:\n{}",
                log.display(),
                tail(&log, 40)
            );
        }
        self.stop();
        let list = self
            .slots
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(",");
        if list.is_empty() {
            return;
        }
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &pg_port().to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-qAtc"])
            .arg(format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE slot_name IN ({list}) AND NOT active"
            ))
            .status();
    }
}

fn tail(file: &Path, lines: usize) -> String {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| format!("({}: {e})", file.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
