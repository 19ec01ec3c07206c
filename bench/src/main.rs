//! `bench`: the benchmark harness of outbox-relay (see scripts/bench.sh and docs/benchmarks.md).
//!
//! `bench suite` runs every workload against every system, one at a time, on the same PostgreSQL
//! and Kafka, and writes `results.json`; `bench poll-relay` is the polling relay baseline (run
//! as its own process so that its CPU and memory can be measured like the others').

mod consumers;
mod drain;
mod floor;
mod kafka;
mod pg;
mod poll_relay;
mod procstat;
mod slot_stats;
mod sources;
mod suite;
mod systems;
mod walsender_latency;

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::{
    suite::{CatchupSpec, CrashSpec, Plan, SteadySpec, Suite},
    systems::{Env, System},
};

#[derive(Parser)]
#[command(about = "outbox-relay benchmark harness")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the workloads and write <out>/results.json.
    Suite(Box<SuiteArgs>),
    /// One catch-up drain of outbox-relay in a database of its own, optionally under a profiler
    /// (scripts/profile-catchup.sh); prints what it measured as JSON.
    Drain(Box<drain::DrainArgs>),
    /// The consumer half side by side: outbox-relay apply vs the Rust and Go inbox recipes
    /// (drain events/s and steady latency; scripts/bench-consumers.sh).
    Consumers(Box<consumers::ConsumersArgs>),
    /// One relay serving many databases against one relay per database, under load, and the
    /// most sources one process serves at 10 events/s each (scripts/bench-sources.sh).
    Sources(Box<sources::SourcesArgs>),
    /// The polling relay baseline (SELECT … FOR UPDATE SKIP LOCKED LIMIT 100, produce, mark).
    PollRelay(poll_relay::PollArgs),
    /// Steady-rate writer alone (for profiling a relay by hand).
    Load {
        #[arg(long, default_value_t = 16432)]
        pg_port: u16,
        #[arg(long, default_value_t = 10_000.0)]
        rate: f64,
        #[arg(long, default_value_t = 30.0)]
        seconds: f64,
        #[arg(long, default_value_t = 200)]
        payload: i32,
    },
    /// Print, every second, where events are: inserted, sent by the walsender, in Kafka.
    Monitor {
        #[arg(long, default_value_t = 16432)]
        pg_port: u16,
        #[arg(long, default_value = "127.0.0.1:29192")]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        slot: String,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// Write a backlog into the outbox (no relay involved).
    Backlog {
        #[arg(long, default_value_t = 16432)]
        pg_port: u16,
        #[arg(long, default_value_t = 100_000)]
        events: i32,
        #[arg(long, default_value_t = 1000)]
        txn_rows: i32,
        #[arg(long, default_value_t = 200)]
        payload: i32,
    },
}

