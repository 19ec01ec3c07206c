//! `bench sources`: one relay serving many databases (`[source.<name>]`) against one relay per
//! database, under load, in one run on one PostgreSQL and one Kafka (issue 29; the idle side,
//! RSS and idle CPU, is scripts/bench-sources.sh's first part).
//!
//! * **side by side**: `--n` databases (default 50), `--rate` events/s in total (default 1,000)
//!   dealt evenly over them by one open-loop writer (one connection per database); served once
//!   by one process with `--n` sources, once by `--n` single-database processes. Per mode: p50
//!   and p99 from the writer's hand-off to the record's arrival at an independent consumer
//!   (the steady workload's measure), the relay processes' CPU per event and in total, their
//!   walsenders' CPU, and RSS.
//! * **ladder**: one process with 1, then more sources (`--ladder`), `--per-source-rate` events/s
//!   into each (default 10): p99 per step, and the largest step whose p99 is within 2x the
//!   one-source step's (measured in the same run).
//!
//! Every step starts from empty outboxes, new slots and a topic of its own, and waits until
//! every slot is streaming before the warm-up starts.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, ensure};
use tokio_postgres::Client;

use crate::{
    kafka::{self, LatencyConsumer, Window},
    pg::{self, now_us},
    procstat,
    suite::percentiles,
};

#[derive(clap::Args)]
pub struct SourcesArgs {
    #[arg(long, default_value_t = 16432)]
    pg_port: u16,
    #[arg(long, default_value = "127.0.0.1:29192")]
    brokers: String,
    /// The outbox-relay binary.
    #[arg(long)]
    relay: PathBuf,
    /// Databases of the side-by-side run (0 skips it).
    #[arg(long, default_value_t = 50)]
    n: usize,
    /// Events/s of the side-by-side run, in total.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Source counts of the ladder, comma-separated; the first is the reference (empty skips it).
    #[arg(long, default_value = "1,25,50,100,150", value_delimiter = ',')]
    ladder: Vec<usize>,
    /// Events/s into each database in the ladder.
    #[arg(long, default_value_t = 10.0)]
    per_source_rate: f64,
    /// Measured seconds of each step (after the warm-up).
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Warm-up seconds of each step.
    #[arg(long, default_value_t = 10.0)]
    warmup: f64,
    /// Where the configs and the relays' logs go.
    #[arg(long, default_value = "target/bench-results/sources/work")]
    work: PathBuf,
    /// Where the results (results.json, report.md) go.
    #[arg(long, default_value = "target/bench-results/sources")]
    out: PathBuf,
}

/// How the step's databases are served.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize)]
enum Mode {
    /// One process with a `[source.<name>]` per database.
    OneProcess,
    /// One single-database process per database.
    ProcessPerDatabase,
}

#[derive(Debug, serde::Serialize)]
struct Row {
    step: &'static str,
    mode: Mode,
    sources: usize,
    rate_total: f64,
    events_measured: usize,
    events_written: u64,
    events_received: u64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    relay_cpu_percent: f64,
    relay_cpu_us_per_event: f64,
    walsenders_cpu_percent: f64,
    relay_rss_mib: f64,
    /// The relay processes' threads by name (numbers stripped), busiest first.
    threads: Vec<Threads>,
}

/// The threads of one name in the relay processes over the measured window (a thread that
/// ended within it, such as an idle blocking-pool thread, is not counted).
#[derive(Debug, serde::Serialize)]
struct Threads {
    name: String,
    count: usize,
    cpu_percent: f64,
    cpu_us_per_event: f64,
    switches_per_event: f64,
}

const DB_PREFIX: &str = "bench_src_";
const PAYLOAD: i32 = 200;

fn db(i: usize) -> String {
    format!("{DB_PREFIX}{i}")
}

