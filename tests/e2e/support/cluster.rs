//! A throw-away PostgreSQL cluster of its own (infra/pg/start.sh), for tests that need server
//! settings the shared cluster must not have (a tiny `max_slot_wal_keep_size`, say). Started
//! fresh, stopped and deleted on drop.

use std::{path::PathBuf, process::Command};

use super::repo_root;

pub struct PgCluster {
    pub port: u16,
    /// `PGBIN` for the scripts; `None` is their default, Debian's PostgreSQL 15.
    pgbin: Option<PathBuf>,
}

/// The PostgreSQL 17 server binaries that infra/install-deps.sh unpacks (infra/pg/pom.xml).
pub fn pg17_bin() -> PathBuf {
    pg_bin(17)
}

/// The server binaries of PostgreSQL `major` that infra/install-deps.sh unpacks (14, 16, 17,
/// 18 and 13).
pub fn pg_bin(major: u32) -> PathBuf {
    let bin = repo_root().join(format!("infra/pg/{major}/bin"));
    assert!(
        bin.join("postgres").exists(),
        "no PostgreSQL {major} in {}: run infra/install-deps.sh",
        bin.display()
    );
    bin
}

impl PgCluster {
    /// Starts a new cluster on `port` with `extra_opts` (`-c key=value ...`); a leftover
    /// cluster from an aborted run on that port is destroyed first. Its server is the version
    /// under test: `RELAY_TEST_PGBIN` (scripts/test.sh's version matrix sets it with
    /// `RELAY_TEST_PG`), else Debian's PostgreSQL 15.
    pub fn start(port: u16, extra_opts: &str) -> PgCluster {
        let pgbin = std::env::var_os("RELAY_TEST_PGBIN").map(PathBuf::from);
        PgCluster::start_with(pgbin, port, extra_opts)
    }

    /// [`start`](Self::start) with the server binaries in `pgbin` ([`pg17_bin`]).
    pub fn start_with(pgbin: Option<PathBuf>, port: u16, extra_opts: &str) -> PgCluster {
        let cluster = PgCluster { port, pgbin };
        let _ = cluster.script("stop.sh", &["--destroy"], "");
        cluster.run("start.sh", &[], extra_opts);
        cluster
    }

    /// A streaming standby of `primary` on `port`, cloned from its data directory (slots
    /// included) while the primary is stopped (infra/pg/standby.sh), then started with
    /// `extra_opts`.
    pub fn clone_standby(primary: &PgCluster, port: u16, extra_opts: &str) -> PgCluster {
        let standby = PgCluster {
            port,
            pgbin: primary.pgbin.clone(),
        };
        let _ = standby.script("stop.sh", &["--destroy"], "");
        standby.run("standby.sh", &["clone", &primary.port.to_string()], "");
        standby.run("start.sh", &[], extra_opts);
        standby
    }

    /// Promotes this standby: it starts a new timeline.
    pub fn promote(&self) {
        self.run("standby.sh", &["promote"], "");
    }

    /// Stops the server: `fast` (clean) or `immediate` (a crash).
    pub fn stop(&self, mode: &str) {
        let out = self
            .command("stop.sh", &[], "")
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

    /// infra/pg/`name` for this cluster's port and binaries.
    fn command(&self, name: &str, args: &[&str], extra_opts: &str) -> Command {
        let mut cmd = Command::new(repo_root().join("infra/pg").join(name));
        cmd.args(args)
            .env("PGPORT", self.port.to_string())
            .env("PG_EXTRA_OPTS", extra_opts);
        if let Some(bin) = &self.pgbin {
            cmd.env("PGBIN", bin);
        }
        cmd
    }

    fn script(&self, name: &str, args: &[&str], extra_opts: &str) -> std::process::Output {
        self.command(name, args, extra_opts)
            .output()
            .unwrap_or_else(|e| panic!("run infra/pg/{name}: {e}"))
    }

    fn run(&self, name: &str, args: &[&str], extra_opts: &str) {
        let out = self.script(name, args, extra_opts);
        assert!(
            out.status.success(),
            "infra/pg/{name} on port {} failed: {}",
            self.port,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The data directory (infra/pg/start.sh's layout).
    fn data_dir(&self) -> PathBuf {
        super::stack_dir().join(format!("pg-{}", self.port))
    }

    /// Copies the data directory of the stopped server aside (a file-level backup).
    pub fn snapshot(&self) {
        let base = self.data_dir();
        let _ = std::fs::remove_dir_all(base.join("snapshot"));
        let ok = Command::new("cp")
            .args(["-a"])
            .arg(base.join("data"))
            .arg(base.join("snapshot"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot copy {}", base.display());
    }

    /// Puts the copy of [`snapshot`](Self::snapshot) back in place of the stopped server's data
    /// directory: the database goes back in time, with the same system identifier and timeline.
    pub fn restore(&self) {
        let base = self.data_dir();
        std::fs::remove_dir_all(base.join("data")).unwrap();
        let ok = Command::new("cp")
            .args(["-a"])
            .arg(base.join("snapshot"))
            .arg(base.join("data"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot restore {}", base.display());
    }

    /// Connection string without `dbname`.
    pub fn base(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.script("stop.sh", &["--destroy"], "");
    }
}
