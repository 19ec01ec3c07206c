//! The cutover from a running Debezium (3.6.1 on Kafka Connect 4.3.1 standalone,
//! `infra/debezium/`) to outbox-relay, with writers committing all along: Debezium streams, is
//! stopped while the writers go on, `setup --from-debezium` takes over its slot and records
//! where the relay starts, the relay streams to the same topics, and everything is consumed: 0
//! lost, per-aggregate order kept, and duplicates only of what Debezium had not committed: after a
//! graceful stop the one transaction its committed offset was in (`txId`), after a SIGKILL
//! transactions committed at or after its `lsn_commit`.
//!
//! Two workers, one connector each (own database, slot, publication, topics): a standalone
//! worker, stopped gracefully and cut over with its offsets file (relay at-least-once), and a
//! one-worker distributed cluster, killed and cut over with its offsets topic (relay
//! exactly-once).

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use rdkafka::{
    ClientConfig,
    producer::{FutureProducer, FutureRecord},
};
use relay_core::debezium_position::{DebeziumOffset, read_offsets_file};

use crate::support::{
    TestDb, check, connect,
    debezium::{Worker, start_command, turn},
    eventually, kafka, kafka_brokers, pg_port,
    relay::Relay,
    writer::{Written, insert_event},
};

const REST_PORT: u16 = 28300;

/// Debezium as outbox users deploy it, with the layout the relay reproduces by default
/// (StringConverter, `eventType` header, no `__debezium.context.*` headers).
fn connector_properties(db: &TestDb) -> String {
    format!(
        "name={db}\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n\
         tasks.max=1\ndatabase.hostname=127.0.0.1\ndatabase.port={port}\ndatabase.user=postgres\n\
         database.password=postgres\ndatabase.dbname={db}\ntopic.prefix={db}\n\
         plugin.name=pgoutput\nslot.name={db}\npublication.name={db}\n\
         publication.autocreate.mode=filtered\ntable.include.list=public.outbox\n\
         snapshot.mode=no_data\ntombstones.on.delete=false\npoll.interval.ms=50\n\
         extended.headers.enabled=false\n\
         key.converter=org.apache.kafka.connect.storage.StringConverter\n\
         value.converter=org.apache.kafka.connect.storage.StringConverter\n\
         transforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
         transforms.outbox.route.topic.replacement={db}.${{routedByValue}}\n\
         transforms.outbox.table.fields.additional.placement=type:header:eventType\n",
        db = db.name,
        port = pg_port(),
    )
}

/// The relay for `db`; `exactly_once`: `relay.delivery = "exactly-once"` with the relay's
/// headers (the crash case: its `outbox-relay.commit-lsn` says which transaction a re-sent
/// event is of), else at-least-once without them. The cutover's checkpoint serves both modes.
fn relay_config(db: &TestDb, exactly_once: bool) -> String {
    let delivery = if exactly_once {
        format!(
            "transactional_id = \"outbox-relay-{}\"\n\n[relay]\ndelivery = \"exactly-once\"\n",
            db.name
        )
    } else {
        "[relay]\n".to_string()
    };
    db.relay_config(&format!(
        "{delivery}relay_headers = {exactly_once}\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n{}",
        db.outbox_section()
    ))
}

/// Writers committing 1-3 aggregates × 1-3 events per transaction until `stop`.
fn writers(
    db: &TestDb,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Written>>> {
    (0..n)
        .map(|w| {
            let conninfo = db.conninfo();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut c = connect(&conninfo).await;
                let mut rng = StdRng::seed_from_u64(40 + w as u64);
                let mut out = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut aggs: Vec<String> = (0..rng.random_range(1..=3))
                        .map(|_| format!("agg-{}", rng.random_range(0..12)))
                        .collect();
                    aggs.sort();
                    aggs.dedup();
                    let tx = c.transaction().await.unwrap();
                    let mut pending = Vec::new();
                    for agg in &aggs {
                        for _ in 0..rng.random_range(1..=3) {
                            pending.push(insert_event(&tx, "order", agg, w).await.unwrap());
                        }
                    }
                    tx.commit().await.unwrap();
                    out.extend(pending);
                    tokio::time::sleep(Duration::from_millis(rng.random_range(5..25))).await;
                }
                out
            })
        })
        .collect()
}

