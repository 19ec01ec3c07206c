//! Where things are and how to reach the servers; each system's config and start.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

use super::{Running, System};

/// Where things are and how to reach the servers.
#[derive(Debug, Clone)]
pub struct Env {
    pub repo: PathBuf,
    pub work: PathBuf,
    pub pg_port: u16,
    pub brokers: String,
    pub relay_bin: PathBuf,
    /// The second relay binary of an A/B (`outbox-relay-b`, `BENCH_RELAY_B_BIN`).
    pub relay_bin_b: Option<PathBuf>,
    pub bench_bin: PathBuf,
    pub connect_rest_port: u16,
    /// Extra TOML merged into the generated outbox-relay config (experiments).
    pub relay_extra_toml: Option<String>,
    /// Whether this outbox-relay build knows the `[http]` section (see [`Env::probe_relay`]).
    pub relay_has_http: bool,
    /// The database holding the outbox (`bench` in the suite).
    pub database: String,
    /// The publication every outbox-relay run uses (created by `outbox-relay setup`).
    pub relay_publication: String,
    /// A command outbox-relay (and outboxx) runs under (e.g. `valgrind --tool=callgrind …`);
    /// empty: none.
    pub relay_wrapper: Vec<String>,
    /// Outbox tables outbox-relay reads (`[[outbox]]` sections: public.outbox, public.outbox_2,
    /// …; every one routed to the same topic).
    pub outbox_tables: usize,
    /// Where `bench/peers/build.sh` built the native peers (`PEERS_DIR`, default
    /// /work/peers-src).
    pub peers_dir: PathBuf,
}

/// [`Env::peers_dir`] from `PEERS_DIR`.
pub fn peers_dir() -> PathBuf {
    std::env::var_os("PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/peers-src"))
}

