//! A throw-away PostgreSQL cluster of its own (infra/pg/start.sh), for tests that need server
//! settings the shared cluster must not have (a tiny `max_slot_wal_keep_size`, say). Started
//! fresh, stopped and deleted on drop.

use std::process::Command;

use super::repo_root;

pub struct PgCluster {
    pub port: u16,
}

fn script(name: &str, port: u16, args: &[&str], extra_opts: &str) -> std::process::Output {
    Command::new(repo_root().join("infra/pg").join(name))
        .args(args)
        .env("PGPORT", port.to_string())
        .env("PG_EXTRA_OPTS", extra_opts)
        .output()
        .unwrap_or_else(|e| panic!("run infra/pg/{name}: {e}"))
}

impl PgCluster {
    /// Starts a new cluster on `port` with `extra_opts` (`-c key=value ...`); a leftover
    /// cluster from an aborted run on that port is destroyed first.
    pub fn start(port: u16, extra_opts: &str) -> PgCluster {
        let _ = script("stop.sh", port, &["--destroy"], "");
        let out = script("start.sh", port, &[], extra_opts);
        assert!(
            out.status.success(),
            "infra/pg/start.sh on port {port} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PgCluster { port }
    }

    /// Connection string without `dbname`.
    pub fn base(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = script("stop.sh", self.port, &["--destroy"], "");
    }
}