#[derive(clap::Args)]
struct SuiteArgs {
    /// The quick variant (100k-event backlogs, short steady runs).
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    out: PathBuf,
    /// Repository root (infra/debezium lives there).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Scratch directory for configs, logs and Connect offsets.
    #[arg(long)]
    work: PathBuf,
    #[arg(long, default_value_t = 16432)]
    pg_port: u16,
    #[arg(long, default_value = "127.0.0.1:29192")]
    brokers: String,
    #[arg(long, default_value_t = 28083)]
    connect_rest_port: u16,
    #[arg(long)]
    relay_bin: PathBuf,
    /// Pid of the PostgreSQL postmaster (its process tree is measured).
    #[arg(long)]
    postmaster_pid: Option<i32>,
    /// Pid of the Kafka broker (measured).
    #[arg(long)]
    kafka_pid: Option<i32>,
    /// Systems, comma-separated: pg_recvlogical,outbox-relay,debezium-default,debezium-tuned,polling
    /// (the default set), outbox-relay-fenced (outbox-relay with kafka.transactional_id) and
    /// outbox-relay-eos (fenced, with relay.delivery = "exactly-once") and outbox-relay-messages
    /// (a `[[message]]` section, writers emitting logical messages; steady runs only);
    /// kafka-floor-linger0 and kafka-floor-linger5: Kafka's own floor, a bare producer in the
    /// harness writing the same records at the same rate (steady runs only).
    #[arg(long, value_delimiter = ',')]
    systems: Option<Vec<String>>,
    /// Workloads, comma-separated: catchup,steady,saturation,crash,burst (crash: a steady writer,
    /// the system killed with SIGKILL and started again, every committed event looked for in
    /// Kafka; burst: 100,000 events written at 25,000/s (quick 50,000) into a caught-up system,
    /// latency and drain measured like a steady run, pg_recvlogical's as the database's floor).
    /// Default: all but crash and burst with --quick, all of them in a full run.
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    /// Events per catch-up backlog (default 1,000,000; quick 100,000).
    #[arg(long)]
    events: Option<i32>,
    /// Catch-up shapes as TXN_ROWSxPAYLOAD, comma-separated (default 1000x200,1x200,1000x4096;
    /// the 4 KB backlog has a tenth of the events), or TXN_ROWSxPAYLOADxEVENTS (that many events,
    /// e.g. 1000000x200x1000000: one transaction of a million rows).
    #[arg(long, value_delimiter = ',')]
    shapes: Option<Vec<String>>,
    /// Partition counts of the catch-up topic, comma-separated (default 3); every shape is run
    /// with each.
    #[arg(long, value_delimiter = ',')]
    partitions: Option<Vec<i32>>,
    /// Outbox tables (1 to 4) the catch-up backlog is spread over, comma-separated (default 1);
    /// every shape is run with each.
    #[arg(long, value_delimiter = ',')]
    tables: Option<Vec<i32>>,
    /// Steady runs as RATExPAYLOAD, comma-separated (default 1000x200,10000x200,1000x4096; quick
    /// 10000x200).
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<String>>,
    /// Drains of each catch-up backlog by pg_recvlogical and outbox-relay (default: full 2,
    /// quick 3).
    #[arg(long)]
    repeat: Option<usize>,
    /// Seconds of each steady run (default 60; quick 15).
    #[arg(long)]
    steady_seconds: Option<f64>,
    /// Extra TOML appended to outbox-relay's generated config (e.g. "[relay]\nbuffer_events = 4096").
    #[arg(long)]
    relay_extra_toml: Option<PathBuf>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        match cli.command {
            Cmd::PollRelay(a) => poll_relay::run(a).await,
            Cmd::Drain(a) => drain::run(*a).await,
            Cmd::Consumers(a) => consumers::run(*a).await,
            Cmd::Sources(a) => sources::run(*a).await,
            Cmd::Backlog {
                pg_port,
                events,
                txn_rows,
                payload,
            } => {
                pg::prepare(pg_port, &[payload]).await?;
                let c = pg::connect(pg_port, pg::DB).await?;
                let s = pg::backlog(&c, events, txn_rows, payload, "order").await?;
                eprintln!("{events} events in {s:.2} s ({:.0}/s)", events as f64 / s);
                Ok(())
            }
            Cmd::Load {
                pg_port,
                rate,
                seconds,
                payload,
            } => {
                pg::prepare(pg_port, &[payload]).await?;
                let s = pg::steady_load(pg_port, 4, rate, seconds, payload, "order", false).await?;
                eprintln!("{s:?}");
                Ok(())
            }
            Cmd::Monitor {
                pg_port,
                brokers,
                topic,
                slot,
                seconds,
            } => monitor(pg_port, &brokers, &topic, &slot, seconds).await,
            Cmd::Suite(a) => suite(*a).await,
        }
    })
}