pub async fn run(a: SourcesArgs) -> Result<()> {
    std::fs::create_dir_all(&a.work)?;
    std::fs::create_dir_all(&a.out)?;
    let ctl = pg::connect(a.pg_port, "postgres").await?;
    let most = a.ladder.iter().copied().max().unwrap_or(0).max(a.n);
    let limits: i64 = ctl
        .query_one(
            "SELECT least(current_setting('max_wal_senders')::int, \
                          current_setting('max_replication_slots')::int)::int8",
            &[],
        )
        .await?
        .get(0);
    ensure!(
        limits >= most as i64 + 2,
        "{most} sources need as many walsenders and slots; the server allows {limits} \
         (start it with -c max_wal_senders=N -c max_replication_slots=N, as \
         scripts/bench-sources.sh does)"
    );
    eprintln!("[bench sources] preparing {most} databases");
    for i in 0..most {
        pg::prepare_in(a.pg_port, &db(i), &[PAYLOAD]).await?;
    }
    let mut rows = Vec::new();
    if a.n > 0 {
        for mode in [Mode::OneProcess, Mode::ProcessPerDatabase] {
            rows.push(step(&a, &ctl, "side by side", mode, a.n, a.rate).await?);
        }
    }
    for &n in &a.ladder {
        let rate = a.per_source_rate * n as f64;
        rows.push(step(&a, &ctl, "ladder", Mode::OneProcess, n, rate).await?);
    }
    for i in 0..most {
        let _ = ctl
            .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", db(i)))
            .await;
    }
    let report = report(&a, &rows);
    std::fs::write(a.out.join("report.md"), &report)?;
    std::fs::write(
        a.out.join("results.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    println!("{report}");
    Ok(())
}

/// The relays of one step, stopped (SIGTERM, then SIGKILL) when dropped.
struct Relays(Vec<Child>);

impl Drop for Relays {
    fn drop(&mut self) {
        for c in &self.0 {
            // SAFETY: kill(2) on a child we started.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in &mut self.0 {
            for _ in 0..100 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn step(
    a: &SourcesArgs,
    ctl: &Client,
    step: &'static str,
    mode: Mode,
    n: usize,
    rate: f64,
) -> Result<Row> {
    eprintln!(
        "[bench sources] {step}: {n} databases, {mode:?}, {rate} events/s for {} s (+{} s warm-up)",
        a.seconds, a.warmup
    );
    let stamp = now_us();
    let topic_prefix = format!("bench-src-{stamp}");
    let topic = format!("{topic_prefix}.order");
    kafka::create_topics(&a.brokers, std::slice::from_ref(&topic)).await?;
    let slot = |i: usize| format!("bench_src_{stamp}_{i}");
    for i in 0..n {
        let c = pg::connect(a.pg_port, &db(i)).await?;
        c.batch_execute("TRUNCATE public.outbox").await?;
    }
    let relays = Relays(start_relays(a, mode, n, &topic_prefix, &slot)?);
    let result = async {
        let walsenders = wait_streaming(ctl, &format!("bench_src_{stamp}_"), n, &relays).await?;
        let t0 = now_us();
        let from = t0 + (a.warmup * 1e6) as i64;
        let to = from + (a.seconds * 1e6) as i64;
        let window = Window {
            t0_us: t0,
            from_us: from,
            to_us: to,
        };
        let consumer = LatencyConsumer::start(&a.brokers, &topic, window)?;
        let dbs: Vec<String> = (0..n).map(db).collect();
        let seconds = a.warmup + a.seconds;
        let port = a.pg_port;
        let load = tokio::spawn(async move {
            pg::steady_load_over(port, &dbs, rate, seconds, PAYLOAD, "order", false).await
        });
        let pids: Vec<i32> = relays.0.iter().map(|c| c.id() as i32).collect();
        sleep_until(from).await;
        let (r0, w0, t0) = (cpu(&pids), cpu(&walsenders), threads(&pids));
        sleep_until(to).await;
        let (r1, w1, t1) = (cpu(&pids), cpu(&walsenders), threads(&pids));
        let rss_kb: u64 = pids.iter().filter_map(|&p| procstat::peak_rss_kb(p)).sum();
        let load = load.await??;
        let expected = load.sent - load.failed;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while consumer.received() < expected && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let collected = consumer.finish()?;
        ensure!(
            collected.received >= expected,
            "{} of {expected} events reached Kafka within 60 s after the load stopped",
            collected.received
        );
        let p = percentiles(collected.payload_lat_us, false);
        let secs = (to - from) as f64 / 1e6;
        let events = p.count.max(1) as f64;
        let mut threads: Vec<Threads> = t1
            .into_iter()
            .map(|(name, (count, cpu1, sw1))| {
                let (_, cpu0, sw0) = t0.get(&name).copied().unwrap_or_default();
                Threads {
                    name,
                    count,
                    cpu_percent: (cpu1 - cpu0) / secs * 100.0,
                    cpu_us_per_event: (cpu1 - cpu0) / events * 1e6,
                    switches_per_event: sw1.saturating_sub(sw0) as f64 / events,
                }
            })
            .collect();
        threads.sort_by(|a, b| b.cpu_percent.total_cmp(&a.cpu_percent));
        let row = Row {
            step,
            mode,
            sources: n,
            rate_total: rate,
            events_measured: p.count,
            events_written: expected,
            events_received: collected.received,
            p50_ms: p.p50_ms,
            p99_ms: p.p99_ms,
            p999_ms: p.p999_ms,
            relay_cpu_percent: (r1 - r0) / secs * 100.0,
            relay_cpu_us_per_event: (r1 - r0) / p.count.max(1) as f64 * 1e6,
            walsenders_cpu_percent: (w1 - w0) / secs * 100.0,
            relay_rss_mib: rss_kb as f64 / 1024.0,
            threads,
        };
        eprintln!(
            "[bench sources]   p50 {:.1} ms, p99 {:.1} ms, relay {:.1} % ({:.0} µs/event), \
             walsenders {:.1} %; threads: {}",
            row.p50_ms,
            row.p99_ms,
            row.relay_cpu_percent,
            row.relay_cpu_us_per_event,
            row.walsenders_cpu_percent,
            busiest(&row.threads, "; ", " % ", " µs/event ", " switches/event")
        );
        anyhow::Ok(row)
    }
    .await;
    drop(relays);
    for i in 0..n {
        let _ = ctl
            .execute("SELECT pg_drop_replication_slot($1)", &[&slot(i)])
            .await;
    }
    let _ = kafka::delete_topics(&a.brokers, &[topic]).await;
    result
}

fn start_relays(
    a: &SourcesArgs,
    mode: Mode,
    n: usize,
    topic_prefix: &str,
    slot: &dyn Fn(usize) -> String,
) -> Result<Vec<Child>> {
    // The shared sections; `own` ends up in `[postgres]` (a single database's own keys).
    let top = |own: &str| {
        format!(
            "[postgres]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\ncreate_slot = true\n{own}\n\
             [kafka]\nbrokers = \"{}\"\n\n[[outbox]]\ntable = \"public.outbox\"\n\
             topic = \"{topic_prefix}.{{aggregatetype}}\"\n\n",
            a.pg_port, a.brokers
        )
    };
    let own = |i: usize| {
        format!(
            "database = \"{}\"\nslot = \"{}\"\npublication = \"bench_src\"\n",
            db(i),
            slot(i)
        )
    };
    let configs: Vec<String> = match mode {
        Mode::OneProcess => {
            let mut c = top("") + "[http]\nlisten = \"127.0.0.1:0\"\n\n";
            for i in 0..n {
                c += &format!("[source.s{i}.postgres]\n{}\n", own(i));
            }
            vec![c]
        }
        Mode::ProcessPerDatabase => (0..n)
            .map(|i| top(&own(i)) + "[http]\nenabled = false\n")
            .collect(),
    };
    let mut children = Vec::new();
    for (k, config) in configs.iter().enumerate() {
        let path = a.work.join(format!("{topic_prefix}-{k}.toml"));
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(a.work.join(format!("{topic_prefix}-{k}.log")))?;
        let child = Command::new(&a.relay)
            .args(["run", "--config"])
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", a.relay.display()))?;
        children.push(child);
    }
    Ok(children)
}

/// Waits until the `n` slots named `<like>*` are streaming; returns their walsenders' pids.
async fn wait_streaming(ctl: &Client, like: &str, n: usize, relays: &Relays) -> Result<Vec<i32>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let pids: Vec<i32> = ctl
            .query(
                "SELECT active_pid FROM pg_replication_slots \
                  WHERE starts_with(slot_name, $1) AND active_pid IS NOT NULL",
                &[&like],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if pids.len() >= n {
            return Ok(pids);
        }
        ensure!(
            relays
                .0
                .iter()
                .all(|c| procstat::state(c.id() as i32).is_some()),
            "a relay exited before its slots were streaming (its log is in the work directory)"
        );
        ensure!(
            tokio::time::Instant::now() < deadline,
            "only {} of {n} slots streaming after 120 s",
            pids.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Per thread name (digits stripped) over `pids`: (threads, CPU seconds, context switches).
fn threads(pids: &[i32]) -> std::collections::BTreeMap<String, (usize, f64, u64)> {
    let mut out = std::collections::BTreeMap::<String, (usize, f64, u64)>::new();
    for &pid in pids {
        for (name, user, system, switches) in procstat::threads(pid) {
            let name: String = name.chars().filter(|c| !c.is_ascii_digit()).collect();
            let e = out.entry(name).or_default();
            e.0 += 1;
            e.1 += user + system;
            e.2 += switches;
        }
    }
    out
}

/// The six busiest thread names: name, count, CPU %, µs per event and context switches per
/// event, with the given separators.
fn busiest(threads: &[Threads], sep: &str, a: &str, b: &str, c: &str) -> String {
    threads
        .iter()
        .take(6)
        .map(|t| {
            format!(
                "{} x{} {:.1}{a}{:.0}{b}{:.1}{c}",
                t.name, t.count, t.cpu_percent, t.cpu_us_per_event, t.switches_per_event
            )
        })
        .collect::<Vec<_>>()
        .join(sep)
}

fn cpu(pids: &[i32]) -> f64 {
    pids.iter().filter_map(|&p| procstat::cpu_seconds(p)).sum()
}

async fn sleep_until(t_us: i64) {
    let wait = (t_us - now_us()).max(0) as u64;
    tokio::time::sleep(Duration::from_micros(wait)).await;
}

fn report(a: &SourcesArgs, rows: &[Row]) -> String {
    let mut s = String::from(
        "| step | mode | sources | events/s | measured | p50 ms | p99 ms | p99.9 ms | relay CPU % | \
         relay CPU µs/event | walsenders CPU % | relay RSS MiB |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.0} |\n",
            r.step,
            match r.mode {
                Mode::OneProcess => "one process",
                Mode::ProcessPerDatabase => "process per database",
            },
            r.sources,
            r.rate_total,
            r.events_measured,
            r.p50_ms,
            r.p99_ms,
            r.p999_ms,
            r.relay_cpu_percent,
            r.relay_cpu_us_per_event,
            r.walsenders_cpu_percent,
            r.relay_rss_mib
        );
    }
    s += "\nThe relay's threads (CPU % of one core / µs per event / context switches per event; \
          the six busiest names):\n\n";
    for r in rows {
        s += &format!(
            "- {} {} sources: {}\n",
            r.step,
            r.sources,
            busiest(&r.threads, ", ", " / ", " / ", "")
        );
    }
    let side: Vec<&Row> = rows.iter().filter(|r| r.step == "side by side").collect();
    if let [one, many] = side[..] {
        s += &format!(
            "\nSide by side, {} databases at {:.0} events/s: one process / process per database: \
             CPU per event {:.2}x, p99 {:.2}x, RSS {:.2}x.\n",
            one.sources,
            one.rate_total,
            one.relay_cpu_us_per_event / many.relay_cpu_us_per_event.max(1e-9),
            one.p99_ms / many.p99_ms.max(1e-9),
            one.relay_rss_mib / many.relay_rss_mib.max(1e-9),
        );
    }
    let ladder: Vec<&Row> = rows.iter().filter(|r| r.step == "ladder").collect();
    if let Some(first) = ladder.first() {
        let bound = 2.0 * first.p99_ms;
        let within: Vec<usize> = ladder
            .iter()
            .take_while(|r| r.p99_ms <= bound)
            .map(|r| r.sources)
            .collect();
        s += &format!(
            "\nLadder at {} events/s per source: the {}-source p99 is {:.1} ms; 2x is {:.1} ms; \
             every step up to {} sources is within it{}.\n",
            a.per_source_rate,
            first.sources,
            first.p99_ms,
            bound,
            within.last().copied().unwrap_or(0),
            match ladder.iter().find(|r| r.p99_ms > bound) {
                Some(r) => format!(" ({} sources: p99 {:.1} ms)", r.sources, r.p99_ms),
                None => " (the largest step measured)".into(),
            }
        );
    }
    s
}
