//! One relay, many databases (`[source.<name>]`): every source streams on its own, and a
//! source's failure stops that source alone.
//!
//! On a cluster of its own (`max_slot_wal_keep_size` small enough that a slot left behind is
//! invalidated), `RELAY_TEST_SOURCES` databases (default 20) are served by one relay process.
//! Three of them fail while the others take writes: `halt` meets a poison event (a NULL key,
//! `on_poison = "halt"`), `lost` has its slot invalidated (its Kafka is unreachable, so it
//! falls behind), `down` refuses connections for a while. After all three faults are seen in
//! the log, the healthy sources take a second round of writes: every event of every healthy
//! source arrives in per-key order (so they streamed through and after the faults), `down`
//! catches up once it is back, and `/readyz`, the metrics and the exit code say what happened.

use std::time::{Duration, Instant};

use crate::support::{
    TestDb, check, cluster::PgCluster, connect, eventually, http, kafka, kafka_brokers, pg_port,
    relay::Relay, writer,
};

const PORT: u16 = 25497;
const SHARED_PORT: u16 = 25498;

fn sources() -> usize {
    std::env::var("RELAY_TEST_SOURCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .max(4)
}

fn source_section(name: &str, db: &TestDb, extra: &str) -> String {
    format!(
        "[source.{name}]\npostgres = {{ database = \"{db}\", slot = \"{db}\", publication = \
         \"{db}\" }}\n{extra}[[source.{name}.outbox]]\ntable = \"public.outbox\"\n\
         topic = \"{db}.{{aggregatetype}}\"\n\n",
        db = db.name
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_relay_many_databases_failures_stay_with_their_source() {
    let n = sources();
    // A walsender, a monitor and a heartbeat connection per source, and room for the test's.
    let cluster = PgCluster::start(
        PORT,
        &format!(
            "-c max_slot_wal_keep_size=256MB -c max_wal_senders={s} -c max_replication_slots={s} \
             -c max_connections={c}",
            s = n + 10,
            c = 4 * n + 50
        ),
    );
    let mut dbs = Vec::new();
    for i in 0..n {
        dbs.push(TestDb::new_on(&cluster.base(), cluster.port, &format!("src{i}")).await);
    }
    let names: Vec<String> = (0..n)
        .map(|i| match i {
            0 => "halt".to_string(),
            1 => "lost".to_string(),
            2 => "down".to_string(),
            _ => format!("s{i:02}"),
        })
        .collect();
    dbs[0]
        .client
        .batch_execute("ALTER TABLE outbox ALTER COLUMN aggregateid DROP NOT NULL")
        .await
        .unwrap();
    let dead_kafka = format!("127.0.0.1:{}", http::free_port());
    let mut cfg = format!(
        "[postgres]\nport = {port}\ncreate_slot = true\n\n[kafka]\nbrokers = \"{brokers}\"\n\
         checkpoint_topic = \"{first}.checkpoints\"\n\n[relay]\nrestart_backoff_max_ms = 2000\n\n\
         [http]\nlisten = \"127.0.0.1:0\"\n\n",
        port = cluster.port,
        brokers = kafka_brokers(),
        first = dbs[0].name,
    );
    for (i, (name, db)) in names.iter().zip(&dbs).enumerate() {
        let extra = if i == 1 {
            format!("kafka = {{ brokers = \"{dead_kafka}\", connect_timeout_ms = 500 }}\n")
        } else {
            String::new()
        };
        cfg.push_str(&source_section(name, db, &extra));
    }
    let mut relay = Relay::start("sources", &cfg);
    let addr = http::relay_addr(&relay).await;
    // Every source but `lost` streams.
    let streaming: Vec<&TestDb> = dbs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, d)| d)
        .collect();
    all_streaming(&streaming, Duration::from_secs(90)).await;
    eventually("the slot of `lost`", Duration::from_secs(60), || async {
        dbs[1].confirmed_flush().await.map(|_| ())
    })
    .await;
    let healthy: Vec<usize> = (3..n).collect();

    // Round 1, all sources that can take writes, while the faults happen.
    let writes = |idx: Vec<usize>, round: usize| {
        let conninfos: Vec<String> = idx.iter().map(|&i| dbs[i].conninfo()).collect();
        async move {
            let handles: Vec<_> = conninfos
                .into_iter()
                .map(|c| {
                    tokio::spawn(async move {
                        writer::random_writer(c, round, 15, 5, round as u64).await
                    })
                })
                .collect();
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap());
            }
            out
        }
    };
    // down's writes end before its connections are cut; the healthy sources write on.
    let down_written = writes(vec![2], 1).await.remove(0);
    let round1 = tokio::spawn(writes(healthy.clone(), 1));

    // halt: one good event, then a poison event.
    let c = connect(&dbs[0].conninfo()).await;
    let good = writer::insert_event(&c, "order", "k-1", 0).await.unwrap();
    let head = dbs[0].current_wal_lsn().await;
    dbs[0].wait_confirmed(head, Duration::from_secs(30)).await;
    let before_poison = dbs[0].current_wal_lsn().await;
    writer::insert_null_key(&c).await;
    // down: no connections for a while (the relay's are cut).
    let admin = connect(&format!("{} dbname=postgres", cluster.base())).await;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {db} ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'
               AND pid <> pg_backend_pid();",
            db = dbs[2].name
        ))
        .await
        .unwrap();
    // lost: WAL beyond max_slot_wal_keep_size while its slot stays behind. Paced, so that the
    // streaming sources' slots (confirmed every second) stay well inside it.
    let mut lost = false;
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        dbs[1]
            .client
            .batch_execute(
                "INSERT INTO business(note) SELECT repeat('x', 1900) FROM generate_series(1, 2000);
                 SELECT pg_switch_wal(); CHECKPOINT;",
            )
            .await
            .unwrap();
        let status: Option<String> = dbs[1]
            .client
            .query_one(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
                &[&dbs[1].name],
            )
            .await
            .unwrap()
            .get(0);
        if status.as_deref() == Some("lost") {
            lost = true;
            break;
        }
    }
    assert!(
        lost,
        "the slot of source `lost` never reached wal_status = lost"
    );
    for (source, why) in [
        ("halt", "NULL in \"aggregateid\""),
        ("lost", "wal_status = lost"),
    ] {
        eventually(
            &format!("source {source} to stop"),
            Duration::from_secs(60),
            || async {
                let log = relay.log_text();
                log.lines()
                    .any(|l| {
                        l.contains("source_stopped")
                            && l.contains(&format!("source=\"{source}\""))
                            && l.contains(why)
                    })
                    .then_some(())
            },
        )
        .await;
    }
    eventually(
        "source down to restart",
        Duration::from_secs(30),
        || async {
            let log = relay.log_text();
            log.lines()
                .any(|l| l.contains("source=\"down\"") && l.contains("pipeline_restart"))
                .then_some(())
        },
    )
    .await;
    let round1 = round1.await.unwrap();
    let faults_seen = Instant::now();

    // The faults are in; the healthy sources take a second round and must deliver it.
    let round2 = writes(healthy.clone(), 2).await;
    // ... and confirm it: their slots move on while three sources are down.
    for &i in &healthy {
        let head = dbs[i].current_wal_lsn().await;
        dbs[i].wait_confirmed(head, Duration::from_secs(60)).await;
    }
    let (status, body) = http::get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("source halt: stopped:"), "{body}");
    assert!(body.contains("source lost: stopped:"), "{body}");
    for name in &names[3..] {
        assert!(
            !body.contains(&format!("source {name}:")),
            "{name} not ready: {body}"
        );
    }
    let mut totals = check::Figures {
        written: 0,
        delivered: 0,
        lost: 0,
        duplicated: 0,
        order_violations: 0,
        unexpected: 0,
    };
    for (k, &i) in healthy.iter().enumerate() {
        let mut written = round1[k].written.clone();
        written.extend(round2[k].written.iter().cloned());
        let got = kafka::consume(
            vec![dbs[i].topic("order")],
            Duration::from_secs(90),
            written.len(),
        )
        .await;
        let f = check::check(
            &format!("sources_{}", names[i]),
            |t| dbs[i].topic(t),
            &written,
            &got,
        );
        f.assert_nothing_lost_or_reordered(&names[i]);
        check::assert_absent(&round1[k].discarded, &got);
        totals.written += f.written;
        totals.delivered += f.delivered;
        totals.duplicated += f.duplicated;
    }
    let streamed_after = faults_seen.elapsed();
    check::record("sources_healthy_all", &totals);

    // halt: the good event was delivered, nothing confirmed past the poison event.
    let got = kafka::consume(vec![dbs[0].topic("order")], Duration::from_secs(30), 1).await;
    let f = check::check("sources_halt", |t| dbs[0].topic(t), &[good], &got);
    assert_eq!((f.lost, f.unexpected), (0, 0), "{f:?}");
    assert!(
        dbs[0].confirmed_flush().await.unwrap() <= before_poison,
        "source halt confirmed past its poison event"
    );

    // down comes back and catches up.
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            dbs[2].name
        ))
        .await
        .unwrap();
    let written = down_written.written.clone();
    let got = kafka::consume(
        vec![dbs[2].topic("order")],
        Duration::from_secs(90),
        written.len(),
    )
    .await;
    let f = check::check("sources_down", |t| dbs[2].topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered("down");

    let m = http::scrape(addr).await;
    for (metric, source, want) in [
        ("outbox_relay_source_stopped", "halt", 1.0),
        ("outbox_relay_source_stopped", "lost", 1.0),
        ("outbox_relay_source_stopped", "s03", 0.0),
        ("outbox_relay_streaming", "s03", 1.0),
    ] {
        assert_eq!(
            m.value(metric, &[("source", source)]),
            Some(want),
            "{metric} {source}"
        );
    }
    check::note(&format!(
        "sources: {n} databases in one relay; healthy sources delivered {} events ({} after the \
         three faults were seen, checked within {:.1} s)",
        totals.delivered,
        round2.iter().map(|s| s.written.len()).sum::<usize>(),
        streamed_after.as_secs_f64()
    ));

    // A stop ends the process cleanly even though two sources had stopped on errors.
    let exit = relay.terminate(Duration::from_secs(40));
    assert_eq!(exit.code(), Some(0), "{}", relay.log_text());
    for db in dbs {
        db.cleanup().await;
    }
}

