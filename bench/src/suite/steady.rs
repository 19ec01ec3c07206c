//! The steady-rate workload: an open-loop writer at a fixed rate, latency measured by an
//! independent consumer (for pg_recvlogical, the database's floor, by a reader of its output).

use super::*;
use crate::{
    kafka::{Collected, Window},
    walsender_latency::WalsenderLatency,
};

/// Where a steady run's latencies are read: Kafka, or pg_recvlogical's output.
enum Latency {
    Kafka(LatencyConsumer),
    Walsender(WalsenderLatency),
}

impl Latency {
    fn received(&self) -> u64 {
        match self {
            Latency::Kafka(c) => c.received(),
            Latency::Walsender(w) => w.received(),
        }
    }

    fn finish(self) -> Result<Collected> {
        match self {
            Latency::Kafka(c) => c.finish(),
            Latency::Walsender(w) => w.finish(),
        }
    }
}

impl Suite {
    /// An empty outbox, and `s` prepared for a live run of its own: topic `<prefix>.order`, its
    /// slot and publication (outbox-relay's by its `setup`; pg_recvlogical's and the native
    /// peers' by the harness, as in the catch-up; Debezium makes its own). Returns (prefix,
    /// topic).
    pub(super) async fn fresh_run(&mut self, s: System) -> Result<(String, String)> {
        pg::reset(&self.ctl).await?;
        let prefix = self.next_prefix(s);
        let topic = format!("{prefix}.order");
        if s.produces() {
            kafka::create_topics(&self.env.brokers, std::slice::from_ref(&topic)).await?;
        }
        if s.is_relay() {
            self.env.relay_setup(&prefix, &s.slot().unwrap())?;
        }
        if s == System::RecvLogical || s.is_peer() {
            let publ = s.publication().unwrap();
            if !pg::publication_exists(&self.ctl, &publ).await? {
                pg::create_publication(&self.ctl, &publ, 1).await?;
            }
            pg::create_slot(&self.ctl, &s.slot().unwrap()).await?;
        }
        Ok((prefix, topic))
    }

    /// One steady-rate run of one system.
    pub(super) async fn steady_run(
        &mut self,
        s: System,
        spec: &SteadySpec,
    ) -> Result<SteadyResult> {
        log(format!(
            "steady: {} at {} events/s, ~{} B payloads, {} s (+{} s warm-up)",
            s.name(),
            spec.rate,
            spec.payload,
            spec.seconds,
            spec.warmup_s
        ));
        // pg_recvlogical is the database's floor: the walsender's share of the latency, read
        // from its output instead of from Kafka (bench/src/walsender_latency.rs).
        let database_floor = s == System::RecvLogical;
        anyhow::ensure!(
            s.produces() || database_floor,
            "{} does not produce to Kafka",
            s.name()
        );
        let (prefix, topic) = self.fresh_run(s).await?;
        let sampler = self.sampler();
        let sampler_wall0 = now_us() - (sampler.now() * 1e6) as i64;
        let (running, recv_out) = if database_floor {
            let (r, out) = self.env.start_recvlogical_piped(&prefix)?;
            (r, Some(out))
        } else {
            (self.env.start(s, &prefix, None, None)?, None)
        };
        sampler.watch("relay", running.pid);
        let result = async {
            if let Some(slot) = s.slot() {
                wait_walsender(&self.ctl, &slot, Duration::from_secs(60)).await?;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let t0 = now_us();
            let from = t0 + (spec.warmup_s * 1e6) as i64;
            let to = from + (spec.seconds * 1e6) as i64;
            let window = Window {
                t0_us: t0,
                from_us: from,
                to_us: to,
            };
            let consumer = match recv_out {
                Some(out) => Latency::Walsender(WalsenderLatency::start(out, window)),
                None => Latency::Kafka(LatencyConsumer::start(&self.env.brokers, &topic, window)?),
            };
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
            anyhow::Ok((load, consumer, from, to))
        }
        .await;
        let peak = procstat::peak_rss_kb(running.pid)
            .into_iter()
            .chain(sampler.peak_rss_kb("relay"))
            .max()
            .unwrap_or(0);
        let (load, consumer, from, to) = match result {
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
        // pg_recvlogical's reader ends with its output: stop it first.
        running.stop()?;
        let collected = consumer.finish()?;
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
        let stages = super::stages::breakdown(&collected.stages);
        if let Some(b) = &stages {
            log(format!(
                "  {:<17} p50 / p99 / slowest-1% mean, ms: to commit {:.1} / {:.1} / {:.1}, \
                 commit to {cut} {:.1} / {:.1} / {:.1}, {cut} to consumer {:.1} / {:.1} / {:.1}",
                "",
                b.to_commit.p50_ms,
                b.to_commit.p99_ms,
                b.to_commit.tail_mean_ms,
                b.to_produce.p50_ms,
                b.to_produce.p99_ms,
                b.to_produce.tail_mean_ms,
                b.to_consumer.p50_ms,
                b.to_consumer.p99_ms,
                b.to_consumer.tail_mean_ms,
                cut = b.cut,
            ));
        }
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
            stages,
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
}
