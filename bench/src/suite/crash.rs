//! The crash-recovery workload (issue 46 item 4): a steady writer runs, the system is killed
//! with SIGKILL in the middle and started again after a pause, and afterwards every event the
//! database committed is looked for in Kafka: lost, duplicated and foreign records counted from
//! the event ids, and how long the stream took to be fresh again.
//!
//! The ground truth is the outbox table itself (`SELECT id`), never the writer's count: an
//! INSERT whose commit answer was lost would be counted wrong by the writer. Each record's event
//! id is read the way each system writes it (`kafka::event_id`).

use std::collections::{HashMap, HashSet};

use super::*;
use crate::kafka::{Window, event_ids};

impl Suite {
    /// One crash-recovery run of `s`.
    pub(super) async fn crash_run(&mut self, s: System, spec: &CrashSpec) -> Result<CrashResult> {
        log(format!(
            "crash: {} at {} events/s for {} s, SIGKILL at {} s, {} s down",
            s.name(),
            spec.rate,
            spec.seconds,
            spec.kill_at_s,
            spec.down_s
        ));
        anyhow::ensure!(s.produces(), "{} does not produce to Kafka", s.name());
        let (prefix, topic) = self.fresh_run(s).await?;
        let running = self.env.start(s, &prefix, None, None)?;
        if let Some(slot) = s.slot() {
            wait_walsender(&self.ctl, &slot, Duration::from_secs(90)).await?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;

        let t0 = now_us();
        let kill_us = t0 + (spec.kill_at_s * 1e6) as i64;
        let restart_us = kill_us + (spec.down_s * 1e6) as i64;
        // Measured: the events written while the system was down (their latency is the outage
        // plus the restart plus the catch-up). Every record is counted per second of arrival.
        let window = Window {
            t0_us: t0,
            from_us: kill_us,
            to_us: restart_us,
        };
        let consumer = kafka::LatencyConsumer::start(&self.env.brokers, &topic, window)?;
        let load = tokio::spawn(pg::steady_load(
            self.env.pg_port,
            4,
            spec.rate,
            spec.seconds,
            spec.payload,
            "order",
            false,
        ));
        tokio::time::sleep(Duration::from_micros((kill_us - now_us()).max(0) as u64)).await;
        running.kill9()?;
        let killed_at_s = (now_us() - t0) as f64 / 1e6;
        tokio::time::sleep(Duration::from_micros((restart_us - now_us()).max(0) as u64)).await;
        // The same config, slot, topic and (Debezium) offsets file: a restart after a crash.
        let running = self.env.start_again(s, &prefix)?;
        let restarted_at_s = (now_us() - t0) as f64 / 1e6;
        let result = async {
            let load = load.await??;
            // Wait until the consumer has had at least every committed row, then until nothing
            // more arrives for 5 s (duplicates of a replay may still be coming).
            let committed: i64 = self
                .ctl
                .query_one("SELECT count(*) FROM public.outbox", &[])
                .await?
                .get(0);
            let deadline = Instant::now() + Duration::from_secs(180);
            let (mut last, mut since) = (consumer.received(), Instant::now());
            while Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let now = consumer.received();
                if now != last {
                    (last, since) = (now, Instant::now());
                } else if now >= committed as u64 && since.elapsed() > Duration::from_secs(5) {
                    break;
                }
            }
            anyhow::Ok(load)
        }
        .await;
        let peak = procstat::peak_rss_kb(running.pid).unwrap_or(0);
        running.stop()?;
        let collected = consumer.finish()?;
        let load = result?;

        // The truth: every row the database holds (the writer's INSERTs that committed).
        let truth: HashSet<String> = self
            .ctl
            .query("SELECT id::text FROM public.outbox", &[])
            .await?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
        let read = event_ids(&self.env.brokers, &topic)?;
        let mut seen: HashMap<&str, u32> = HashMap::new();
        let mut unreadable = 0u64;
        for id in &read {
            match id {
                Some(id) => *seen.entry(id.as_str()).or_default() += 1,
                None => unreadable += 1,
            }
        }
        let lost = truth
            .iter()
            .filter(|id| !seen.contains_key(id.as_str()))
            .count() as u64;
        let foreign = seen.keys().filter(|id| !truth.contains(**id)).count() as u64;
        let duplicated: u64 = seen.values().map(|&n| u64::from(n.saturating_sub(1))).sum();
        // Fresh again: the first second after the restart from which no record arrived more
        // than 1 s after it was written.
        let restart_sec = restarted_at_s.floor() as usize;
        let stale_until = collected
            .per_sec_lat
            .iter()
            .enumerate()
            .filter(|(_, lat)| lat.iter().any(|&l| l > 1_000_000))
            .map(|(sec, _)| sec + 1)
            .max()
            .unwrap_or(restart_sec);
        let outage = percentiles(collected.payload_lat_us.clone(), false);
        let _ = kafka::delete_topics(&self.env.brokers, &[topic]).await;
        if let Some(slot) = s.slot() {
            pg::drop_slot(&self.ctl, &slot).await?;
        }
        let r = CrashResult {
            workload: "crash",
            system: s,
            rate: spec.rate,
            seconds: spec.seconds,
            killed_at_s,
            restarted_at_s,
            committed: truth.len() as u64,
            records: read.len() as u64,
            distinct: seen.len() as u64,
            lost,
            duplicated,
            foreign,
            unreadable,
            outage_events: outage.count as u64,
            outage_p50_ms: outage.p50_ms,
            outage_max_ms: outage.max_ms,
            fresh_after_restart_s: stale_until.saturating_sub(restart_sec) as f64,
            peak_rss_kb_after_restart: peak,
            load,
            note: (lost > 0 || unreadable > 0 || foreign > 0).then(|| {
                format!(
                    "{lost} committed events not in Kafka, {foreign} ids not in the table, \
                     {unreadable} records without a readable id"
                )
            }),
        };
        log(format!(
            "  {:<17} committed {}, records {}, lost {}, duplicated {}, foreign {}; outage events \
             {} p50 {:.0} ms max {:.0} ms; fresh {:.0} s after the restart",
            s.name(),
            r.committed,
            r.records,
            r.lost,
            r.duplicated,
            r.foreign,
            r.outage_events,
            r.outage_p50_ms,
            r.outage_max_ms,
            r.fresh_after_restart_s
        ));
        Ok(r)
    }
}
