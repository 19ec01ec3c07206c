//! The catch-up workload: a backlog written while every system was stopped, drained by one
//! system at a time.

use super::*;

impl Suite {
    /// One catch-up workload: every system's slot exists (and every Debezium has committed an
    /// offset) before the backlog is written, as if all of them had been running and then
    /// stopped; then each drains the same backlog in turn. pg_recvlogical and outbox-relay drain
    /// it `repeat` times each, alternating, each time from a slot of its own (the machine is
    /// shared: repetitions show the noise and the report takes the median).
    pub(super) async fn catchup_phase(
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
            | System::RelayMessages
            | System::RelayB
            | System::RelayEosB => (0, *rep),
            System::DbzDefault | System::DbzTuned | System::Outboxx | System::GoPqCdc => (1, 0),
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
                // pg_recvlogical and the native peers read a publication and slot the harness
                // creates (INSERTs of the outbox tables, pgoutput), like every other system's.
                System::RecvLogical | System::Outboxx | System::GoPqCdc => {
                    let publ = s.publication().unwrap();
                    if !pg::publication_exists(&self.ctl, &publ).await? {
                        pg::create_publication(&self.ctl, &publ, self.env.outbox_tables).await?;
                    }
                    pg::create_slot(&self.ctl, slot.as_deref().unwrap()).await?;
                }
                s if s.is_relay() => self.env.relay_setup(prefix, slot.as_deref().unwrap())?,
                System::DbzDefault | System::DbzTuned => {
                    self.prime_debezium(*s, prefix, spec).await?
                }
                _ => {}
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
                    if s.produces() && rep == 1 {
                        r.sample_record =
                            kafka::first_record(&self.env.brokers, &format!("{prefix}.order"))
                                .unwrap_or_else(|e| Some(format!("(not read: {e:#})")));
                    }
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
        // Sorted by CPU, busiest first.
        let busiest = procstat::threads(running.pid).into_iter().next();
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
            busiest_thread: busiest.as_ref().map(|t| t.0.clone()),
            busiest_thread_cpu_s: busiest.map(|t| t.1 + t.2),
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
            sample_record: None,
        })
    }
}
