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

    /// A streaming standby of `primary` on `port`, cloned from its data directory (slots
    /// included) while the primary is stopped (infra/pg/standby.sh), then started.
    pub fn clone_standby(primary: &PgCluster, port: u16) -> PgCluster {
        let _ = script("stop.sh", port, &["--destroy"], "");
        let p = primary.port.to_string();
        for (name, args) in [
            ("standby.sh", &["clone", p.as_str()][..]),
            ("start.sh", &[]),
        ] {
            let out = script(name, port, args, "");
            assert!(
                out.status.success(),
                "infra/pg/{name} on port {port} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        PgCluster { port }
    }

    /// Promotes this standby: it starts a new timeline.
    pub fn promote(&self) {
        self.run("standby.sh", &["promote"], "");
    }

    /// Stops the server: `fast` (clean) or `immediate` (a crash).
    pub fn stop(&self, mode: &str) {
        let out = Command::new(repo_root().join("infra/pg/stop.sh"))
            .env("PGPORT", self.port.to_string())
            .env("PG_STOP_MODE", mode)
            .output()
            .expect("run infra/pg/stop.sh");
        assert!(
            out.status.success(),
            "stop.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server again with its previous settings.
    pub fn restart(&self) {
        self.run("start.sh", &[], "");
    }

    fn run(&self, name: &str, args: &[&str], extra_opts: &str) {
        let out = script(name, self.port, args, extra_opts);
        assert!(
            out.status.success(),
            "infra/pg/{name} on port {} failed: {}",
            self.port,
            String::from_utf8_lossy(&out.stderr)
        );
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
