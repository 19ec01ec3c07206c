//! `bench drain`: one catch-up drain of outbox-relay, on its own, for profiling
//! (scripts/profile-catchup.sh). The backlog is written while the relay is stopped (its slot
//! exists), as in the suite's catch-up workload, into a database, slot, publication and topic of
//! this run's own, so that it can run on a stack other people use; all of them are removed at
//! the end. The relay may run under a wrapper (`valgrind --tool=callgrind …`): it is stopped
//! (SIGTERM) only once PostgreSQL has confirmed the backlog's end LSN, so a profile covers the
//! whole drain.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::{
    kafka::{self, EndOffsets},
    pg::{self, now_us},
    procstat,
    suite::wait_walsender,
    systems::{Env, System},
};

#[derive(clap::Args)]
pub struct DrainArgs {
    #[arg(long, default_value_t = 16432)]
    pg_port: u16,
    #[arg(long, default_value = "127.0.0.1:29192")]
    brokers: String,
    /// The database to write the backlog into (created, and dropped at the end).
    #[arg(long, default_value = "cpuprof")]
    db: String,
    #[arg(long)]
    relay_bin: std::path::PathBuf,
    /// Scratch directory for the relay's config and log.
    #[arg(long)]
    work: std::path::PathBuf,
    #[arg(long, default_value_t = 200_000)]
    events: i32,
    #[arg(long, default_value_t = 1000)]
    txn_rows: i32,
    #[arg(long, default_value_t = 200)]
    payload: i32,
    /// Command (whitespace-separated) the relay runs under, e.g.
    /// "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out".
    #[arg(long, default_value = "")]
    wrap: String,
    /// Seconds to wait for the drain before giving up.
    #[arg(long, default_value_t = 1200)]
    timeout_s: u64,
    /// Extra TOML merged into the relay's config (experiments).
    #[arg(long)]
    relay_extra_toml: Option<std::path::PathBuf>,
    /// The system to drain: `outbox-relay`, `outboxx` (a native peer built by
    /// bench/peers/build.sh) to profile it the same way, on its own publication of the same
    /// table and the same slot, or `pg_recvlogical` (the database's floor: the stream into
    /// /dev/null, up to the backlog's end LSN).
    #[arg(long, default_value = "outbox-relay")]
    system: String,
    /// The broker's process (a local broker, e.g. `$STACK_DIR/kafka-<port>/kafka.pid`): its CPU
    /// over the same window, per event. On a machine this small the broker competes with the
    /// walsender and the system for the same cores.
    #[arg(long)]
    broker_pid: Option<i32>,
}

/// What one drain measured. CPU is user + system from `/proc/<pid>/stat`, from the process's
/// start to the moment the last record was in Kafka.
#[derive(Debug, serde::Serialize)]
struct Drained {
    events: i32,
    txn_rows: i32,
    payload: i32,
    wrapped: bool,
    /// Relay start → last record in Kafka.
    seconds: f64,
    relay_cpu_s: f64,
    /// Of `relay_cpu_s`, in the kernel (system time: socket reads and writes, wake-ups).
    relay_system_s: f64,
    walsender_cpu_s: f64,
    /// The walsender's voluntary context switches (waits on its socket or latch: a client that
    /// reads behind it, or nothing to send) and involuntary ones (preempted), over the drain.
    walsender_waits: u64,
    walsender_preempted: u64,
    /// The broker's CPU per event over the same window (with `--broker-pid`).
    broker_us_per_event: Option<f64>,
    /// The relay's threads: (name, user s, system s, context switches), busiest first.
    relay_threads: Vec<(String, f64, f64, u64)>,
    relay_us_per_event: f64,
    walsender_us_per_event: f64,
    relay_to_walsender: f64,
    /// Busy cores of the machine in the same window that were neither the relay nor the
    /// walsender (the broker, other users).
    other_cores: f64,
    loadavg_before: String,
    loadavg_after: String,
    /// (ms since the start, records in Kafka) at every 50 ms poll: where a drain waited.
    timeline: Vec<(u64, i64)>,
}