async fn monitor(port: u16, brokers: &str, topic: &str, slot: &str, seconds: u64) -> Result<()> {
    let c = pg::connect(port, pg::DB).await?;
    let eo = kafka::EndOffsets::new(brokers, topic)?;
    let q = "SELECT (SELECT n_tup_ins::int8 FROM pg_stat_user_tables WHERE relname = 'outbox'), \
                    (SELECT (pg_current_wal_lsn() - sent_lsn)::int8 FROM pg_stat_replication r \
                       JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1), \
                    (SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::int8 FROM pg_replication_slots \
                      WHERE slot_name = $1)";
    let (mut last_ins, mut last_k) = (0i64, 0i64);
    for i in 0..seconds {
        let r = c.query_one(q, &[&slot]).await?;
        let ins: i64 = r.get::<_, Option<i64>>(0).unwrap_or(0);
        let k = eo.total()?;
        eprintln!(
            "{i:>3}s inserted {:>7}/s  kafka {:>7}/s  not-yet-in-kafka {:>8}  walsender-unsent {:?}  slot-unconfirmed {:?}",
            ins - last_ins,
            k - last_k,
            ins - k,
            r.get::<_, Option<i64>>(1),
            r.get::<_, Option<i64>>(2)
        );
        (last_ins, last_k) = (ins, k);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Ok(())
}

fn plan(a: &SuiteArgs) -> Result<Plan> {
    let quick = a.quick;
    let events = a.events.unwrap_or(if quick { 100_000 } else { 1_000_000 });
    let secs = a.steady_seconds.unwrap_or(if quick { 15.0 } else { 60.0 });
    let warmup = if quick { 3.0 } else { 5.0 };
    let all_systems = match &a.systems {
        Some(v) => v
            .iter()
            .map(|s| System::parse(s))
            .collect::<Result<Vec<_>>>()?,
        None if quick => vec![System::RecvLogical, System::Relay, System::Polling],
        None => System::ALL.to_vec(),
    };
    // Keep the canonical order: the polling relay last (its UPDATEs would otherwise be WAL that
    // the log-based systems have to decode and skip).
    let ordered: Vec<System> = System::CANONICAL
        .iter()
        .copied()
        .filter(|s| all_systems.contains(s))
        .collect();
    let workloads: Vec<String> = a.workloads.clone().unwrap_or_else(|| {
        let mut w = vec!["catchup".to_string(), "steady".to_string()];
        if !quick {
            // The widened scenarios of issue 46 (a burst, crash recovery with a gap check) are
            // part of every full run, as the 100k-row transaction is of its catch-up shapes.
            w.extend(["saturation", "burst", "crash"].map(String::from));
        }
        w
    });
    let has = |w: &str| workloads.iter().any(|x| x == w);
    let pair = |x: &str| -> Result<(f64, i32)> {
        let (a, b) = x
            .split_once('x')
            .with_context(|| format!("{x:?}: expected AxB"))?;
        Ok((a.parse()?, b.parse()?))
    };
    // TXN_ROWSxPAYLOAD[xEVENTS]
    let shape = |x: &str| -> Result<(f64, i32, Option<i32>)> {
        match x.rsplit_once('x') {
            Some((head, n)) if head.contains('x') => {
                let (rows, payload) = pair(head)?;
                Ok((rows, payload, Some(n.parse()?)))
            }
            _ => pair(x).map(|(r, p)| (r, p, None)),
        }
    };
    let partitions = a.partitions.clone().unwrap_or(vec![kafka::PARTITIONS]);
    let tables = a.tables.clone().unwrap_or(vec![1]);
    anyhow::ensure!(
        tables.iter().all(|t| (1..=4).contains(t)),
        "--tables: 1 to 4 (sql/schema.sql has four outbox tables)"
    );
    let mut catchup = Vec::new();
    if has("catchup") {
        let shapes = match &a.shapes {
            Some(v) => v.iter().map(|x| shape(x)).collect::<Result<Vec<_>>>()?,
            None if quick => vec![(1000.0, 200, None), (1.0, 200, None), (1000.0, 4096, None)],
            // Full: one transaction of 100,000 rows as well (issue 46's widened scenarios).
            None => vec![
                (1000.0, 200, None),
                (1.0, 200, None),
                (1000.0, 4096, None),
                (100_000.0, 200, Some(100_000)),
            ],
        };
        // Time budget of the full run (~30 min on 2 cores), unless --shapes says otherwise:
        // the polling relay does not see transaction boundaries (it reads rows), so it skips
        // the single-row backlog; Debezium default skips the 4 KB one (tuned runs it).
        let trim = a.shapes.is_none();
        for (rows, payload, n) in shapes {
            let mut skip = Vec::new();
            // Nor the 100k-row transaction: it polls it at ~900 rows/s (2 min a drain).
            if trim && (rows as i32 == 1 || rows >= 100_000.0) {
                skip.push(System::Polling);
            }
            if trim && payload > 1000 {
                skip.push(System::DbzDefault);
            }
            let events = n.unwrap_or(match (payload > 1000, quick) {
                (false, _) => events,
                (true, false) => events / 10,
                (true, true) => events / 5,
            });
            for &p in &partitions {
                for &t in &tables {
                    catchup.push(CatchupSpec {
                        events,
                        txn_rows: rows as i32,
                        payload,
                        partitions: p,
                        tables: t,
                        skip: skip.clone(),
                    });
                }
            }
        }
    }
    let mut steady = Vec::new();
    if has("steady") {
        let rates = match &a.rates {
            Some(v) => v.iter().map(|x| pair(x)).collect::<Result<Vec<_>>>()?,
            None if quick => vec![(10_000.0, 200)],
            // 5k: below the highest rate every peer sustains on this machine (at 10k Debezium
            // and the polling relay fall behind: docs/benchmarks.md).
            None => vec![(1_000.0, 200), (5_000.0, 200), (10_000.0, 200)],
        };
        for (rate, payload) in rates {
            steady.push(SteadySpec {
                rate,
                payload,
                warmup_s: warmup,
                seconds: secs,
            });
        }
    }
    let saturation_rates = if has("saturation") && ordered.contains(&System::Relay) {
        vec![10_000.0, 20_000.0, 30_000.0]
    } else {
        vec![]
    };
    // Crash recovery (issue 46 item 4): every system that produces, except Kafka's floors
    // (no process to kill) and the messages variant.
    let crash = if has("crash") {
        vec![CrashSpec {
            rate: if quick { 1_000.0 } else { 2_000.0 },
            payload: 200,
            seconds: if quick { 15.0 } else { 30.0 },
            kill_at_s: if quick { 5.0 } else { 10.0 },
            down_s: 3.0,
        }]
    } else {
        vec![]
    };
    // A burst: as many events as a full run's 1k/s steady window holds (quick: half), offered
    // at 25k/s, above what the writer sustains on two cores; the writer's achieved rate is
    // reported beside it. No warm-up: the system is idle and caught up when it starts.
    let burst = if has("burst") {
        vec![SteadySpec {
            rate: 25_000.0,
            payload: 200,
            warmup_s: 0.0,
            seconds: if quick { 2.0 } else { 4.0 },
        }]
    } else {
        vec![]
    };
    let crash_systems: Vec<System> = ordered
        .iter()
        .copied()
        .filter(|s| s.produces() && s.floor_linger_ms().is_none() && !s.emits_messages())
        .collect();
    Ok(Plan {
        quick,
        catchup,
        // The catch-up backlog is one set of outbox rows for every system: no messages.
        catchup_systems: ordered
            .iter()
            .copied()
            .filter(|s| !s.emits_messages() && s.floor_linger_ms().is_none())
            .collect(),
        catchup_repeat: a.repeat.unwrap_or(if quick { 3 } else { 2 }),
        steady,
        // pg_recvlogical's steady run is the database's floor (its latency read from its output).
        // The native peers' latency is read from their records as every producer's is (the
        // writer's `ts` inside their envelope: kafka::payload_ts).
        steady_systems: ordered
            .into_iter()
            .filter(|s| s.produces() || *s == System::RecvLogical)
            .collect(),
        // saturation_rates is only non-empty when outbox-relay is selected.
        saturation_systems: if saturation_rates.is_empty() {
            vec![]
        } else {
            vec![System::Relay, System::RecvLogical]
        },
        saturation_rates,
        saturation_step_s: if quick { 5.0 } else { 8.0 },
        crash,
        crash_systems,
        burst,
    })
}

async fn suite(a: SuiteArgs) -> Result<()> {
    let plan = plan(&a)?;
    std::fs::create_dir_all(&a.out)?;
    std::fs::create_dir_all(&a.work)?;
    let repo = std::fs::canonicalize(&a.repo)?;
    let mut env = Env {
        repo: repo.clone(),
        work: std::fs::canonicalize(&a.work)?,
        pg_port: a.pg_port,
        brokers: a.brokers.clone(),
        relay_bin: std::fs::canonicalize(&a.relay_bin).context("--relay-bin")?,
        relay_bin_b: match std::env::var_os("BENCH_RELAY_B_BIN") {
            Some(p) => Some(std::fs::canonicalize(p).context("BENCH_RELAY_B_BIN")?),
            None => None,
        },
        bench_bin: std::env::current_exe()?,
        connect_rest_port: a.connect_rest_port,
        relay_extra_toml: match &a.relay_extra_toml {
            Some(p) => Some(std::fs::read_to_string(p)?),
            None => None,
        },
        relay_has_http: false,
        database: pg::DB.into(),
        relay_publication: System::Relay.publication().unwrap(),
        relay_wrapper: Vec::new(),
        outbox_tables: 1,
        peers_dir: systems::peers_dir(),
    };
    env.probe_relay()?;
    let mut sizes = vec![200, 4096];
    sizes.extend(plan.catchup.iter().map(|c| c.payload));
    sizes.extend(plan.steady.iter().map(|s| s.payload));
    sizes.sort_unstable();
    sizes.dedup();
    pg::prepare(a.pg_port, &sizes).await?;
    let mut suite = Suite::new(env, a.out.clone(), a.postmaster_pid, a.kafka_pid).await?;
    suite.results.meta = meta(&a, &repo).await;
    suite.save()?;
    let t0 = std::time::Instant::now();
    suite.run(&plan).await?;
    suite.results.meta["suite_seconds"] = t0.elapsed().as_secs_f64().into();
    suite.save()?;
    eprintln!(
        "[bench] done in {:.0} s; {} failure(s); results in {}",
        t0.elapsed().as_secs_f64(),
        suite.results.failures.len(),
        a.out.join("results.json").display()
    );
    Ok(())
}

fn sh(cmd: &str) -> String {
    Command::new("bash")
        .args(["-c", cmd])
        .output()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if s.is_empty() {
                s = String::from_utf8_lossy(&o.stderr).trim().to_string();
            }
            s
        })
        .unwrap_or_default()
}