/// Deep-merges `extra` into `base` (tables merge, everything else replaces).
fn merge(base: &mut toml::Table, extra: toml::Table) {
    for (k, v) in extra {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(e)) => merge(b, e),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

impl Env {
    fn relay_config(&self, prefix: &str, slot: &str, system: System) -> Result<PathBuf> {
        // BENCH_RELAY_B_EXTRA_TOML: TOML merged into the B systems' config only (a setting's
        // A/B in one run; BENCH_RELAY_B_BIN may then name the same binary).
        let b_extra = match system {
            System::RelayB | System::RelayEosB => std::env::var("BENCH_RELAY_B_EXTRA_TOML").ok(),
            _ => None,
        };
        let system = system.config_of();
        let path = self.work.join(format!("{prefix}-relay.toml"));
        let (publ, db) = (&self.relay_publication, &self.database);
        let base = format!(
            "[postgres]\nhost = \"{}\"\nport = {}\nuser = \"postgres\"\ndatabase = \"{db}\"\n\
             slot = \"{slot}\"\npublication = \"{publ}\"\n\n[kafka]\nbrokers = \"{}\"\n",
            super::pg_host(),
            self.pg_port,
            self.brokers
        );
        let outboxes: String = crate::pg::outbox_tables(self.outbox_tables.max(1))
            .iter()
            .map(|t| {
                format!("\n[[outbox]]\ntable = \"{t}\"\ntopic = \"{prefix}.{{aggregatetype}}\"\n")
            })
            .collect();
        let base = base + &outboxes;
        let mut table: toml::Table = base.parse()?;
        if self.relay_has_http {
            // The metrics/health listener on an ephemeral port: never the default 9559, which
            // the test stack's relays may be using.
            table.insert(
                "http".into(),
                toml::Value::Table(toml::toml! { listen = "127.0.0.1:0" }),
            );
        }
        if matches!(system, System::RelayFenced | System::RelayEos) {
            let id = format!("kafka.transactional_id = \"bench-{prefix}\"");
            merge(&mut table, id.parse()?);
        }
        if system == System::RelayEos {
            // A checkpoint topic per run: every run starts like a first deployment, with no
            // checkpoint left by an earlier run's slot of the same name to read and skip by.
            let eos = format!(
                "relay.delivery = \"exactly-once\"\n\
                 kafka.checkpoint_topic = \"bench-{prefix}.checkpoints\""
            );
            merge(&mut table, eos.parse()?);
        }
        if system == System::RelayMessages {
            let messages = format!(
                "[[message]]\nprefix = \"outbox\"\ntopic = \"{prefix}.{{aggregatetype}}\"\n"
            );
            merge(&mut table, messages.parse()?);
        }
        if let Some(extra) = &self.relay_extra_toml {
            let extra: toml::Table = extra.parse().context("--relay-extra-toml")?;
            merge(&mut table, extra);
        }
        if let Some(extra) = b_extra {
            let extra: toml::Table = extra.parse().context("BENCH_RELAY_B_EXTRA_TOML")?;
            merge(&mut table, extra);
        }
        let toml = toml::to_string(&table)?;
        std::fs::write(&path, toml)?;
        Ok(path)
    }

    /// A peer's binary, as `bench/peers/build.sh` leaves it.
    fn peer_bin(&self, system: System) -> Result<PathBuf> {
        let rel = match system {
            System::Outboxx => "outboxx/zig-out/bin/outboxx",
            System::GoPqCdc => "gopqcdc-outbox/gopqcdc-outbox",
            s => bail!("{} is not a peer", s.name()),
        };
        let bin = self.peers_dir.join(rel);
        anyhow::ensure!(
            bin.is_file(),
            "{} not found: run bench/peers/build.sh (PEERS_DIR={})",
            bin.display(),
            self.peers_dir.display()
        );
        Ok(bin)
    }

    /// outboxx's configuration: the system's own slot and publication (created by the harness),
    /// one stream per outbox table, INSERTs only, keyed by `aggregateid`, to `<prefix>.order`.
    /// Its producer settings are built in (acks=all, idempotence, linger 50 ms).
    fn outboxx_config(&self, prefix: &str, slot: &str) -> Result<PathBuf> {
        let path = self.work.join(format!("{prefix}-outboxx.toml"));
        let publ = System::Outboxx.publication().unwrap();
        let mut toml = format!(
            "[metadata]\nversion = \"v0\"\n\n[source]\ntype = \"postgres\"\n\n\
             [source.postgres]\nconnection_env = \"POSTGRES_URL\"\nslot_name = \"{slot}\"\n\
             publication_name = \"{publ}\"\n\n[sink]\ntype = \"kafka\"\n\n[sink.kafka]\n\
             brokers = [\"{}\"]\ntls = false\n",
            self.brokers
        );
        for (i, t) in crate::pg::outbox_tables(self.outbox_tables.max(1))
            .iter()
            .enumerate()
        {
            toml += &format!(
                "\n[[streams]]\nname = \"outbox-{i}\"\n\n[streams.source]\nresource = \"{t}\"\n\
                 operations = [\"insert\"]\n\n[streams.flow]\nformat = \"json\"\n\n\
                 [streams.sink]\ndestination = \"{prefix}.order\"\nrouting_key = \"aggregateid\"\n"
            );
        }
        std::fs::write(&path, toml)?;
        Ok(path)
    }

    /// `bin` run under [`Env::relay_wrapper`] (a profiler), if any: outbox-relay's and, in
    /// `bench drain`, outboxx's.
    fn wrapped(&self, bin: &std::path::Path) -> Command {
        match self.relay_wrapper.split_first() {
            Some((wrapper, args)) => {
                let mut c = Command::new(wrapper);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        }
    }

    fn connect_data(&self, system: System, prefix: &str) -> PathBuf {
        self.work
            .join(format!("connect-{prefix}-{}", system.name()))
    }

    /// Asks the relay binary whether it accepts an `[http]` section (newer builds serve metrics
    /// on 127.0.0.1:9559 by default; the harness moves that to an ephemeral port).
    pub fn probe_relay(&mut self) -> Result<()> {
        let path = self.work.join("probe-relay.toml");
        std::fs::write(&path, "[http]\nlisten = \"127.0.0.1:0\"\n")?;
        let out = Command::new(&self.relay_bin)
            .args(["check-config", "-c"])
            .arg(&path)
            .output()
            .context("running outbox-relay check-config")?;
        self.relay_has_http = out.status.success();
        Ok(())
    }

    /// `outbox-relay setup`: creates the relay's publication and slot.
    pub fn relay_setup(&self, prefix: &str, slot: &str) -> Result<()> {
        let cfg = self.relay_config(prefix, slot, System::Relay)?;
        let out = Command::new(&self.relay_bin)
            .args(["setup", "-c"])
            .arg(&cfg)
            .env("RUST_LOG", "warn")
            .output()
            .context("running outbox-relay setup")?;
        if !out.status.success() {
            bail!(
                "outbox-relay setup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// [`Env::start`] again after a crash, on the same config, slot, topics and (Debezium) data
    /// directory. The first process's logs are kept beside as `<name>.before-restart.log`.
    pub fn start_again(&self, system: System, prefix: &str) -> Result<Running> {
        let head = format!("{prefix}-");
        for entry in std::fs::read_dir(&self.work)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.starts_with(&head) && name.ends_with(".log") && !name.contains(".before-") {
                let kept = path.with_extension("before-restart.log");
                std::fs::rename(&path, kept)?;
            }
        }
        self.start(system, prefix, None, None)
    }

    /// Starts `system`. `endpos`: where pg_recvlogical stops.
    /// Starts `system` on `slot` (default: the system's own). `endpos`: where pg_recvlogical
    /// stops.
    pub fn start(
        &self,
        system: System,
        prefix: &str,
        slot: Option<&str>,
        endpos: Option<&str>,
    ) -> Result<Running> {
        let own_slot = system.slot().unwrap_or_default();
        let slot = slot.unwrap_or(&own_slot);
        let log = |name: &str| -> Result<std::fs::File> {
            Ok(std::fs::File::create(
                self.work.join(format!("{prefix}-{name}.log")),
            )?)
        };
        let (child, pid, connect) = match system {
            // The floor producer runs inside the harness (bench/src/floor.rs): its CPU is the
            // harness's own; there is no process to start or stop.
            System::Floor0 | System::Floor5 | System::FloorTxn => {
                (None, std::process::id() as i32, None)
            }
            System::RecvLogical => {
                let c = self.recvlogical(slot, endpos, false, log("pg_recvlogical")?)?;
                let pid = c.id() as i32;
                (Some(c), pid, None)
            }
            System::Relay
            | System::RelayFenced
            | System::RelayEos
            | System::RelayMessages
            | System::RelayB
            | System::RelayEosB => {
                let cfg = self.relay_config(prefix, slot, system)?;
                let bin = match system {
                    System::RelayB | System::RelayEosB => self
                        .relay_bin_b
                        .as_ref()
                        .context("outbox-relay-b needs BENCH_RELAY_B_BIN (a relay binary)")?,
                    _ => &self.relay_bin,
                };
                let mut cmd = self.wrapped(bin);
                let c = cmd
                    .args(["run", "-c"])
                    .arg(&cfg)
                    // BENCH_RELAY_LOG: the relay's log filter in a bench run (its log file is in
                    // the work dir), e.g. `outbox_relay=debug` for the commit timings.
                    .env(
                        "RUST_LOG",
                        std::env::var("BENCH_RELAY_LOG").unwrap_or_else(|_| "warn".into()),
                    )
                    .stdout(Stdio::null())
                    .stderr(log("outbox-relay")?)
                    .spawn()
                    .context("starting outbox-relay")?;
                let pid = c.id() as i32;
                (Some(c), pid, None)
            }
            System::Polling => {
                let c = Command::new(&self.bench_bin)
                    .arg("poll-relay")
                    .args(["--pg-port", &self.pg_port.to_string()])
                    .args(["--brokers", &self.brokers])
                    .args(["--topic-prefix", prefix])
                    .stdout(Stdio::null())
                    .stderr(log("polling")?)
                    .spawn()
                    .context("starting the polling relay")?;
                let pid = c.id() as i32;
                (Some(c), pid, None)
            }
            System::Outboxx => {
                let cfg = self.outboxx_config(prefix, slot)?;
                let c = self
                    .wrapped(&self.peer_bin(system)?)
                    .arg("--config")
                    .arg(&cfg)
                    // outboxx confirms its LSN every 10 s (a flush, then feedback) and does not
                    // answer the walsender's keepalives in between: under the bench stack's
                    // wal_sender_timeout = 10s a drain longer than that is cut ("terminating
                    // walsender process due to replication timeout"). Its connection gets
                    // PostgreSQL's default, 60 s (wal_sender_timeout is settable per session).
                    .env(
                        "POSTGRES_URL",
                        format!(
                            "postgres://postgres@127.0.0.1:{}/{}?sslmode=disable\
                             &options=-c%20wal_sender_timeout%3D60s",
                            self.pg_port, self.database
                        ),
                    )
                    .stdout(log("outboxx-stdout")?)
                    .stderr(log("outboxx")?)
                    .spawn()
                    .context("starting outboxx")?;
                let pid = c.id() as i32;
                (Some(c), pid, None)
            }
            System::GoPqCdc => {
                let tables: Vec<String> = crate::pg::outbox_tables(self.outbox_tables.max(1))
                    .iter()
                    .map(|t| t.trim_start_matches("public.").to_string())
                    .collect();
                // go-pq-cdc serves Prometheus metrics on a port of its own: a free one.
                let metric_port = std::net::TcpListener::bind("127.0.0.1:0")?
                    .local_addr()?
                    .port();
                let c = Command::new(self.peer_bin(system)?)
                    .args(["-port", &self.pg_port.to_string()])
                    .args(["-db", &self.database])
                    .args(["-table", &tables.join(",")])
                    .args(["-slot", slot])
                    .args(["-publication", &system.publication().unwrap()])
                    .args(["-topic", &format!("{prefix}.order")])
                    .args(["-brokers", &self.brokers])
                    .args(["-metric-port", &metric_port.to_string()])
                    .stdout(Stdio::null())
                    .stderr(log("go-pq-cdc-kafka")?)
                    .spawn()
                    .context("starting go-pq-cdc-kafka")?;
                let pid = c.id() as i32;
                (Some(c), pid, None)
            }
            System::DbzDefault | System::DbzTuned => {
                let data = self.connect_data(system, prefix);
                let props = if system == System::DbzDefault {
                    "connector-default.properties"
                } else {
                    "connector-tuned.properties"
                };
                let dir = self.repo.join("infra/debezium");
                let out = Command::new(dir.join("start.sh"))
                    .arg(dir.join(props))
                    .env("CONNECT_DATA", &data)
                    .env("CONNECT_REST_PORT", self.connect_rest_port.to_string())
                    .env("KAFKA_BOOTSTRAP", &self.brokers)
                    .env("PGPORT", self.pg_port.to_string())
                    .env("DBZ_SLOT", slot)
                    .env("DBZ_PUBLICATION", system.publication().unwrap())
                    .env("DBZ_TOPIC_PREFIX", prefix)
                    .stderr(Stdio::inherit())
                    .output()
                    .context("running infra/debezium/start.sh")?;
                if !out.status.success() {
                    bail!("infra/debezium/start.sh failed (see {})", data.display());
                }
                let pid: i32 = String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .context("pid from start.sh")?;
                (None, pid, Some((dir.join("stop.sh"), data)))
            }
        };
        Ok(Running {
            pid,
            child,
            connect,
        })
    }
}