async fn records_in(topic: &str) -> i64 {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        kafka::high_watermark_sum(&kafka::watermark_client(), &topic)
    })
    .await
    .unwrap()
}

async fn wait_records(topic: &str, at_least: i64) {
    eventually("Debezium to publish", Duration::from_secs(60), || async {
        (records_in(topic).await >= at_least).then_some(())
    })
    .await;
}

/// The offsets of `entries` in a new topic, as Connect's KafkaOffsetBackingStore writes them.
async fn offsets_topic(topic: &str, entries: &[(Vec<u8>, Option<Vec<u8>>)]) {
    kafka::create_topic(topic, 5).await;
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    for (k, v) in entries {
        let mut r = FutureRecord::<[u8], [u8]>::to(topic).key(k.as_slice());
        if let Some(v) = v {
            r = r.payload(v.as_slice());
        }
        p.send(r, Duration::from_secs(10)).await.unwrap();
    }
}

fn setup(db: &TestDb, name: &str, args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut all = vec!["setup", "--from-debezium", db.name.as_str()];
    all.extend_from_slice(args);
    Relay::once(name, &relay_config(db, false), &all, &[])
}

/// Lost, duplicated and out-of-order events over everything in the topic (Debezium's records
/// then the relay's); the ids delivered twice; and every duplicate's records byte-equal.
fn check_topic(
    test: &str,
    written: &[Written],
    got: &[kafka::Rec],
) -> (check::Figures, Vec<kafka::Rec>) {
    let by_id: HashMap<&str, &Written> = written.iter().map(|w| (w.id.as_str(), w)).collect();
    let mut sorted: Vec<&kafka::Rec> = got.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut f = check::Figures {
        written: written.len(),
        delivered: got.len(),
        ..Default::default()
    };
    let mut first: HashMap<&str, &kafka::Rec> = HashMap::new();
    let mut last_seq: HashMap<&str, i32> = HashMap::new();
    let mut dups = Vec::new();
    for r in sorted {
        let id = r.header("id");
        let Some(w) = by_id.get(id) else {
            f.unexpected += 1;
            continue;
        };
        assert_eq!(r.key.as_deref(), Some(w.aggregate.as_str()), "key of {id}");
        assert_eq!(r.json(), w.payload, "value of {id}");
        assert_eq!(r.header("eventType"), "Event", "eventType of {id}");
        if let Some(before) = first.get(id) {
            // Debezium's copy and the relay's: what a consumer sees is the same record (beside
            // the relay's own headers, where they are on).
            let theirs = |r: &kafka::Rec| -> Vec<(String, String)> {
                let mut h: Vec<_> = r
                    .headers
                    .iter()
                    .filter(|(k, _)| !k.starts_with("outbox-relay."))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                h.sort();
                h
            };
            assert_eq!(
                (&before.key, &before.value, theirs(before), before.partition),
                (&r.key, &r.value, theirs(r), r.partition),
                "the two copies of {id} differ"
            );
            f.duplicated += 1;
            dups.push(r.clone());
            continue;
        }
        first.insert(id, r);
        let last = last_seq.entry(w.aggregate.as_str()).or_insert(0);
        if w.seq != *last + 1 {
            f.order_violations += 1;
        }
        *last = w.seq;
    }
    f.lost = written
        .iter()
        .filter(|w| !first.contains_key(w.id.as_str()))
        .count();
    check::record(test, &f);
    (f, dups)
}

