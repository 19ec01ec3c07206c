//! A Kafka broker of its own (infra/kafka/start.sh), for tests that need listeners or settings
//! the shared broker must not have. Started fresh, stopped and deleted on drop.

use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::repo_root;

pub struct OwnBroker {
    pub port: u16,
}

fn script(name: &str, port: u16, args: &[&str], extra_props: &str) -> std::process::Output {
    Command::new(repo_root().join("infra/kafka").join(name))
        .args(args)
        .env("KAFKA_PORT", port.to_string())
        .env("KAFKA_EXTRA_PROPS", extra_props)
        .output()
        .unwrap_or_else(|e| panic!("run infra/kafka/{name}: {e}"))
}

impl OwnBroker {
    /// Starts a broker whose PLAINTEXT listener is `port` (controller `port + 1`) with
    /// `extra_props` (server properties, one per line, applied last); a leftover from an
    /// aborted run is destroyed first.
    pub fn start(port: u16, extra_props: &str) -> OwnBroker {
        let _ = script("stop.sh", port, &["--destroy"], "");
        let out = script("start.sh", port, &[], extra_props);
        assert!(
            out.status.success(),
            "infra/kafka/start.sh on port {port} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        OwnBroker { port }
    }

    /// SIGKILL: the broker crashes (its data stays).
    pub fn kill9(&self) {
        let out = script("stop.sh", self.port, &["--kill"], "");
        assert!(
            out.status.success(),
            "stop.sh --kill: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the broker again on its data, with its first settings.
    pub fn restart(&self, extra_props: &str) {
        let out = script("start.sh", self.port, &[], extra_props);
        assert!(
            out.status.success(),
            "start.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl OwnBroker {
    /// Slows the broker down until the guard is dropped: it runs for `run` out of every
    /// `run + frozen` (SIGSTOP / SIGCONT), as a broker on a loaded machine, slow to create topics
    /// and answer admin requests, would. Dropping the guard lets it run again.
    pub fn throttle(&self, run: Duration, frozen: Duration) -> Throttle {
        let pidfile = super::stack_dir().join(format!("kafka-{}/kafka.pid", self.port));
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("read {}: {e}", pidfile.display()))
            .trim()
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, pid) = (stop.clone(), pid.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    signal(&pid, "-STOP");
                    std::thread::sleep(frozen);
                    signal(&pid, "-CONT");
                    std::thread::sleep(run);
                }
            })
        };
        Throttle {
            stop,
            thread: Some(thread),
            pid,
        }
    }
}

fn signal(pid: &str, sig: &str) {
    let _ = Command::new("kill").args([sig, pid]).status();
}

/// A throttled broker ([`OwnBroker::throttle`]); dropped, the broker runs at full speed again.
pub struct Throttle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pid: String,
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        signal(&self.pid, "-CONT");
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let _ = script("stop.sh", self.port, &["--destroy"], "");
    }
}

/// A broker of its own whose clients reach it only through a [`Proxy`](super::proxy::Proxy):
/// its advertised listener is the proxy's port, so freezing or cutting the proxy takes Kafka
/// away from the relay without stopping the broker (`port + 2` is its inter-broker listener).
pub async fn behind_proxy(port: u16, proxy_port: u16) -> (OwnBroker, super::proxy::Proxy) {
    let direct = port + 2;
    let broker = OwnBroker::start(
        port,
        &[
            format!(
                "listeners=PLAINTEXT://127.0.0.1:{port},DIRECT://127.0.0.1:{direct},CONTROLLER://127.0.0.1:{}",
                port + 1
            ),
            format!(
                "advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port},DIRECT://127.0.0.1:{direct}"
            ),
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,DIRECT:PLAINTEXT"
                .into(),
            "inter.broker.listener.name=DIRECT".into(),
        ]
        .join("\n"),
    );
    let proxy = super::proxy::Proxy::start(proxy_port, port).await;
    (broker, proxy)
}
