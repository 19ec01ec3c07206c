//! The real `outbox-relay` binary as a child process.

use std::{
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use super::repo_root;

/// Builds the binary once per test run and returns its path.
pub fn binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // A prebuilt binary (e.g. a release build for a soak run) can be given explicitly.
        // An empty one counts as unset.
        if let Some(bin) = std::env::var_os("RELAY_TEST_BIN").filter(|b| !b.is_empty()) {
            return PathBuf::from(bin);
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "outbox-relay", "--bin", "outbox-relay"])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of outbox-relay failed");
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| repo_root().join("target"));
        target.join("debug/outbox-relay")
    })
    .clone()
}

pub struct Relay {
    child: Option<Child>,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl Relay {
    /// Starts `outbox-relay <args> --config <file with config_toml>`.
    pub fn start(name: &str, config_toml: &str) -> Relay {
        Self::start_with(name, config_toml, &["run"], &[])
    }

    /// [`start`](Self::start), then waits (60 s at most) until it logs `streaming_started`.
    pub async fn streaming(name: &str, config_toml: &str) -> Relay {
        let relay = Self::start(name, config_toml);
        relay
            .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
            .await;
        relay
    }

    pub fn start_with(name: &str, config_toml: &str, args: &[&str], env: &[(&str, &str)]) -> Relay {
        let dir = repo_root().join("target/e2e").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("relay.toml");
        // A port of its own unless the test chose one: the default 127.0.0.1:9559 is one port
        // for every test running at once, and a relay that finds it taken logs
        // `http_listen_failed` (an ERROR) and retries every 10 s (87 of the 224 relay logs of
        // one plain CI pass did, 2026-12-07).
        let config_toml = if config_toml.contains("[http]") {
            config_toml.to_string()
        } else {
            format!("{config_toml}\n[http]\nlisten = \"127.0.0.1:0\"\n")
        };
        std::fs::write(&config, &config_toml).unwrap();
        let n = std::fs::read_dir(&dir).unwrap().count();
        let log = dir.join(format!("relay-{n}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .arg("--config")
            .arg(&config)
            .env(
                "RUST_LOG",
                std::env::var("RELAY_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start outbox-relay");
        Relay {
            child: Some(child),
            log,
            config,
        }
    }

    /// Runs `outbox-relay status --config <this relay's config>` and returns its output.
    pub fn status(&self) -> std::process::Output {
        Command::new(binary())
            .args(["status", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run outbox-relay status")
    }

    /// Runs a one-shot subcommand to completion and returns (status, log text).
    pub fn once(
        name: &str,
        config_toml: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (ExitStatus, String) {
        let mut r = Self::start_with(name, config_toml, args, env);
        let status = r
            .wait(Duration::from_secs(60))
            .expect("command did not finish in 60 s");
        (status, r.log_text())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        let deadline = start + timeout;
        while !self.log_text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "relay log never showed {needle:?}; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        super::timing::waited(&format!("relay log {needle}"), start.elapsed());
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        self.signal("-TERM");
        self.wait(timeout)
            .expect("relay did not exit after SIGTERM")
    }

    /// SIGKILL: no chance to confirm anything.
    pub fn kill9(&mut self) {
        self.signal("-KILL");
        let _ = self.wait(Duration::from_secs(10));
    }

    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        let deadline = start + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                super::timing::waited("relay exit", start.elapsed());
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit on its own (panics with its log if it is still running
    /// after `timeout`); returns the exit status and the log.
    pub fn wait_exit(&mut self, timeout: Duration) -> (ExitStatus, String) {
        let status = self
            .wait(timeout)
            .unwrap_or_else(|| panic!("the relay kept running:\n{}", self.log_text()));
        (status, self.log_text())
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Relay {
    /// Four writers (rollbacks and savepoints among their transactions) while this relay
    /// streams `db`: every committed event arrives once in commit order, nothing rolled back
    /// arrives, the slot is confirmed to the end of WAL and a SIGTERM stops the relay with
    /// exit 0. `test` names the figures' line.
    pub async fn delivers_concurrent_writers_once(&mut self, db: &super::TestDb, test: &str) {
        use super::{check, kafka, writer};
        let stats = writer::run_writers(&db.conninfo(), 4, 60, 20).await;
        assert!(
            stats.rolled_back_txns > 0 && stats.rolled_back_savepoints > 0,
            "workload must roll back"
        );
        let got = kafka::consume(
            vec![db.topic("order")],
            Duration::from_secs(90),
            stats.written.len(),
        )
        .await;
        let f = check::check(test, |t| db.topic(t), &stats.written, &got);
        check::assert_absent(&stats.discarded, &got);
        f.assert_exactly_once("");

        let end = db.current_wal_lsn().await;
        db.wait_confirmed(end, Duration::from_secs(30)).await;
        let status = self.terminate(Duration::from_secs(30));
        assert!(
            status.success(),
            "graceful stop must exit 0, got {status}; log:\n{}",
            self.log_text()
        );
    }
}
