//! The saturation ramp: increasing offered rates while one system runs.

use super::*;

impl Suite {
    /// Saturation ramp: the writer offers increasing rates while `s` runs; for each step, how
    /// much the walsender sent (and, for outbox-relay, how much reached Kafka) and who used the
    /// CPU. Run for outbox-relay and for pg_recvlogical (the walsender alone) in turn.
    pub(super) async fn saturation(
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
