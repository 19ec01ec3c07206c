//! The benchmark suite: catch-up and steady-rate workloads, one system at a time on the same
//! PostgreSQL and Kafka, results appended to `results.json` after every run.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use serde::Serialize;
use tokio_postgres::Client;

use crate::{
    kafka::{self, EndOffsets, LatencyConsumer},
    pg::{self, LoadStats, now_us},
    procstat::{self, Sampler, cpu_between, cpu_prefix_between},
    slot_stats::{self, SlotStats},
    systems::{Env, System},
};

/// A catch-up workload: `events` rows in transactions of `txn_rows`, payload ~`payload` bytes.
mod catchup;
mod crash;
mod saturation;
mod stages;
mod steady;

#[derive(Debug, Clone, Serialize)]
pub struct CatchupSpec {
    pub events: i32,
    pub txn_rows: i32,
    pub payload: i32,
    /// Partitions of the topic the events go to.
    pub partitions: i32,
    /// Outbox tables the backlog is spread over (row by row; one `[[outbox]]` section each).
    pub tables: i32,
    /// Systems left out of this shape (time budget of the full run).
    pub skip: Vec<System>,
}

/// A steady-rate workload.
#[derive(Debug, Clone, Serialize)]
pub struct SteadySpec {
    pub rate: f64,
    pub payload: i32,
    pub warmup_s: f64,
    pub seconds: f64,
}