/// Machine and versions, for the report.
async fn meta(a: &SuiteArgs, repo: &std::path::Path) -> serde_json::Value {
    let pg_version = match pg::connect(a.pg_port, pg::DB).await {
        Ok(c) => pg::server_version(&c).await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let r = repo.display();
    serde_json::json!({
        "date_utc": sh("date -u +%Y-%m-%dT%H:%M:%SZ"),
        "quick": a.quick,
        "cpu_model": sh("lscpu | sed -n 's/^Model name: *//p' | head -1"),
        "cpus": sh("nproc"),
        "mem_total": sh("grep MemTotal /proc/meminfo | awk '{printf \"%.1f GiB\", $2/1048576}'"),
        "kernel": sh("uname -r"),
        "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
        "virtualization": sh("v=$(grep -qw hypervisor /proc/cpuinfo && echo 'virtual machine (hypervisor CPU flag)' || echo 'bare metal?'); c=$(systemd-detect-virt -c 2>/dev/null | grep -v none); echo \"$v${c:+, container: $c}\""),
        "postgres": pg_version,
        "kafka": sh(&format!("ls {r}/infra/kafka/lib | sed -n 's/^kafka-clients-\\(.*\\)\\.jar$/\\1/p'")),
        "debezium": sh(&format!("ls {r}/infra/debezium/plugins/debezium-connector-postgres 2>/dev/null | sed -n 's/^debezium-connector-postgres-\\(.*\\)\\.jar$/\\1/p'")),
        "java": sh("java -version 2>&1 | head -1"),
        "rustc": sh("rustc -V"),
        "librdkafka": "2.12.1 (rdkafka-sys 4.10.0, bundled)",
        "relay_rev": sh(&format!("git -C {r} rev-parse --short HEAD")),
        "relay_bin": a.relay_bin.display().to_string(),
        "relay_source": std::env::var("BENCH_RELAY_SOURCE").unwrap_or_else(|_| "working tree".into()),
        "relay_extra_toml": a.relay_extra_toml.as_ref().and_then(|p| std::fs::read_to_string(p).ok()),
        "load_before": sh("cat /proc/loadavg"),
    })
}