pub async fn run(a: DrainArgs) -> Result<()> {
    anyhow::ensure!(
        a.db.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "--db {:?}: lower-case letters, digits and _ only",
        a.db
    );
    std::fs::create_dir_all(&a.work)?;
    // Names of this run only: never the suite's `bench_%` slots, which its reset drops.
    let stamp = (now_us() / 1000) % 100_000_000;
    let slot = format!("cpuprof_{stamp}");
    let prefix = format!("cpuprof-{stamp}");
    let topic = format!("{prefix}.order");
    let mut env = Env {
        repo: std::env::current_dir()?,
        work: std::fs::canonicalize(&a.work)?,
        pg_port: a.pg_port,
        brokers: a.brokers.clone(),
        relay_bin: std::fs::canonicalize(&a.relay_bin).context("--relay-bin")?,
        relay_bin_b: None,
        bench_bin: std::env::current_exe()?,
        connect_rest_port: 0,
        relay_extra_toml: match &a.relay_extra_toml {
            Some(p) => Some(std::fs::read_to_string(p)?),
            None => None,
        },
        relay_has_http: false,
        database: a.db.clone(),
        relay_publication: format!("{slot}_pub"),
        relay_wrapper: a.wrap.split_whitespace().map(String::from).collect(),
        outbox_tables: 1,
        peers_dir: crate::systems::peers_dir(),
    };
    env.probe_relay()?;
    pg::prepare_in(a.pg_port, &a.db, &[a.payload]).await?;
    let ctl = pg::connect(a.pg_port, &a.db).await?;
    ctl.batch_execute("TRUNCATE public.outbox").await?;
    kafka::create_topics(&a.brokers, std::slice::from_ref(&topic)).await?;
    let result = drain(&a, &env, &ctl, &slot, &prefix, &topic).await;
    // Clean up whatever happened.
    let _ = pg::drop_slot(&ctl, &slot).await;
    let _ = ctl
        .batch_execute(&format!("DROP PUBLICATION IF EXISTS {slot}_pub"))
        .await;
    for peer in [System::Outboxx, System::RecvLogical] {
        if let Some(publication) = peer.publication() {
            let _ = ctl
                .batch_execute(&format!("DROP PUBLICATION IF EXISTS {publication}"))
                .await;
        }
    }
    drop(ctl);
    let _ = kafka::delete_topics(&a.brokers, std::slice::from_ref(&topic)).await;
    let admin = pg::connect(a.pg_port, "postgres").await?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", a.db))
        .await?;
    let d = result?;
    eprintln!(
        "[drain] {} events ({}-row txns, ~{} B) in {:.2} s{}: relay {:.2} s CPU ({:.2} us/event, {:.2} s system), \
         walsender {:.2} s ({:.2} us/event), relay/walsender {:.3}; other load {:.2} cores; \
         loadavg {} -> {}",
        d.events,
        d.txn_rows,
        d.payload,
        d.seconds,
        if d.wrapped { " (wrapped)" } else { "" },
        d.relay_cpu_s,
        d.relay_us_per_event,
        d.relay_system_s,
        d.walsender_cpu_s,
        d.walsender_us_per_event,
        d.relay_to_walsender,
        d.other_cores,
        d.loadavg_before,
        d.loadavg_after
    );
    for (name, user, system, switches) in &d.relay_threads {
        if user + system > 0.0 || *switches > 100 {
            eprintln!(
                "[drain]   thread {name:<16} {user:>5.2} s user {system:>5.2} s system, \
                 {switches:>6} context switches"
            );
        }
    }
    println!("{}", serde_json::to_string(&d)?);
    Ok(())
}