/// A crash-recovery workload: a steady writer at `rate` for `seconds`; the system is killed
/// (SIGKILL) `kill_at_s` into it and started again `down_s` later.
#[derive(Debug, Clone, Serialize)]
pub struct CrashSpec {
    pub rate: f64,
    pub payload: i32,
    pub seconds: f64,
    pub kill_at_s: f64,
    pub down_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub quick: bool,
    pub catchup: Vec<CatchupSpec>,
    pub catchup_systems: Vec<System>,
    /// Drains per backlog for pg_recvlogical and outbox-relay (alternating).
    pub catchup_repeat: usize,
    pub steady: Vec<SteadySpec>,
    pub steady_systems: Vec<System>,
    /// Rates of the saturation ramp, each held for `saturation_step_s`.
    pub saturation_rates: Vec<f64>,
    pub saturation_systems: Vec<System>,
    pub saturation_step_s: f64,
    pub crash: Vec<CrashSpec>,
    pub crash_systems: Vec<System>,
    /// Bursts: a short steady run far above the sustained rates, from a caught-up system (its
    /// results in `Results::burst`, measured like a steady run with no warm-up).
    pub burst: Vec<SteadySpec>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatchupResult {
    pub workload: &'static str,
    pub system: System,
    /// 1, 2, … for the repeated drains of pg_recvlogical and outbox-relay.
    pub repetition: usize,
    pub events: i32,
    pub txn_rows: i32,
    pub payload: i32,
    pub partitions: i32,
    pub tables: i32,
    /// Seconds the backlog took to write (shared by every system of the phase).
    pub backlog_write_s: f64,
    /// Process start → first record in Kafka (pg_recvlogical: 0, it has no observable first record).
    pub startup_s: f64,
    /// Process start → last record in Kafka (pg_recvlogical: → exit at the backlog's end LSN).
    pub total_s: f64,
    /// events / total_s.
    pub rate_from_start: f64,
    /// events / (total_s − startup_s).
    pub rate_from_first: f64,
    /// CPU seconds of the relay process from its start to the last record.
    pub cpu_s: f64,
    /// CPU seconds of the relay process from the first to the last record.
    pub cpu_drain_s: f64,
    /// The process's busiest thread (`/proc/<pid>/task/*/comm`) and its CPU seconds from the
    /// start to the last record: for outbox-relay the tokio thread, the one that bounds a
    /// catch-up on a machine with cores to spare.
    pub busiest_thread: Option<String>,
    pub busiest_thread_cpu_s: Option<f64>,
    pub peak_rss_kb: u64,
    /// CPU seconds of the walsender decoding for this system (start → last record).
    pub walsender_cpu_s: f64,
    /// CPU seconds of all PostgreSQL processes (start → last record).
    pub pg_cpu_s: f64,
    /// CPU seconds of the Kafka broker (start → last record).
    pub kafka_cpu_s: f64,
    /// Busy CPU seconds of the whole machine (start → last record); minus the processes above
    /// and the harness, this is what other users of the machine took (noise).
    pub machine_cpu_s: f64,
    /// CPU seconds of the harness itself (monitoring).
    pub bench_cpu_s: f64,
    pub delivered: i64,
    pub completed: bool,
    pub note: Option<String>,
    /// The slot's decoding statistics after the drain (spilled transactions and bytes).
    pub slot_stats: Option<SlotStats>,
    /// (seconds since process start, records in Kafka), every 50 ms.
    pub timeline: Vec<(f64, i64)>,
    /// The first record of the topic after the drain (key, headers, value, the value cut at
    /// 400 bytes): what the system writes for an outbox row, to compare peers' records.
    pub sample_record: Option<String>,
}

impl CatchupResult {
    /// Busy cores of the machine that none of the measured processes used (other users).
    pub fn other_load_cores(&self) -> f64 {
        (self.machine_cpu_s - self.cpu_s - self.pg_cpu_s - self.kafka_cpu_s - self.bench_cpu_s)
            .max(0.0)
            / self.total_s.max(1e-3)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// (quantile, ms) over a log-spaced grid, for the distribution plot.
    pub spectrum: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerSecond {
    pub t: usize,
    pub received: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SteadyResult {
    pub workload: &'static str,
    pub system: System,
    pub rate: f64,
    pub payload: i32,
    pub warmup_s: f64,
    pub seconds: f64,
    pub load: LoadStats,
    pub received: u64,
    pub measured: u64,
    /// now − payload `ts` (writer clock just before the INSERT was handed to the connection).
    pub latency_payload: Percentiles,
    /// now − `outbox-relay.commit-time-us` (PostgreSQL commit time); outbox-relay only.
    pub latency_commit: Option<Percentiles>,
    /// Where the time went (writer → commit → hand-off → consumer); outbox-relay only.
    pub stages: Option<stages::StageBreakdown>,
    /// CPU seconds of the relay process in the measured window.
    pub cpu_s: f64,
    pub cpu_s_per_million: f64,
    pub peak_rss_kb: u64,
    pub walsender_cpu_s: f64,
    pub pg_cpu_s: f64,
    pub kafka_cpu_s: f64,
    /// Busy CPU seconds of the whole machine in the measured window.
    pub machine_cpu_s: f64,
    /// CPU seconds of the harness (writer + consumer) in the measured window.
    pub bench_cpu_s: f64,
    pub per_second: Vec<PerSecond>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SaturationStep {
    pub target_rate: f64,
    pub load: LoadStats,
    /// Records in Kafka at the end of the step minus at its start, per second (NaN for
    /// pg_recvlogical).
    pub relayed_rate: f64,
    /// Events per second the walsender sent (WAL it sent ÷ WAL written per event).
    pub decoded_rate: f64,
    /// WAL written but not yet sent by the walsender at the end of the step.
    pub unsent_wal_bytes_end: i64,
    /// Events written but not yet in Kafka at the end of the step.
    pub lag_events_end: i64,
    pub relay_cpu_util: f64,
    pub walsender_cpu_util: f64,
    pub pg_cpu_util: f64,
    pub kafka_cpu_util: f64,
    pub bench_cpu_util: f64,
    pub machine_cpu_util: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SaturationResult {
    pub workload: &'static str,
    pub system: System,
    pub payload: i32,
    pub steps: Vec<SaturationStep>,
}

/// One crash-recovery run: what the database committed against what Kafka holds.
#[derive(Debug, Clone, Serialize)]
pub struct CrashResult {
    pub workload: &'static str,
    pub system: System,
    pub rate: f64,
    pub seconds: f64,
    /// Seconds from the writer's start to the SIGKILL, and to the new process's start.
    pub killed_at_s: f64,
    pub restarted_at_s: f64,
    /// Rows in the outbox table after the run (the truth).
    pub committed: u64,
    /// Records in the topic, and distinct event ids among them.
    pub records: u64,
    pub distinct: u64,
    /// Committed events with no record in the topic.
    pub lost: u64,
    /// Records beyond the first of their event id (a replay after the restart).
    pub duplicated: u64,
    /// Event ids in the topic that the table does not hold.
    pub foreign: u64,
    /// Records whose event id could not be read.
    pub unreadable: u64,
    /// Events written while the system was down, and their writer-to-consumer latency.
    pub outage_events: u64,
    pub outage_p50_ms: f64,
    pub outage_max_ms: f64,
    /// Seconds from the restart until no record arrived more than 1 s after it was written.
    pub fresh_after_restart_s: f64,
    pub peak_rss_kb_after_restart: u64,
    pub load: LoadStats,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Results {
    pub meta: serde_json::Value,
    pub plan: Option<Plan>,
    pub catchup: Vec<CatchupResult>,
    pub steady: Vec<SteadyResult>,
    pub saturation: Vec<SaturationResult>,
    pub crash: Vec<CrashResult>,
    pub burst: Vec<SteadyResult>,
    pub failures: Vec<String>,
}

pub struct Suite {
    pub env: Env,
    pub out: PathBuf,
    pub postmaster: Option<i32>,
    pub kafka_pid: Option<i32>,
    pub results: Results,
    run_no: usize,
    /// Makes topic names and Connect data directories unique across invocations.
    stamp: i64,
    ctl: Client,
}

fn log(msg: impl AsRef<str>) {
    eprintln!("[bench {}] {}", hms(), msg.as_ref());
}

fn hms() -> String {
    let s = now_us() / 1_000_000;
    format!("{:02}:{:02}:{:02}", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

impl Suite {
    pub async fn new(
        env: Env,
        out: PathBuf,
        postmaster: Option<i32>,
        kafka_pid: Option<i32>,
    ) -> Result<Self> {
        let ctl = pg::connect(env.pg_port, pg::DB).await?;
        Ok(Self {
            env,
            out,
            postmaster,
            kafka_pid,
            results: Results::default(),
            run_no: 0,
            stamp: (now_us() / 1_000_000) % 100_000,
            ctl,
        })
    }

    fn next_prefix(&mut self, s: System) -> String {
        self.run_no += 1;
        s.topic_prefix(self.stamp, self.run_no)
    }

    pub fn save(&self) -> Result<()> {
        let path = self.out.join("results.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&self.results)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    fn sampler(&self) -> Sampler {
        let mut initial = vec![("bench", std::process::id() as i32)];
        if let Some(k) = self.kafka_pid {
            initial.push(("kafka", k));
        }
        Sampler::start(self.postmaster, &initial, Duration::from_millis(100))
    }

    pub async fn run(&mut self, plan: &Plan) -> Result<()> {
        self.results.plan = Some(plan.clone());
        for spec in &plan.catchup {
            if let Err(e) = self
                .catchup_phase(spec, &plan.catchup_systems, plan.catchup_repeat)
                .await
            {
                let msg = format!("catch-up {spec:?}: {e:#}");
                log(&msg);
                self.results.failures.push(msg);
            }
            self.save()?;
        }
        self.env.outbox_tables = 1;
        for spec in &plan.steady {
            for &s in &plan.steady_systems {
                match self.steady_run(s, spec).await {
                    Ok(r) => self.results.steady.push(r),
                    Err(e) => {
                        let msg = format!("steady {} {spec:?}: {e:#}", s.name());
                        log(&msg);
                        self.results.failures.push(msg);
                    }
                }
                self.save()?;
            }
        }
        for &sys in &plan.saturation_systems {
            match self
                .saturation(sys, &plan.saturation_rates, plan.saturation_step_s, 200)
                .await
            {
                Ok(r) => self.results.saturation.push(r),
                Err(e) => {
                    let msg = format!("saturation {}: {e:#}", sys.name());
                    log(&msg);
                    self.results.failures.push(msg);
                }
            }
            self.save()?;
        }
        // pg_recvlogical's burst is the database's floor, as in the steady runs.
        for spec in &plan.burst {
            for &s in &plan.steady_systems {
                match self.steady_run(s, spec).await {
                    Ok(mut r) => {
                        r.workload = "burst";
                        self.results.burst.push(r);
                    }
                    Err(e) => {
                        let msg = format!("burst {} {spec:?}: {e:#}", s.name());
                        log(&msg);
                        self.results.failures.push(msg);
                    }
                }
                self.save()?;
            }
        }
        for spec in &plan.crash {
            for &s in &plan.crash_systems {
                match self.crash_run(s, spec).await {
                    Ok(r) => self.results.crash.push(r),
                    Err(e) => {
                        let msg = format!("crash {} {spec:?}: {e:#}", s.name());
                        log(&msg);
                        self.results.failures.push(msg);
                    }
                }
                self.save()?;
            }
        }
        pg::reset(&self.ctl).await?;
        Ok(())
    }
}

pub(crate) async fn wait_walsender(c: &Client, slot: &str, timeout: Duration) -> Result<i32> {
    let t = Instant::now();
    loop {
        if let Some(pid) = pg::walsender_pid(c, slot).await? {
            return Ok(pid);
        }
        anyhow::ensure!(
            t.elapsed() < timeout,
            "slot {slot} not active after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Exact percentiles of latencies in microseconds (sorted in place).
pub fn percentiles(mut v: Vec<u32>, spectrum: bool) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_unstable();
    let q = |p: f64| -> f64 {
        let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i] as f64 / 1000.0
    };
    let mut spec = Vec::new();
    if spectrum {
        // 0 .. 1 - 1e-5 in log steps of (1 - q), plus the maximum.
        for i in 0..=100 {
            let qq = 1.0 - 10f64.powf(-(i as f64) * 5.0 / 100.0);
            spec.push((qq, q(qq.max(1e-9))));
        }
        spec.push((1.0, q(1.0)));
    }
    Percentiles {
        count: v.len(),
        p50_ms: q(0.50),
        p90_ms: q(0.90),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: q(1.0),
        mean_ms: v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64 / 1000.0,
        spectrum: spec,
    }
}

async fn floor_load(
    pg_port: u16,
    brokers: String,
    topic: String,
    spec: SteadySpec,
    linger_ms: u32,
    transactional: bool,
) -> Result<pg::LoadStats> {
    let seconds = spec.warmup_s + spec.seconds;
    crate::floor::load(
        pg_port,
        &brokers,
        &topic,
        spec.rate,
        seconds,
        spec.payload,
        crate::floor::Kind {
            linger_ms,
            transactional,
        },
    )
    .await
}