/// The inserting transaction (xmin) of each duplicated event.
async fn transactions_of(db: &TestDb, ids: &[String]) -> HashSet<i64> {
    db.client
        .query(
            "SELECT DISTINCT xmin::text::bigint FROM outbox WHERE id::text = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Debezium's stored offset in the standalone file: (lsn_commit, lsn, txId).
fn offset_of(file: &Path, db: &TestDb) -> (String, String, Option<i64>) {
    let entries = read_offsets_file(&std::fs::read(file).unwrap()).unwrap();
    let o = DebeziumOffset::select(&entries, &db.name, None).unwrap();
    let show = |l: Option<relay_core::Lsn>| l.map_or("-".into(), |l| l.to_string());
    (show(o.lsn_commit), show(o.lsn), o.tx_id)
}

/// The same, as `setup` logged it (`cutover_recorded … lsn_commit=Some("…") lsn=Some("…")
/// … tx_id=Some(…)`).
fn offset_in_log(log: &str) -> (String, String, Option<i64>) {
    let line = log
        .lines()
        .find(|l| l.contains("cutover_recorded"))
        .unwrap_or_else(|| panic!("no cutover_recorded line: {log}"));
    let field = |name: &str| {
        let at = line
            .find(&format!(" {name}="))
            .map(|i| i + name.len() + 2)?;
        let rest = &line[at..];
        let v = rest.split(' ').next()?;
        Some(
            v.trim_start_matches("Some(")
                .trim_end_matches(')')
                .trim_matches('"')
                .to_string(),
        )
    };
    (
        field("lsn_commit").unwrap(),
        field("lsn").unwrap(),
        field("tx_id").and_then(|t| t.parse().ok()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cutover_from_a_running_debezium_loses_nothing() {
    let _turn = turn().await;
    let t0 = Instant::now();
    let via_file = TestDb::new("cutf").await;
    let via_topic = TestDb::new("cutt").await;
    // The file case on a standalone worker, the topic case on a one-worker distributed cluster
    // (offsets in its topic, written by Connect's KafkaOffsetBackingStore), started together.
    let group = format!("{}-connect", via_topic.name);
    let offsets = format!("{group}.offsets");
    let mut workers = Vec::new();
    let mut starting = Vec::new();
    for (db, port, mode) in [
        (&via_file, REST_PORT, "standalone"),
        (&via_topic, REST_PORT + 1, "distributed"),
    ] {
        let data = std::env::temp_dir().join(format!("{}-connect", db.name));
        std::fs::create_dir_all(&data).unwrap();
        let f = data.join("connector-in.properties");
        std::fs::write(&f, connector_properties(db)).unwrap();
        starting.push(
            start_command(&data, port)
                .arg(&f)
                .env("CONNECT_MODE", mode)
                .env("CONNECT_GROUP", &group)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        workers.push(Worker {
            data,
            slots: vec![db.name.clone()],
        });
    }
    for (mut child, w) in starting.into_iter().zip(&workers) {
        let started = child.wait().unwrap();
        assert!(
            started.success(),
            "Connect did not start; see {}",
            w.data.display()
        );
    }
    let start_ms = t0.elapsed().as_millis();
    for db in [&via_file, &via_topic] {
        eventually(
            "Debezium holds its slot",
            Duration::from_secs(60),
            || async { db.slot_active_pid().await.map(|_| ()) },
        )
        .await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = writers(&via_file, 2, &stop);
    let topic_handles = writers(&via_topic, 2, &stop);
    for db in [&via_file, &via_topic] {
        wait_records(&db.topic("order"), 150).await;
    }

    let records_ms = t0.elapsed().as_millis();
    // While Debezium holds the slot, the cutover is refused.
    let offsets_file = workers[0].data.join("standalone.offsets");
    let file_arg = offsets_file.to_str().unwrap();
    let (status, log) = setup(&via_file, &via_file.name, &["--offsets-file", file_arg]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("stop the Debezium connector first"), "{log}");

    let refused_ms = t0.elapsed().as_millis();
    let t_stop = Instant::now();
    // Debezium stops while the writers go on: the standalone worker gracefully (Connect commits
    // the offsets of everything Kafka acknowledged), the distributed one killed (its offsets are
    // those of its last flush, up to offset.flush.interval.ms = 1 s old).
    workers[0].stop();
    let pid = std::fs::read_to_string(workers[1].data.join("connect.pid")).unwrap();
    assert!(
        Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .unwrap()
            .success()
    );
    let dbz_file = records_in(&via_file.topic("order")).await;
    let dbz_topic = records_in(&via_topic.topic("order")).await;
    for db in [&via_file, &via_topic] {
        eventually("the slot is released", Duration::from_secs(20), || async {
            db.slot_active_pid().await.is_none().then_some(())
        })
        .await;
    }
    let stop_ms = t_stop.elapsed().as_millis();
    let file_offset = offset_of(&offsets_file, &via_file);
    let (status, log) = setup(&via_file, &via_file.name, &["--offsets-file", file_arg]);
    assert!(status.success(), "{log}");
    let (status, log) = setup(&via_topic, &via_topic.name, &["--offsets-topic", &offsets]);
    assert!(status.success(), "{log}");
    let topic_offset = offset_in_log(&log);
    let mut relays = Vec::new();
    for (db, exactly_once) in [(&via_file, false), (&via_topic, true)] {
        relays.push(Relay::streaming(&db.name, &relay_config(db, exactly_once)).await);
    }
    let relays_ms = t0.elapsed().as_millis();
    // The relays publish while the writers go on, then the writers stop.
    for db in [&via_file, &via_topic] {
        let before = records_in(&db.topic("order")).await;
        wait_records(&db.topic("order"), before + 100).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut written_file = Vec::new();
    for h in handles.drain(..) {
        written_file.extend(h.await.unwrap());
    }
    let mut written_topic = Vec::new();
    for h in topic_handles {
        written_topic.extend(h.await.unwrap());
    }

    for (db, written, offset, dbz, how, crashed) in [
        (
            &via_file,
            &written_file,
            &file_offset,
            dbz_file,
            "offsets file, graceful stop, at-least-once",
            false,
        ),
        (
            &via_topic,
            &written_topic,
            &topic_offset,
            dbz_topic,
            "offsets topic, killed, exactly-once",
            true,
        ),
    ] {
        let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
        let test = format!("debezium_cutover ({how})");
        let (f, dups) = check_topic(&test, written, &got);
        f.assert_nothing_lost_or_reordered(&test);
        let bound = if crashed {
            // Every duplicate is of a transaction committed at or after lsn_commit: sent by
            // Debezium after its last offset flush, never one the offset proved.
            let lsn_commit: relay_core::Lsn = offset.0.parse().unwrap();
            let at: Vec<relay_core::Lsn> = dups
                .iter()
                .map(|r| r.header("outbox-relay.commit-lsn").parse().unwrap())
                .collect();
            assert!(
                at.iter().all(|l| *l >= lsn_commit),
                "{test}: a duplicate of a transaction before lsn_commit {lsn_commit}: {at:?}"
            );
            let txns = at.iter().collect::<HashSet<_>>().len();
            format!("{txns} transactions, all committed at or after lsn_commit")
        } else {
            // Every duplicate is of the transaction the committed offset was in (what Debezium
            // had sent of it), none of one it had committed before.
            let ids: Vec<String> = dups.iter().map(|r| r.header("id").to_string()).collect();
            let txns = transactions_of(db, &ids).await;
            let bound: HashSet<i64> = offset.2.into_iter().collect();
            assert!(
                txns.is_subset(&bound),
                "{test}: duplicates of transactions {txns:?}, Debezium's offset is in {:?}",
                offset.2
            );
            "all of the offset's transaction".to_string()
        };
        check::note(&format!(
            "{test}: Debezium published {dbz} records before its stop; its offset: lsn_commit {} \
             lsn {} txId {:?}; the relay re-sent {} events, {bound}",
            offset.0, offset.1, offset.2, f.duplicated
        ));
    }
    for mut r in relays {
        r.terminate(Duration::from_secs(20));
    }
    check::note(&format!(
        "debezium_cutover: whole test {} ms (Debezium up after {start_ms} ms, 150 records each \
         after {records_ms} ms, refusal done after {refused_ms} ms, its stop {stop_ms} ms, relays \
         streaming after {relays_ms} ms)",
        t0.elapsed().as_millis()
    ));
}

/// An offsets topic in which `db`'s connector committed everything before `lsn` (a stopped
/// Debezium that never ran here: what the relay then skips never reached Kafka at all).
async fn debezium_committed_at(db: &TestDb, lsn: relay_core::Lsn) -> String {
    let offsets = format!("{}.connect-offsets", db.name);
    let value = format!(
        r#"{{"lsn_proc":{l},"lsn_commit":{l},"lsn":{l},"txId":7,"ts_usec":1}}"#,
        l = lsn.0
    );
    let key = format!(r#"["{}",{{"server":"{}"}}]"#, db.name, db.name);
    offsets_topic(&offsets, &[(key.into_bytes(), Some(value.into_bytes()))]).await;
    offsets
}

/// A new slot starts where PostgreSQL is now; Debezium's committed position is older: the
/// events between would be lost, so the cutover is refused and the slot it created dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_slot_behind_debeziums_position_is_refused() {
    let db = TestDb::new("cutn").await;
    let committed = db.current_wal_lsn().await;
    db.client
        .batch_execute(
            "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'order', 'a', 'Event', '{}')",
        )
        .await
        .unwrap();
    let offsets = debezium_committed_at(&db, committed).await;
    let (status, log) = setup(&db, &db.name, &["--offsets-topic", &offsets]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("would be lost"), "{log}");
    assert!(log.contains(&committed.to_string()), "{log}");
    assert_eq!(
        db.confirmed_flush().await,
        None,
        "the new slot was left behind"
    );
}

/// The new-slot path that goes through: the relay's slot was created while Debezium still ran,
/// and Debezium's committed position is after the slot's start. The transactions before the
/// position are skipped (here they never reached Kafka at all, so one skip too many or too few
/// shows as a lost or an unexpected record) and every later one is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_slot_created_before_debeziums_position_starts_right_after_it() {
    let db = TestDb::new("cuts").await;
    let cfg = relay_config(&db, false);
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert!(status.success(), "{log}");
    let c = connect(&db.conninfo()).await;
    let mut before = Vec::new();
    for i in 0..5 {
        before.push(
            insert_event(&c, "order", &format!("a{}", i % 2), 0)
                .await
                .unwrap(),
        );
    }
    let position = db.current_wal_lsn().await;
    let mut after = Vec::new();
    for i in 0..5 {
        after.push(
            insert_event(&c, "order", &format!("a{}", i % 2), 0)
                .await
                .unwrap(),
        );
    }
    let offsets = debezium_committed_at(&db, position).await;
    let (status, log) = setup(
        &db,
        &db.name,
        &[
            "--offsets-topic",
            &offsets,
            "--debezium-slot",
            "debezium_slot_gone",
        ],
    );
    assert!(status.success(), "{log}");
    assert!(log.contains("cutover_recorded"), "{log}");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    let got = kafka::consume_settled(vec![db.topic("order")], after.len()).await;
    let (f, _) = check_topic("cutover_new_slot", &after, &got);
    assert_eq!(
        (f.lost, f.unexpected, f.duplicated),
        (0, 0, 0),
        "{f:?}\n{}",
        relay.log_text()
    );
    relay.terminate(Duration::from_secs(10));
    db.cleanup().await;
}
