//! The applier at the edges of its log and its group, against the shared stack: a topic that
//! appears after the start under `topic_pattern`; a stored position below the log start (records
//! deleted before they were applied: an alert and a halted partition, never a silent reset); and
//! a zombie, an instance frozen with its transaction open while the group gives its partition to
//! another, which then wakes up and commits: nothing applied twice, no position moved back.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use rdkafka::ClientConfig;

use crate::support::{
    TestDb,
    applier::{apply_cmd, config, count, effect_schema, producer, send, setup},
    check, eventually, kafka, kafka_brokers,
    relay::Relay,
};

/// Under `topic_pattern`, a topic created while the applier runs joins within
/// `pattern_refresh_ms` and its events are applied; a topic that does not match is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_after_the_start_joins_a_pattern_subscription() {
    let db = TestDb::new("ap_pattern").await;
    effect_schema(&db, 0.0).await;
    let (first, later, other) = (
        format!("{}.pat.a", db.name),
        format!("{}.pat.b", db.name),
        format!("{}.other", db.name),
    );
    kafka::create_topic(&first, 2).await;
    kafka::create_topic(&other, 1).await;
    let pattern = format!("topic_pattern = \"{}\\\\.pat\\\\..*\"", db.name);
    let cfg = config(&db, &pattern, "pat", "pattern_refresh_ms = 1000\n");
    setup(&db, &cfg);
    let p = producer();
    for i in 0..10 {
        send(&p, &first, &format!("a-{i}"), 1).await;
        send(&p, &other, &format!("o-{i}"), 100).await;
    }
    // Copies of three events, in the same partition right after them: read in the same
    // transaction as the first copies (the applier starts with all of them in the topic).
    for i in 0..3 {
        send(&p, &first, &format!("a-{i}"), 1).await;
    }
    let mut a = Relay::start_with(&format!("{}-run", db.name), &cfg, &["apply", "run"], &[]);
    eventually(
        "the first topic's events",
        Duration::from_secs(60),
        || async { (count(&db, "SELECT count(*) FROM effects").await == 10).then_some(()) },
    )
    .await;
    kafka::create_topic(&later, 1).await;
    for i in 0..5 {
        send(&p, &later, &format!("b-{i}"), 10).await;
    }
    eventually(
        "the later topic's events (pattern_refresh_ms = 1000)",
        Duration::from_secs(60),
        || async { (count(&db, "SELECT count(*) FROM effects").await == 15).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows = db
        .client
        .query(
            "SELECT topic, count(*), sum(n)::bigint FROM effects GROUP BY topic ORDER BY topic",
            &[],
        )
        .await
        .unwrap();
    let by_topic: Vec<(String, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        by_topic,
        [(first.clone(), 10, 10), (later.clone(), 5, 50)],
        "each event applied once (copies absorbed); the non-matching topic {other} is not read"
    );
    let positions = count(
        &db,
        &format!(
            "SELECT count(*) FROM outbox_apply_offsets WHERE consumer = 'edges' AND topic = '{later}'"
        ),
    )
    .await;
    assert_eq!(positions, 1, "the later topic's position is stored");
    let addr = crate::support::http::relay_addr(&a).await;
    let scrape = crate::support::http::scrape(addr).await;
    assert_eq!(
        scrape.value(
            "outbox_relay_apply_records_total",
            &[("topic", &first), ("result", "duplicate")]
        ),
        Some(3.0)
    );
    assert!(a.terminate(Duration::from_secs(30)).success());
    check::note(
        "applier_pattern: a topic created after the start applied (5/5), a non-matching one left alone, 3 copies absorbed",
    );
    db.cleanup().await;
}

/// A stored position below the log start (records deleted before this consumer applied them)
/// halts that partition: the log and `/readyz` say why, the halted gauge is 1, `apply status`
/// exits 4, and nothing is applied until an operator moves the position with `apply reset`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_below_the_log_start_halts_the_partition_until_reset() {
    let db = TestDb::new("ap_logstart").await;
    effect_schema(&db, 0.0).await;
    let topic = format!("{}.gone", db.name);
    kafka::create_topic(&topic, 1).await;
    let cfg = config(&db, &format!("topics = [\"{topic}\"]"), "gone", "");
    setup(&db, &cfg);
    let p = producer();
    for i in 0..6 {
        send(&p, &topic, &format!("g-{i}"), 1).await;
    }
    // This consumer had applied records 0 and 1 (position 2) when retention took 0..4.
    db.client
        .execute(
            "INSERT INTO outbox_apply_offsets (consumer, topic, partition, next_offset) \
             VALUES ('edges', $1, 0, 2)",
            &[&topic],
        )
        .await
        .unwrap();
    {
        use rdkafka::{
            Offset, TopicPartitionList,
            admin::{AdminClient, AdminOptions},
            client::DefaultClientContext,
        };
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", kafka_brokers())
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(4))
            .unwrap();
        let done = admin
            .delete_records(&tpl, &AdminOptions::new())
            .await
            .unwrap();
        assert_eq!(
            done.find_partition(&topic, 0).unwrap().offset(),
            Offset::Offset(4),
            "the log now starts at 4"
        );
    }
    let mut a = Relay::start_with(&format!("{}-run", db.name), &cfg, &["apply", "run"], &[]);
    a.wait_log("apply_position_out_of_log", Duration::from_secs(60))
        .await;
    assert!(
        a.log_text().contains("below the log start 4"),
        "{}",
        a.log_text()
    );
    let addr = crate::support::http::relay_addr(&a).await;
    // The line is logged while the assignment is computed, just before the partition's state
    // is recorded: /readyz names the halt a moment later (CI once read it in between).
    let halted = format!("{topic}[0] halted");
    let mut readyz = crate::support::http::get(addr, "/readyz").await;
    for _ in 0..50 {
        if readyz.1.contains(&halted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        readyz = crate::support::http::get(addr, "/readyz").await;
    }
    let (code, body) = readyz;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains(&halted), "{body}");
    let scrape = crate::support::http::scrape(addr).await;
    assert_eq!(
        scrape.value(
            "outbox_relay_apply_partition_halted",
            &[("topic", &topic), ("partition", "0")]
        ),
        Some(1.0)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM effects").await,
        0,
        "nothing applied"
    );
    assert!(a.terminate(Duration::from_secs(30)).success());
    let status = apply_cmd("status", &a.config, &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(4), "{text}");
    assert!(text.contains("OUTSIDE THE LOG"), "{text}");

    // The operator accepts the loss: the position moves to the log start, the rest is applied.
    let reset = apply_cmd(
        "reset",
        &a.config,
        &["--topic", &topic, "--partition", "0", "--to", "4"],
    );
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    let mut a = Relay::start_with(&format!("{}-after", db.name), &cfg, &["apply", "run"], &[]);
    eventually(
        "records 4 and 5 applied",
        Duration::from_secs(60),
        || async { (count(&db, "SELECT count(*) FROM effects").await == 2).then_some(()) },
    )
    .await;
    let ids: Vec<String> = db
        .client
        .query("SELECT event_id FROM effects ORDER BY event_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, ["g-4", "g-5"]);
    assert!(a.terminate(Duration::from_secs(30)).success());
    check::note(
        "applier_log_start: position 2 below log start 4 halted (readyz 503, gauge 1, status exit 4), reset to 4 applied 2",
    );
    db.cleanup().await;
}

