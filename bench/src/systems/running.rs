//! A started system: the process to measure and how to stop it; pg_recvlogical's start.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{Env, System};

/// A started system: the process to measure and how to stop it.
pub struct Running {
    pub pid: i32,
    pub(super) child: Option<Child>,
    /// Debezium: (infra/debezium/stop.sh, CONNECT_DATA).
    pub(super) connect: Option<(PathBuf, PathBuf)>,
}

impl Env {
    /// pg_recvlogical on `slot` streaming the system's publication with pgoutput, up to `endpos`
    /// if given, into `/dev/null`, or into a pipe when `to_pipe` (the steady runs' database floor,
    /// [`crate::walsender_latency`]).
    pub(super) fn recvlogical(
        &self,
        slot: &str,
        endpos: Option<&str>,
        to_pipe: bool,
        stderr: std::fs::File,
    ) -> Result<Child> {
        let mut cmd = Command::new("/usr/lib/postgresql/15/bin/pg_recvlogical");
        let host = super::pg_host();
        cmd.args([
            "-h",
            &host,
            "-U",
            "postgres",
            "-d",
            &self.database,
            "--no-loop",
        ])
        .args(["-p", &self.pg_port.to_string()])
        .args(["--slot", slot, "--start"])
        .args(["-o", "proto_version=1"])
        .args([
            "-o",
            &format!(
                "publication_names={}",
                System::RecvLogical.publication().unwrap()
            ),
        ]);
        if let Some(e) = endpos {
            cmd.args(["--endpos", e]);
        }
        if to_pipe {
            // `-F 0`: no fsync of the output (a pipe), so nothing but the walsender paces it.
            cmd.args(["-f", "-", "-F", "0"]).stdout(Stdio::piped());
        } else {
            cmd.args(["-f", "/dev/null"]).stdout(Stdio::null());
        }
        cmd.stderr(stderr)
            .spawn()
            .context("starting pg_recvlogical")
    }

    /// [`Env::start`] for pg_recvlogical in a steady run: its output piped, returned beside it.
    pub fn start_recvlogical_piped(
        &self,
        prefix: &str,
    ) -> Result<(Running, std::process::ChildStdout)> {
        let stderr = std::fs::File::create(self.work.join(format!("{prefix}-pg_recvlogical.log")))?;
        let slot = System::RecvLogical.slot().unwrap_or_default();
        let mut c = self.recvlogical(&slot, None, true, stderr)?;
        let out = c.stdout.take().context("pg_recvlogical's stdout")?;
        let pid = c.id() as i32;
        Ok((
            Running {
                pid,
                child: Some(c),
                connect: None,
            },
            out,
        ))
    }
}

impl Running {
    /// True while the process runs. Does not reap a child, so the CPU time of an exited child
    /// stays readable (as a zombie) until [`Running::stop`].
    pub fn alive(&self) -> bool {
        crate::procstat::state(self.pid).is_some_and(|s| s != 'Z' && s != 'X')
    }

    pub fn connect_data(&self) -> Option<&Path> {
        self.connect.as_ref().map(|(_, d)| d.as_path())
    }

    /// SIGKILL, as a crash: no shutdown of any kind. Waits until the process is gone (reaps our
    /// own child; Connect's JVM is not ours, so its end is watched in /proc).
    pub fn kill9(mut self) -> Result<()> {
        // SAFETY: kill with a pid we started (the JVM's from Connect's pid file).
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.alive() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "pid {} still alive 30 s after SIGKILL",
                self.pid
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.connect = None;
        Ok(())
    }

    /// Graceful stop (SIGTERM, SIGKILL after 30 s), then waits for the exit.
    pub fn stop(self) -> Result<()> {
        self.stop_within(Duration::from_secs(30))
    }

    /// [`Running::stop`] with SIGKILL after `grace` instead of 30 s.
    pub fn stop_within(mut self, grace: Duration) -> Result<()> {
        if let Some((stop_sh, data)) = self.connect.take() {
            let st = Command::new(stop_sh).env("CONNECT_DATA", &data).status();
            if !matches!(st, Ok(s) if s.success()) {
                // Fall back to a plain SIGTERM of the JVM.
                // SAFETY: kill with a pid we started.
                unsafe { libc::kill(self.pid, libc::SIGTERM) };
            }
            return Ok(());
        }
        if let Some(mut c) = self.child.take() {
            if matches!(c.try_wait(), Ok(None)) {
                // SAFETY: kill with the pid of our own child.
                unsafe { libc::kill(self.pid, libc::SIGTERM) };
                let deadline = Instant::now() + grace;
                while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if matches!(c.try_wait(), Ok(None)) {
                    let _ = c.kill();
                }
            }
            let _ = c.wait();
        }
        Ok(())
    }
}
