//! Every source streams on its own, and a source's failure stops that source alone.
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

use super::{all_streaming, count_from_env, source_section};
use crate::support::{
    TestDb, check, cluster::PgCluster, connect, eventually, http, kafka, kafka_brokers,
    relay::Relay, writer,
};

const PORT: u16 = 25497;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_relay_many_databases_failures_stay_with_their_source() {
    let n = count_from_env("RELAY_TEST_SOURCES", 20, 4);
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
    // The fault for `lost` below writes WAL until its slot is invalidated; a slot that stopped
    // moving only a little after it (down's, cut; halt's, halted) would be invalidated at the
    // same checkpoint (CI fenced pass of d618a75: `down` stopped on "wal_status = lost, reason
    // wal_removed" and its 49 events never came; reproduced at 623f1df under --test-threads 3).
    // Or a little later, by the WAL the healthy sources write afterwards (a run here lost
    // down's slot 15 s after lost's). So every streaming slot is first put half of
    // max_slot_wal_keep_size AHEAD of lost's: far more than a step of that loop writes (one
    // segment switch and ~4 MB) plus the segment rounding of WAL removal, or the rest writes.
    ahead_of(
        &cluster,
        &dbs[1].name,
        &[&dbs[0].name, &dbs[2].name],
        128 << 20,
    )
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
    let mut totals = check::Figures::default();
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
    if f.lost > 0 {
        // Seen once in CI's fenced pass (2026-12-05) and not reproduced: what the relay said.
        let log = relay.log_text();
        let down: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("source=\"down\""))
            .collect();
        eprintln!(
            "the relay's lines about `down` (last 40):\n{}",
            down[down.len().saturating_sub(40)..].join("\n")
        );
    }
    f.assert_nothing_lost_or_reordered("down");

    let m = http::scrape(addr).await;
    for (metric, source, want) in [
        ("outbox_relay_source_stopped", "halt", 1.0),
        ("outbox_relay_source_stopped", "lost", 1.0),
        ("outbox_relay_source_stopped", "s03", 0.0),
        ("outbox_relay_source_stopped", "down", 0.0),
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

/// Writes WAL (switching segments, with a checkpoint so that logical slots can move their
/// restart position) until each of `slots` restarts at least `bytes` past `behind`'s restart.
async fn ahead_of(cluster: &PgCluster, behind: &str, slots: &[&str], bytes: i64) {
    let admin = connect(&format!("{} dbname=postgres", cluster.base())).await;
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS wal_filler(note text)")
        .await
        .unwrap();
    for slot in slots {
        eventually(
            &format!("slot {slot} to restart {bytes} bytes past {behind}'s"),
            Duration::from_secs(90),
            || async {
                admin
                    .batch_execute(
                        "INSERT INTO wal_filler SELECT repeat('x', 1900) FROM generate_series(1, 2000);
                         SELECT pg_switch_wal(); CHECKPOINT;",
                    )
                    .await
                    .unwrap();
                // Paced: the next step only once every other slot has confirmed this one, so
                // that no streaming slot falls max_slot_wal_keep_size behind while this writes
                // (under a CPU hog a source that had just started was: stress run 4 of 20 at
                // bf48cb2, `source s08 stopped: ... wal_status = lost`).
                confirmed_by_all_but(&admin, behind).await;
                // NULL once `behind`'s slot is invalidated: no slot left to be ahead of.
                let gap: Option<i64> = admin
                    .query_one(
                        "SELECT pg_wal_lsn_diff(s.restart_lsn, b.restart_lsn)::bigint
                           FROM pg_replication_slots s, pg_replication_slots b
                          WHERE s.slot_name = $1 AND b.slot_name = $2",
                        &[slot, &behind],
                    )
                    .await
                    .unwrap()
                    .get(0);
                gap.is_none_or(|gap| gap >= bytes).then_some(())
            },
        )
        .await;
    }
}

/// Waits (at most 90 s) until every slot but `behind` and the invalidated ones has confirmed the
/// current end of the WAL.
async fn confirmed_by_all_but(admin: &tokio_postgres::Client, behind: &str) {
    let head: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    eventually(
        &format!("every streaming slot to confirm {head}"),
        Duration::from_secs(90),
        || async {
            let lagging: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_replication_slots
                      WHERE slot_name <> $1 AND wal_status IS DISTINCT FROM 'lost'
                        AND (confirmed_flush_lsn IS NULL OR confirmed_flush_lsn < $2::text::pg_lsn)",
                    &[&behind, &head],
                )
                .await
                .unwrap()
                .get(0);
            (lagging == 0).then_some(())
        },
    )
    .await;
}