/// The top level of a multi-source config on the shared test cluster.
fn top_level(first: &TestDb, port: u16) -> String {
    format!(
        "[postgres]\nport = {port}\ncreate_slot = true\n\n[kafka]\nbrokers = \"{brokers}\"\n\
         checkpoint_topic = \"{first}.checkpoints\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n",
        brokers = kafka_brokers(),
        first = first.name,
    )
}

/// SIGHUP changes sources one by one: a new one starts, a removed one stops (its slot is
/// released), an unchanged one keeps its replication connection, and a config that does not
/// load changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_sources_without_touching_the_others() {
    let a = TestDb::new("reload_a").await;
    let b = TestDb::new("reload_b").await;
    let c = TestDb::new("reload_c").await;
    // A fixed port: `status` reads the relay's /metrics at http.listen.
    let top = top_level(&a, pg_port())
        .replace("127.0.0.1:0", &format!("127.0.0.1:{}", http::free_port()));
    let cfg = format!(
        "{top}{}{}",
        source_section("a", &a, ""),
        source_section("b", &b, "")
    );
    let mut relay = Relay::start("sources_reload", &cfg);
    all_streaming(&[&a, &b], Duration::from_secs(60)).await;
    let a_pid = a.slot_active_pid().await;
    let status = relay.status();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("source a, slot") && text.contains("source b, slot"),
        "{text}"
    );

    // A config that does not load: logged, nothing changes.
    std::fs::write(&relay.config, format!("{cfg}\n[source.x]\nhttp = {{}}\n")).unwrap();
    relay.signal("-HUP");
    relay
        .wait_log("config_reload_failed", Duration::from_secs(20))
        .await;
    assert!(
        b.slot_active_pid().await.is_some(),
        "source b stopped on a bad reload"
    );

    // b removed, c added, a unchanged.
    std::fs::write(
        &relay.config,
        format!(
            "{top}{}{}",
            source_section("a", &a, ""),
            source_section("c", &c, "")
        ),
    )
    .unwrap();
    relay.signal("-HUP");
    relay
        .wait_log(
            "config_reloaded added=1 removed=1 restarted=0",
            Duration::from_secs(20),
        )
        .await;
    all_streaming(&[&c], Duration::from_secs(60)).await;
    eventually(
        "source b to release its slot",
        Duration::from_secs(60),
        || async { b.slot_active_pid().await.is_none().then_some(()) },
    )
    .await;
    assert_eq!(a.slot_active_pid().await, a_pid, "source a was restarted");

    // Both running sources deliver.
    for db in [&a, &c] {
        let client = connect(&db.conninfo()).await;
        let w = writer::insert_event(&client, "order", "k-1", 0)
            .await
            .unwrap();
        let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
        let f = check::check("sources_reload", |t| db.topic(t), &[w], &got);
        f.assert_nothing_lost_or_reordered(&db.name);
    }
    // `status --watch` piped: one line per source and refresh, each naming its source.
    let out = std::process::Command::new("timeout")
        .args(["-s", "TERM", "3"])
        .arg(crate::support::relay::binary())
        .args(["status", "--watch", "--interval-secs", "0.5", "--config"])
        .arg(&relay.config)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 4, "{text}");
    for (i, l) in lines.iter().enumerate() {
        let want = if i % 2 == 0 { "source=a " } else { "source=c " };
        assert!(l.starts_with(want), "line {i}: {l}");
        assert!(l.contains(" streaming=yes "), "line {i}: {l}");
    }
    let exit = relay.terminate(Duration::from_secs(30));
    assert_eq!(exit.code(), Some(0), "{}", relay.log_text());
    for db in [a, b, c] {
        db.cleanup().await;
    }
}