/// A zombie: instance A is frozen (SIGSTOP) inside a transaction that holds its partition's
/// position; the group gives the partition to B after the session timeout, and B's first
/// transaction waits on A's lock. A wakes up (SIGCONT) and commits or rolls back; both go on
/// applying while a writer keeps producing. Every event is applied exactly once, and the stored
/// position, sampled all along, never moves back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_instance_that_wakes_after_losing_its_partition_applies_nothing_twice() {
    let db = TestDb::new("ap_zombie").await;
    effect_schema(&db, 0.02).await;
    let topic = format!("{}.z", db.name);
    kafka::create_topic(&topic, 1).await;
    let sub = format!("topics = [\"{topic}\"]");
    let session = "session_timeout_ms = 6000\n";
    let cfg_a = config(&db, &sub, "zombie-a", session);
    let cfg_b = config(&db, &sub, "zombie-b", session);
    setup(&db, &cfg_a);

    // A writer at ~100 events/s for the whole scenario; each handler call takes 20 ms, so the
    // applier is inside a transaction nearly all the time.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, topic) = (stop.clone(), topic.clone());
        tokio::spawn(async move {
            let p = producer();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                send(&p, &topic, &format!("z-{n}"), 1).await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            n
        })
    };
    // The position, sampled every 20 ms from its own connection.
    let samples = Arc::new(Mutex::new(Vec::<i64>::new()));
    let sampler = {
        let (samples, stop) = (samples.clone(), stop.clone());
        let conninfo = db.conninfo();
        let topic = topic.clone();
        tokio::spawn(async move {
            let c = crate::support::connect(&conninfo).await;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(Some(r)) = c
                    .query_opt(
                        "SELECT next_offset FROM outbox_apply_offsets WHERE consumer = 'edges' \
                         AND topic = $1 AND partition = 0",
                        &[&topic],
                    )
                    .await
                {
                    samples.lock().unwrap().push(r.get(0));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut a = Relay::start_with(&format!("{}-a", db.name), &cfg_a, &["apply", "run"], &[]);
    eventually("A applying", Duration::from_secs(60), || async {
        (count(
            &db,
            "SELECT count(*) FROM effects WHERE applied_by LIKE 'zombie-a%'",
        )
        .await
            >= 50)
            .then_some(())
    })
    .await;
    // Freeze A while its transaction is open (retry until the freeze lands inside one).
    let open_xact = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'zombie-a%' \
                     AND xact_start IS NOT NULL AND backend_xid IS NOT NULL";
    let mut frozen = false;
    for _ in 0..100 {
        a.signal("-STOP");
        tokio::time::sleep(Duration::from_millis(100)).await;
        if count(&db, open_xact).await > 0 {
            frozen = true;
            break;
        }
        a.signal("-CONT");
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    assert!(frozen, "A never froze inside a transaction");
    let before_b = count(&db, "SELECT count(*) FROM effects").await;
    let mut b = Relay::start_with(&format!("{}-b", db.name), &cfg_b, &["apply", "run"], &[]);
    b.wait_log("apply_partitions_assigned", Duration::from_secs(60))
        .await;
    // B holds the partition and its transaction waits on the lock A's frozen one holds.
    eventually(
        "B's transaction waiting on A's lock",
        Duration::from_secs(30),
        || async {
            (count(
                &db,
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'zombie-b%' \
                 AND wait_event_type = 'Lock'",
            )
            .await
                > 0)
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM effects").await,
        before_b,
        "nothing applied while A's transaction holds the position"
    );
    a.signal("-CONT");
    // Whoever holds the partition after A rejoins (the group may give it back to A), the
    // events keep being applied.
    eventually(
        "applying after the wake-up",
        Duration::from_secs(60),
        || async {
            (count(&db, "SELECT count(*) FROM effects").await >= before_b + 100).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap() as i64;
    sampler.await.unwrap();
    eventually("every event applied", Duration::from_secs(90), || async {
        (count(&db, "SELECT count(DISTINCT event_id) FROM effects").await == written).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rows, distinct, claims) = (
        count(&db, "SELECT count(*) FROM effects").await,
        count(&db, "SELECT count(DISTINCT event_id) FROM effects").await,
        count(&db, "SELECT count(*) FROM inbox WHERE consumer = 'edges'").await,
    );
    assert_eq!(
        (rows, distinct, claims),
        (written, written, written),
        "each event applied once"
    );
    let by_a = count(
        &db,
        "SELECT count(*) FROM effects WHERE applied_by LIKE 'zombie-a%'",
    )
    .await;
    let position = count(
        &db,
        "SELECT max(next_offset) FROM outbox_apply_offsets WHERE consumer = 'edges'",
    )
    .await;
    assert_eq!(position, written, "the position is the log end");
    let samples = samples.lock().unwrap().clone();
    assert!(samples.len() > 100, "samples: {}", samples.len());
    assert!(
        samples.windows(2).all(|w| w[0] <= w[1]),
        "the position moved back: {samples:?}"
    );
    for r in [&mut a, &mut b] {
        assert!(r.terminate(Duration::from_secs(30)).success());
    }
    check::note(&format!(
        "applier_zombie: {written} events, {by_a} by A, {} by B (A frozen in a transaction, B waiting on \
         its lock, A woken), each applied once, {} position samples never decreasing",
        written - by_a,
        samples.len()
    ));
    db.cleanup().await;
}