async fn drain(
    a: &DrainArgs,
    env: &Env,
    ctl: &tokio_postgres::Client,
    slot: &str,
    prefix: &str,
    topic: &str,
) -> Result<Drained> {
    let system = System::parse(&a.system)?;
    anyhow::ensure!(
        matches!(
            system,
            System::Relay | System::Outboxx | System::RecvLogical
        ),
        "--system {}: outbox-relay, outboxx or pg_recvlogical",
        a.system
    );
    // The slot (and outbox-relay's publication) as `outbox-relay setup` makes them, before the
    // backlog; a peer reads the same slot through a publication of its own.
    env.relay_setup(prefix, slot)?;
    if let Some(publication) = system.publication().filter(|_| system != System::Relay) {
        pg::create_publication(ctl, &publication, 1).await?;
    }
    let write_s = pg::backlog(ctl, a.events, a.txn_rows, a.payload, "order").await?;
    let endpos = pg::current_lsn(ctl).await?;
    eprintln!(
        "[drain] backlog of {} events written in {write_s:.1} s, end LSN {endpos}",
        a.events
    );
    let eo = EndOffsets::new(&a.brokers, topic)?;
    let loadavg_before = loadavg();
    let machine0 = procstat::machine_cpu_seconds();
    let broker0 = a.broker_pid.and_then(procstat::cpu_seconds);
    let t0 = Instant::now();
    let floor = system == System::RecvLogical;
    let running = env.start(system, prefix, Some(slot), floor.then_some(endpos.as_str()))?;
    let res = async {
        let walsender = wait_walsender(ctl, slot, Duration::from_secs(120)).await?;
        let deadline = t0 + Duration::from_secs(a.timeout_s);
        let n = i64::from(a.events);
        // pg_recvlogical exits at the end LSN and its walsender with it: its CPU is the last
        // reading before that (up to 10 ms short); the exited client stays readable.
        let mut walsender_last = 0.0;
        let mut switches_last = (0, 0);
        while floor && running.alive() {
            walsender_last = procstat::cpu_seconds(walsender).unwrap_or(walsender_last);
            switches_last = procstat::ctxt_switches(walsender).unwrap_or(switches_last);
            anyhow::ensure!(
                Instant::now() < deadline,
                "pg_recvlogical still running after {} s",
                a.timeout_s
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Until the last record is in Kafka: the window the CPU figures cover.
        let mut timeline = Vec::new();
        while !floor && eo.total()? < n {
            timeline.push((t0.elapsed().as_millis() as u64, eo.total()?));
            anyhow::ensure!(running.alive(), "{} exited early", a.system);
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} of {n} records after {} s",
                eo.total()?,
                a.timeout_s
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let seconds = t0.elapsed().as_secs_f64();
        let (user, system) = procstat::user_system_seconds(running.pid).unwrap_or_default();
        let relay_cpu_s = user + system;
        let relay_threads = procstat::threads(running.pid);
        let walsender_cpu_s = procstat::cpu_seconds(walsender).unwrap_or(walsender_last);
        let (walsender_waits, walsender_preempted) =
            procstat::ctxt_switches(walsender).unwrap_or(switches_last);
        let machine = procstat::machine_cpu_seconds() - machine0;
        let broker_cpu_s = broker0
            .zip(a.broker_pid.and_then(procstat::cpu_seconds))
            .map(|(b0, b1)| b1 - b0);
        // Then until PostgreSQL has the backlog's end confirmed (pg_recvlogical confirmed it
        // before it exited).
        let mut confirmed = floor;
        while !confirmed {
            confirmed = ctl
                .query_one(
                    "SELECT coalesce(confirmed_flush_lsn >= $1::text::pg_lsn, false) \
                       FROM pg_replication_slots WHERE slot_name = $2",
                    &[&endpos, &slot],
                )
                .await?
                .get(0);
            anyhow::ensure!(
                confirmed || Instant::now() < deadline,
                "end LSN not confirmed after {} s",
                a.timeout_s
            );
            if !confirmed {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let per_event = |s: f64| s * 1e6 / n as f64;
        Ok(Drained {
            events: a.events,
            txn_rows: a.txn_rows,
            payload: a.payload,
            wrapped: !env.relay_wrapper.is_empty(),
            seconds,
            relay_cpu_s,
            relay_system_s: system,
            walsender_cpu_s,
            walsender_waits,
            walsender_preempted,
            broker_us_per_event: broker_cpu_s.map(per_event),
            relay_threads,
            relay_us_per_event: per_event(relay_cpu_s),
            walsender_us_per_event: per_event(walsender_cpu_s),
            relay_to_walsender: relay_cpu_s / walsender_cpu_s.max(1e-9),
            other_cores: (machine - relay_cpu_s - walsender_cpu_s).max(0.0) / seconds,
            loadavg_before,
            loadavg_after: loadavg(),
            timeline,
        })
    }
    .await;
    // A profiler writes its output as the relay exits: give it time.
    running.stop_within(Duration::from_secs(600))?;
    res
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