/// How many sources three instances share (`RELAY_TEST_SHARED_SOURCES`, default 6; the
/// heavy script runs 20).
fn shared_sources() -> usize {
    std::env::var("RELAY_TEST_SHARED_SOURCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
        .max(2)
}

/// Waits until every one of `dbs` has its slot active (a relay streams from it).
async fn all_streaming(dbs: &[&TestDb], timeout: Duration) {
    for db in dbs {
        eventually(&format!("{} to stream", db.name), timeout, || async {
            db.slot_active_pid().await.map(|_| ())
        })
        .await;
    }
}

/// Which slots are active now, per database index.
async fn active(dbs: &[TestDb]) -> Vec<bool> {
    let mut out = Vec::with_capacity(dbs.len());
    for db in dbs {
        out.push(db.slot_active_pid().await.is_some());
    }
    out
}

/// The sources an instance has started streaming, from its log.
fn streaming_sources(relay: &Relay) -> std::collections::BTreeSet<String> {
    relay
        .log_text()
        .lines()
        .filter(|l| l.contains("streaming_started"))
        .filter_map(|l| l.split("source{source=\"").nth(1)?.split('"').next())
        .map(str::to_string)
        .collect()
}

/// Three instances run one exactly-once config of several sources with `relay.max_sources`
/// set so that two can carry them all. Each takes no more than its share; the instance that
/// streams the most is killed -9, twice (restarted in between); the others take its sources
/// over, at default backoff settings; then a rolling restart (SIGTERM, start, one instance at
/// a time); and a read-committed consumer sees every event of every source exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_sources_take_over_and_roll_exactly_once() {
    let n = shared_sources();
    let cap = n.div_ceil(2);
    // Three instances hold up to three connections per source each (walsender or slot poll,
    // monitor, heartbeat): a cluster of its own, sized for them.
    let cluster = PgCluster::start(
        SHARED_PORT,
        &format!(
            "-c max_wal_senders={s} -c max_replication_slots={s} -c max_connections={c}",
            s = n + 10,
            c = 12 * n + 50
        ),
    );
    let mut dbs = Vec::new();
    for i in 0..n {
        dbs.push(TestDb::new_on(&cluster.base(), cluster.port, &format!("share{i}")).await);
    }
    let mut cfg = format!(
        "{}[relay]\ndelivery = \"exactly-once\"\nmax_sources = {cap}\n\n",
        top_level(&dbs[0], cluster.port).replace(
            "[kafka]\n",
            &format!("[kafka]\ntransactional_id = \"t-{}\"\n", dbs[0].name)
        )
    );
    for (i, db) in dbs.iter().enumerate() {
        cfg.push_str(&source_section(&format!("s{i:02}"), db, ""));
    }
    let mut relays: Vec<Relay> = (0..3)
        .map(|k| Relay::start(&format!("sources_share_{k}"), &cfg))
        .collect();
    let all: Vec<&TestDb> = dbs.iter().collect();
    all_streaming(&all, Duration::from_secs(120)).await;
    for r in &relays {
        let held = streaming_sources(r);
        assert!(
            held.len() <= cap,
            "an instance took {held:?}, over max_sources = {cap}"
        );
    }

    // Writers on every source until the end: one event per transaction, a few per second.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = dbs
        .iter()
        .map(|db| {
            let (conninfo, stop) = (db.conninfo(), stop.clone());
            tokio::spawn(async move {
                let c = connect(&conninfo).await;
                let mut written = Vec::new();
                let mut k = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let agg = format!("k-{}", k % 3);
                    written.push(writer::insert_event(&c, "order", &agg, 0).await.unwrap());
                    k += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                written
            })
        })
        .collect();

    let mut takeovers = Vec::new();
    for round in 0..2 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The instance that streams the most sources right now.
        let victim = (0..3)
            .max_by_key(|&k| {
                if relays[k].is_running() {
                    streaming_sources(&relays[k]).len()
                } else {
                    0
                }
            })
            .unwrap();
        let before = active(&dbs).await;
        assert!(
            before.iter().all(|a| *a),
            "round {round}: not every source streams"
        );
        relays[victim].kill9();
        let killed = Instant::now();
        // Per source: how long until its slot is active again (sampled every 50 ms).
        let mut back: Vec<Option<Duration>> = vec![None; n];
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut went_down = vec![false; n];
        while back.iter().any(Option::is_none) && Instant::now() < deadline {
            for (i, a) in active(&dbs).await.into_iter().enumerate() {
                if !a {
                    went_down[i] = true;
                } else if back[i].is_none() {
                    back[i] = Some(killed.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let moved: Vec<Duration> = (0..n)
            .filter(|&i| went_down[i])
            .map(|i| {
                back[i].unwrap_or_else(|| {
                    panic!("round {round}: source s{i:02} was not taken over within 60 s")
                })
            })
            .collect();
        assert!(
            !moved.is_empty(),
            "round {round}: the killed instance streamed nothing"
        );
        takeovers.extend(moved.iter().copied());
        // The killed instance comes back (and waits: the others hold every slot).
        relays[victim] = Relay::start(&format!("sources_share_{victim}"), &cfg);
    }
    // A rolling restart: each instance in turn stops (SIGTERM: drained) and starts again,
    // once every source streams again.
    for (k, relay) in relays.iter_mut().enumerate() {
        all_streaming(&all, Duration::from_secs(60)).await;
        let exit = relay.terminate(Duration::from_secs(40));
        assert_eq!(exit.code(), Some(0), "instance {k}: {}", relay.log_text());
        *relay = Relay::start(&format!("sources_share_{k}"), &cfg);
    }
    all_streaming(&all, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = check::Figures {
        written: 0,
        delivered: 0,
        lost: 0,
        duplicated: 0,
        order_violations: 0,
        unexpected: 0,
    };
    for (i, (db, w)) in dbs.iter().zip(writers).enumerate() {
        let written = w.await.unwrap();
        let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
        let f = check::check(
            &format!("sources_share_s{i:02}"),
            |t| db.topic(t),
            &written,
            &got,
        );
        f.assert_exactly_once(&format!("source s{i:02}"));
        total.written += f.written;
        total.delivered += f.delivered;
    }
    check::record("sources_share_all", &total);
    takeovers.sort();
    check::note(&format!(
        "sources_share: {n} sources on 3 instances (max_sources {cap}), killed -9 twice: {} \
         takeovers, median {:.2} s, max {:.2} s (slot active again, sampled every 50 ms)",
        takeovers.len(),
        takeovers[takeovers.len() / 2].as_secs_f64(),
        takeovers.last().unwrap().as_secs_f64()
    ));
    assert!(
        *takeovers.last().unwrap() < Duration::from_secs(15),
        "takeovers {takeovers:?}"
    );
    for r in &mut relays {
        r.terminate(Duration::from_secs(30));
    }
    for db in dbs {
        db.cleanup().await;
    }
}

/// `setup` prepares every source of the file, or the one `--source` names; an unknown name is a
/// configuration error (exit 2) that lists the sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_prepares_every_source_or_the_one_named() {
    let a = TestDb::new("setup_a").await;
    let b = TestDb::new("setup_b").await;
    let cfg = format!(
        "{}{}{}",
        top_level(&a, pg_port()),
        source_section("a", &a, ""),
        source_section("b", &b, "")
    );
    let (status, log) = Relay::once("sources_setup", &cfg, &["setup", "--source", "b"], &[]);
    assert!(status.success(), "{log}");
    assert!(b.confirmed_flush().await.is_some(), "slot of b: {log}");
    assert!(
        a.confirmed_flush().await.is_none(),
        "setup --source b made a's slot"
    );
    let (status, log) = Relay::once("sources_setup", &cfg, &["setup"], &[]);
    assert!(status.success(), "{log}");
    assert!(a.confirmed_flush().await.is_some(), "slot of a: {log}");
    let (status, log) = Relay::once("sources_setup", &cfg, &["setup", "--source", "nope"], &[]);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("no such source; the config has a, b"), "{log}");
    a.cleanup().await;
    b.cleanup().await;
}
