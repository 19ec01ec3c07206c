//! The systems under comparison: how each one is prepared, started and stopped.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

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
    /// A command outbox-relay runs under (e.g. `valgrind --tool=callgrind …`); empty: none.
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

/// A started system: the process to measure and how to stop it.
pub struct Running {
    pub pid: i32,
    child: Option<Child>,
    /// Debezium: (infra/debezium/stop.sh, CONNECT_DATA).
    connect: Option<(PathBuf, PathBuf)>,
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
            "[postgres]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\ndatabase = \"{db}\"\n\
             slot = \"{slot}\"\npublication = \"{publ}\"\n\n[kafka]\nbrokers = \"{}\"\n",
            self.pg_port, self.brokers
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
                let mut cmd = match self.relay_wrapper.split_first() {
                    Some((wrapper, args)) => {
                        let mut c = Command::new(wrapper);
                        c.args(args).arg(bin);
                        c
                    }
                    None => Command::new(bin),
                };
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
                let c = Command::new(self.peer_bin(system)?)
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

impl Env {
    /// pg_recvlogical on `slot` streaming the system's publication with pgoutput, up to `endpos`
    /// if given, into `/dev/null`, or into a pipe when `to_pipe` (the steady runs' database floor,
    /// [`crate::walsender_latency`]).
    fn recvlogical(
        &self,
        slot: &str,
        endpos: Option<&str>,
        to_pipe: bool,
        stderr: std::fs::File,
    ) -> Result<Child> {
        let mut cmd = Command::new("/usr/lib/postgresql/15/bin/pg_recvlogical");
        cmd.args([
            "-h",
            "127.0.0.1",
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
