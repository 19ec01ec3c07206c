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

#[derive(Debug, Clone, Default, Serialize)]
pub struct Results {
    pub meta: serde_json::Value,
    pub plan: Option<Plan>,
    pub catchup: Vec<CatchupResult>,
    pub steady: Vec<SteadyResult>,
    pub saturation: Vec<SaturationResult>,
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
        pg::reset(&self.ctl).await?;
        Ok(())
    }

    /// One catch-up workload: every system's slot exists (and every Debezium has committed an
    /// offset) before the backlog is written, as if all of them had been running and then
    /// stopped; then each drains the same backlog in turn. pg_recvlogical and outbox-relay drain
    /// it `repeat` times each, alternating, each time from a slot of its own (the machine is
    /// shared: repetitions show the noise and the report takes the median).
    async fn catchup_phase(
        &mut self,
        spec: &CatchupSpec,
        systems: &[System],
        repeat: usize,
    ) -> Result<()> {
        log(format!(
            "catch-up: {} events in {}-row transactions, ~{} B payloads, {} partition(s), {} table(s)",
            spec.events, spec.txn_rows, spec.payload, spec.partitions, spec.tables
        ));
        pg::reset(&self.ctl).await?;
        self.env.outbox_tables = spec.tables.max(1) as usize;
        // (system, repetition, topic prefix, slot), in drain order.
        let mut runs: Vec<(System, usize, String, Option<String>)> = Vec::new();
        for rep in 1..=repeat.max(1) {
            for &s in systems.iter().filter(|s| !spec.skip.contains(s)) {
                let repeated = s == System::RecvLogical || s.is_relay();
                if rep > 1 && !repeated {
                    continue;
                }
                let prefix = self.next_prefix(s);
                let slot = s.slot().map(|base| {
                    if rep > 1 {
                        format!("{base}_{rep}")
                    } else {
                        base
                    }
                });
                runs.push((s, rep, prefix, slot));
            }
        }
        // Debezium and the polling relay after the repeated ones; polling last.
        runs.sort_by_key(|(s, rep, _, _)| match s {
            System::RecvLogical
            | System::Relay
            | System::RelayFenced
            | System::RelayEos
            | System::RelayMessages => (0, *rep),
            System::DbzDefault | System::DbzTuned => (1, 0),
            System::Polling => (2, 0),
            // Not in catch-up runs (plan() leaves them out): no slot, nothing to drain.
            System::Floor0 | System::Floor5 | System::FloorTxn => (3, 0),
        });
        for (s, _, prefix, slot) in &runs {
            if s.produces() {
                let topic = format!("{prefix}.order");
                kafka::create_topics_with(&self.env.brokers, &[topic], spec.partitions).await?;
            }
            match s {
                System::RecvLogical => {
                    let publ = s.publication().unwrap();
                    if !pg::publication_exists(&self.ctl, &publ).await? {
                        pg::create_publication(&self.ctl, &publ, self.env.outbox_tables).await?;
                    }
                    pg::create_slot(&self.ctl, slot.as_deref().unwrap()).await?;
                }
                System::Relay | System::RelayFenced | System::RelayEos | System::RelayMessages => {
                    self.env.relay_setup(prefix, slot.as_deref().unwrap())?
                }
                System::DbzDefault | System::DbzTuned => {
                    self.prime_debezium(*s, prefix, spec).await?
                }
                System::Polling | System::Floor0 | System::Floor5 | System::FloorTxn => {}
            }
        }
        log("writing the backlog");
        let write_s = pg::backlog_spread(
            &self.ctl,
            spec.events,
            spec.txn_rows,
            spec.payload,
            "order",
            spec.tables,
        )
        .await?;
        let endpos = pg::current_lsn(&self.ctl).await?;
        log(format!(
            "backlog written in {write_s:.1} s ({:.0} events/s), end LSN {endpos}",
            spec.events as f64 / write_s
        ));
        for (s, rep, prefix, slot) in runs {
            match self
                .catchup_run(s, &prefix, slot.as_deref(), spec, write_s, &endpos)
                .await
            {
                Ok(mut r) => {
                    r.repetition = rep;
                    if let Some(slot) = &slot {
                        r.slot_stats = slot_stats::read(&self.ctl, slot).await?;
                    }
                    log(format!(
                        "  {:<17}{} {:>8.0} ev/s from start, {:>8.0} ev/s from first record, \
                         total {:.2} s, cpu {:.2} s, peak RSS {} MiB, other load {:.2} cores{}",
                        s.name(),
                        if rep > 1 {
                            format!(" #{rep}")
                        } else {
                            "   ".into()
                        },
                        r.rate_from_start,
                        r.rate_from_first,
                        r.total_s,
                        r.cpu_s,
                        r.peak_rss_kb / 1024,
                        r.other_load_cores(),
                        if r.completed { "" } else { " (INCOMPLETE)" }
                    ));
                    self.results.catchup.push(r);
                }
                Err(e) => {
                    let msg = format!("catch-up {} {spec:?}: {e:#}", s.name());
                    log(&msg);
                    self.results.failures.push(msg);
                }
            }
            if let Some(slot) = &slot {
                pg::drop_slot(&self.ctl, slot).await?;
            }
            if s.produces() {
                let _ = kafka::delete_topics(
                    &self.env.brokers,
                    &[format!("{prefix}.order"), format!("{prefix}.primer")],
                )
                .await;
            }
            self.save()?;
        }
        Ok(())
    }

    /// Starts Debezium once on an empty table so that it creates its slot and publication, relays
    /// one primer event (topic `<prefix>.primer`) and commits an offset; then stops it.
    async fn prime_debezium(&mut self, s: System, prefix: &str, spec: &CatchupSpec) -> Result<()> {
        let primer = format!("{prefix}.primer");
        kafka::create_topics(&self.env.brokers, std::slice::from_ref(&primer)).await?;
        log(format!(
            "  priming {} (slot, publication, offsets)",
            s.name()
        ));
        let r = self.env.start(s, prefix, None, None)?;
        let res = async {
            wait_walsender(&self.ctl, &s.slot().unwrap(), Duration::from_secs(60)).await?;
            pg::insert_one(&self.ctl, spec.payload, "primer").await?;
            let eo = EndOffsets::new(&self.env.brokers, &primer)?;
            let t = Instant::now();
            while eo.total()? < 1 {
                anyhow::ensure!(
                    t.elapsed() < Duration::from_secs(60),
                    "primer event not relayed in 60 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(())
        }
        .await;
        let data = r.connect_data().map(|p| p.to_path_buf());
        r.stop()?;
        res?;
        let offsets = data.unwrap().join("standalone.offsets");
        anyhow::ensure!(
            std::fs::metadata(&offsets)
                .map(|m| m.len() > 0)
                .unwrap_or(false),
            "Debezium stopped without committing an offset ({})",
            offsets.display()
        );
        Ok(())
    }

    async fn catchup_run(
        &mut self,
        s: System,
        prefix: &str,
        slot: Option<&str>,
        spec: &CatchupSpec,
        write_s: f64,
        endpos: &str,
    ) -> Result<CatchupResult> {
        let topic = format!("{prefix}.order");
        let n = spec.events as i64;
        let sampler = self.sampler();
        let eo = if s.produces() {
            Some(EndOffsets::new(&self.env.brokers, &topic)?)
        } else {
            None
        };
        let t_spawn = sampler.now();
        let running = self.env.start(s, prefix, slot, Some(endpos))?;
        sampler.watch("relay", running.pid);
        let mut timeline = Vec::new();
        let mut t_first: Option<f64> = None;
        let mut cpu_first = 0.0;
        let mut walsenders: Vec<i32> = Vec::new();
        let mut last_progress = (Instant::now(), 0i64);
        let mut completed = false;
        let mut note = None;
        let mut total = 0;
        let limit = Duration::from_secs_f64(120.0 + n as f64 / 1000.0);
        let t0 = Instant::now();
        loop {
            // Debezium opens more than one replication connection: watch each walsender.
            if let Some(slot) = slot
                && let Some(pid) = pg::walsender_pid(&self.ctl, slot).await?
                && !walsenders.contains(&pid)
            {
                sampler.watch(&format!("walsender-{pid}"), pid);
                walsenders.push(pid);
            }
            let t = sampler.now();
            if let Some(eo) = &eo {
                total = eo.total()?;
                timeline.push((t - t_spawn, total));
                if total > 0 && t_first.is_none() {
                    t_first = Some(t);
                    cpu_first = procstat::cpu_seconds(running.pid).unwrap_or(0.0);
                }
                if total >= n {
                    completed = true;
                    break;
                }
                if total > last_progress.1 {
                    last_progress = (Instant::now(), total);
                }
            } else if !running.alive() {
                t_first = Some(t_spawn);
                total = n;
                completed = true;
                break;
            }
            // A large source transaction reaches the relay only once PostgreSQL has decoded all
            // of it: allow for that before the first record.
            let stall = Duration::from_secs(90 + spec.txn_rows as u64 / 10_000);
            if last_progress.0.elapsed() > stall || t0.elapsed() > limit {
                note = Some(format!(
                    "stopped waiting: {total} of {n} records after {:.0} s",
                    t0.elapsed().as_secs_f64()
                ));
                break;
            }
            if !running.alive() && s != System::RecvLogical {
                note = Some(format!("process exited early ({total} of {n} records)"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let t_done = sampler.now();
        let cpu_done = procstat::cpu_seconds(running.pid).unwrap_or(0.0);
        let hwm_now = procstat::peak_rss_kb(running.pid);
        // Let the sampler take one more sample, then stop it.
        tokio::time::sleep(Duration::from_millis(120)).await;
        let at_spawn = sampler.at(t_spawn);
        let at_done = sampler.at(t_done + 0.06);
        let peak_rss_kb = hwm_now
            .into_iter()
            .chain(sampler.peak_rss_kb("relay"))
            .max()
            .unwrap_or(0);
        let samples = sampler.finish();
        running.stop()?;
        let t_first = t_first.unwrap_or(t_done);
        let total_s = t_done - t_spawn;
        let drain_s = (t_done - t_first).max(1e-3);
        Ok(CatchupResult {
            workload: "catchup",
            system: s,
            repetition: 1,
            events: spec.events,
            txn_rows: spec.txn_rows,
            payload: spec.payload,
            partitions: spec.partitions,
            tables: spec.tables,
            backlog_write_s: write_s,
            startup_s: t_first - t_spawn,
            total_s,
            rate_from_start: n as f64 / total_s,
            rate_from_first: n as f64 / drain_s,
            cpu_s: cpu_done,
            cpu_drain_s: (cpu_done - cpu_first).max(0.0),
            peak_rss_kb,
            walsender_cpu_s: cpu_prefix_between(&samples, at_spawn.t, at_done.t, "walsender"),
            pg_cpu_s: at_done.pg_cpu - at_spawn.pg_cpu,
            kafka_cpu_s: cpu_between(&at_spawn, &at_done, "kafka"),
            machine_cpu_s: at_done.machine_cpu - at_spawn.machine_cpu,
            bench_cpu_s: cpu_between(&at_spawn, &at_done, "bench"),
            delivered: total,
            completed,
            note,
            slot_stats: None,
            timeline,
        })
    }

    /// One steady-rate run of one system.
    async fn steady_run(&mut self, s: System, spec: &SteadySpec) -> Result<SteadyResult> {
        log(format!(
            "steady: {} at {} events/s, ~{} B payloads, {} s (+{} s warm-up)",
            s.name(),
            spec.rate,
            spec.payload,
            spec.seconds,
            spec.warmup_s
        ));
        anyhow::ensure!(s.produces(), "{} does not produce to Kafka", s.name());
        pg::reset(&self.ctl).await?;
        let prefix = self.next_prefix(s);
        let topic = format!("{prefix}.order");
        kafka::create_topics(&self.env.brokers, std::slice::from_ref(&topic)).await?;
        if s.is_relay() {
            self.env.relay_setup(&prefix, &s.slot().unwrap())?;
        }
        let sampler = self.sampler();
        let sampler_wall0 = now_us() - (sampler.now() * 1e6) as i64;
        let running = self.env.start(s, &prefix, None, None)?;
        sampler.watch("relay", running.pid);
        let result = async {
            if let Some(slot) = s.slot() {
                wait_walsender(&self.ctl, &slot, Duration::from_secs(60)).await?;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let t0 = now_us();
            let from = t0 + (spec.warmup_s * 1e6) as i64;
            let to = from + (spec.seconds * 1e6) as i64;
            let consumer = LatencyConsumer::start(&self.env.brokers, &topic, t0, from, to)?;
            let load = match s.floor_linger_ms() {
                // The floor writes to Kafka itself, from the harness.
                Some(linger) => tokio::spawn(floor_load(
                    self.env.pg_port,
                    self.env.brokers.clone(),
                    topic.clone(),
                    spec.clone(),
                    linger,
                    s.floor_transactional(),
                )),
                None => tokio::spawn(pg::steady_load(
                    self.env.pg_port,
                    4,
                    spec.rate,
                    spec.warmup_s + spec.seconds,
                    spec.payload,
                    "order",
                    s.emits_messages(),
                )),
            };
            // The walsender that streams during the measured window (Debezium opens more than
            // one replication connection while it starts).
            tokio::time::sleep(Duration::from_secs_f64(spec.warmup_s / 2.0)).await;
            if let Some(slot) = s.slot() {
                let pid = wait_walsender(&self.ctl, &slot, Duration::from_secs(10)).await?;
                sampler.watch("walsender", pid);
            }
            let load = load.await??;
            let expected = load.sent - load.failed;
            let drain_deadline = Instant::now() + Duration::from_secs(60);
            while consumer.received() < expected && Instant::now() < drain_deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let collected = consumer.finish()?;
            anyhow::Ok((load, collected, from, to))
        }
        .await;
        let peak = procstat::peak_rss_kb(running.pid)
            .into_iter()
            .chain(sampler.peak_rss_kb("relay"))
            .max()
            .unwrap_or(0);
        let (load, collected, from, to) = match result {
            Ok(v) => v,
            Err(e) => {
                let _ = sampler.finish();
                running.stop()?;
                return Err(e);
            }
        };
        let a = sampler.at((from - sampler_wall0) as f64 / 1e6);
        let b = sampler.at((to - sampler_wall0) as f64 / 1e6);
        let _ = sampler.finish();
        running.stop()?;
        if let Some(slot) = s.slot() {
            pg::drop_slot(&self.ctl, &slot).await?;
        }
        let _ = kafka::delete_topics(&self.env.brokers, &[topic]).await;

        let cpu = cpu_between(&a, &b, "relay");
        let measured_events = collected.measured.max(1);
        let mut note = None;
        let expected = load.sent - load.failed;
        if collected.received < expected {
            note = Some(format!(
                "{} of {} events reached the consumer within 60 s after the load stopped",
                collected.received, expected
            ));
        }
        let per_second = collected
            .per_sec_received
            .iter()
            .zip(collected.per_sec_lat.iter())
            .enumerate()
            .map(|(t, (n, lat))| {
                let p = percentiles(lat.clone(), false);
                PerSecond {
                    t,
                    received: *n,
                    p50_ms: p.p50_ms,
                    p99_ms: p.p99_ms,
                }
            })
            .collect();
        let latency_commit = (!collected.commit_lat_us.is_empty())
            .then(|| percentiles(collected.commit_lat_us.clone(), true));
        let latency_payload = percentiles(collected.payload_lat_us.clone(), true);
        log(format!(
            "  {:<17} p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms; cpu {:.2} s/{:.0} s; \
             peak RSS {} MiB; sent {} received {}",
            s.name(),
            latency_payload.p50_ms,
            latency_payload.p99_ms,
            latency_payload.p999_ms,
            latency_payload.max_ms,
            cpu,
            spec.seconds,
            peak / 1024,
            load.sent,
            collected.received
        ));
        Ok(SteadyResult {
            workload: "steady",
            system: s,
            rate: spec.rate,
            payload: spec.payload,
            warmup_s: spec.warmup_s,
            seconds: spec.seconds,
            received: collected.received,
            measured: collected.measured,
            latency_payload,
            latency_commit,
            cpu_s: cpu,
            cpu_s_per_million: cpu / measured_events as f64 * 1e6,
            peak_rss_kb: peak,
            walsender_cpu_s: cpu_between(&a, &b, "walsender"),
            pg_cpu_s: b.pg_cpu - a.pg_cpu,
            kafka_cpu_s: cpu_between(&a, &b, "kafka"),
            machine_cpu_s: b.machine_cpu - a.machine_cpu,
            bench_cpu_s: cpu_between(&a, &b, "bench"),
            per_second,
            load,
            note,
        })
    }

    /// Saturation ramp: the writer offers increasing rates while `s` runs; for each step, how
    /// much the walsender sent (and, for outbox-relay, how much reached Kafka) and who used the
    /// CPU. Run for outbox-relay and for pg_recvlogical (the walsender alone) in turn.
    async fn saturation(
        &mut self,
        s: System,
        rates: &[f64],
        step_s: f64,
        payload: i32,
    ) -> Result<SaturationResult> {
        log(format!(
            "saturation ramp: {}, {rates:?} events/s, {step_s} s each",
            s.name()
        ));
        pg::reset(&self.ctl).await?;
        let prefix = self.next_prefix(s);
        let topic = format!("{prefix}.order");
        let slot = s.slot().context("saturation needs a log-based system")?;
        if s.produces() {
            kafka::create_topics(&self.env.brokers, std::slice::from_ref(&topic)).await?;
        }
        match s {
            System::Relay | System::RelayFenced | System::RelayEos => {
                self.env.relay_setup(&prefix, &slot)?
            }
            System::RecvLogical => {
                pg::create_publication(&self.ctl, &s.publication().unwrap(), 1).await?;
                pg::create_slot(&self.ctl, &slot).await?;
            }
            _ => anyhow::bail!("saturation is run for outbox-relay and pg_recvlogical only"),
        }
        let sampler = self.sampler();
        let running = self.env.start(s, &prefix, None, None)?;
        sampler.watch("relay", running.pid);
        let res = async {
            let pid = wait_walsender(&self.ctl, &slot, Duration::from_secs(60)).await?;
            sampler.watch("walsender", pid);
            let eo = if s.produces() {
                Some(EndOffsets::new(&self.env.brokers, &topic)?)
            } else {
                None
            };
            let kafka_total = |eo: &Option<EndOffsets>| -> Result<i64> {
                eo.as_ref().map_or(Ok(0), |e| e.total())
            };
            let mut written: i64 = 0;
            let mut steps = Vec::new();
            for &rate in rates {
                let a_t = sampler.now();
                let k0 = kafka_total(&eo)?;
                let (wal0, sent0) = pg::wal_and_sent(&self.ctl, pid).await?;
                let load =
                    pg::steady_load(self.env.pg_port, 4, rate, step_s, payload, "order", false)
                        .await?;
                let n = (load.sent - load.failed) as i64;
                written += n;
                let k1 = kafka_total(&eo)?;
                let (wal1, sent1) = pg::wal_and_sent(&self.ctl, pid).await?;
                let b_t = sampler.now();
                tokio::time::sleep(Duration::from_millis(150)).await;
                let (a, b) = (sampler.at(a_t), sampler.at(b_t));
                let dt = (b.t - a.t).max(1e-3);
                let wal_per_event = (wal1 - wal0) as f64 / n.max(1) as f64;
                let step = SaturationStep {
                    target_rate: rate,
                    relayed_rate: if s.produces() {
                        (k1 - k0) as f64 / (b_t - a_t)
                    } else {
                        f64::NAN
                    },
                    decoded_rate: (sent1 - sent0) as f64 / wal_per_event.max(1.0) / (b_t - a_t),
                    unsent_wal_bytes_end: wal1 - sent1,
                    lag_events_end: if s.produces() { written - k1 } else { -1 },
                    relay_cpu_util: cpu_between(&a, &b, "relay") / dt,
                    walsender_cpu_util: cpu_between(&a, &b, "walsender") / dt,
                    pg_cpu_util: (b.pg_cpu - a.pg_cpu) / dt,
                    kafka_cpu_util: cpu_between(&a, &b, "kafka") / dt,
                    bench_cpu_util: cpu_between(&a, &b, "bench") / dt,
                    machine_cpu_util: (b.machine_cpu - a.machine_cpu) / dt,
                    load,
                };
                log(format!(
                    "  offered {:.0}/s, written {:.0}/s, walsender sent {:.0}/s, in Kafka {:.0}/s, \
                     unsent WAL {:.1} MB; CPU cores: {} {:.2}, walsender {:.2}, postgres {:.2}, \
                     kafka {:.2}, writer+harness {:.2}, machine {:.2}",
                    rate,
                    step.load.achieved_rate,
                    step.decoded_rate,
                    step.relayed_rate,
                    step.unsent_wal_bytes_end as f64 / 1e6,
                    s.name(),
                    step.relay_cpu_util,
                    step.walsender_cpu_util,
                    step.pg_cpu_util,
                    step.kafka_cpu_util,
                    step.bench_cpu_util,
                    step.machine_cpu_util
                ));
                steps.push(step);
                // Let the system catch up before the next step.
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(60) {
                    let (w, snt) = pg::wal_and_sent(&self.ctl, pid).await?;
                    if w - snt < 64 * 1024 && (eo.is_none() || kafka_total(&eo)? >= written) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            anyhow::Ok(steps)
        }
        .await;
        let _ = sampler.finish();
        running.stop()?;
        pg::drop_slot(&self.ctl, &slot).await?;
        if s.produces() {
            let _ = kafka::delete_topics(&self.env.brokers, &[topic]).await;
        }
        Ok(SaturationResult {
            workload: "saturation",
            system: s,
            payload,
            steps: res?,
        })
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
