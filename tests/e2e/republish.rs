//! `outbox-relay republish`: rows read back from the outbox table become the records streaming
//! produced (same topic, key, value, `id`/`eventType` headers and commit time; commit-lsn 0/0
//! unless `pg_walinspect` reads it from the WAL still on disk), selected by ids, by aggregate and
//! by a commit-time range; a dry run sends nothing.

use std::{process::Command, time::Duration};

use crate::support::{
    TestDb,
    cluster::PgCluster,
    kafka::{self, Rec},
    relay::{self, Relay},
    writer::{self, Written},
};

/// Runs `outbox-relay republish --config <cfg> <args>`: (exit code, stdout, stderr).
fn republish(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(relay::binary())
        .arg("republish")
        .arg("--config")
        .arg(config)
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .expect("run outbox-relay republish");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn write(db: &TestDb, aggregates: &[&str], rounds: usize) -> Vec<Written> {
    let mut written = Vec::new();
    for _ in 0..rounds {
        for agg in aggregates {
            db.client.batch_execute("BEGIN").await.unwrap();
            written.push(
                writer::insert_event(&db.client, "order", agg, 0)
                    .await
                    .unwrap(),
            );
            db.client.batch_execute("COMMIT").await.unwrap();
        }
    }
    written
}

async fn now(db: &TestDb) -> String {
    db.client
        .query_one("SELECT clock_timestamp()::text", &[])
        .await
        .unwrap()
        .get(0)
}

/// Re-publishes `aggregates` (`--execute`) and stops the relay; then the topic's records, the
/// `streamed` ones and as many again, and the command's log.
async fn republished_beside_streamed(
    mut relay: Relay,
    aggregates: &str,
    topic: String,
    streamed: usize,
) -> (Vec<Rec>, String) {
    let (code, out, err) = republish(&relay.config, &["--aggregate", aggregates, "--execute"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    relay.terminate(Duration::from_secs(30));
    let expected = 2 * streamed;
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&[topic], Duration::from_secs(60), |r| r.len() >= expected)
    })
    .await
    .unwrap();
    assert_eq!(got.len(), expected);
    (got, err)
}

/// The records of `id` in broker order.
fn of<'a>(got: &'a [Rec], id: &str) -> Vec<&'a Rec> {
    let mut v: Vec<&Rec> = got.iter().filter(|r| r.header("id") == id).collect();
    v.sort_by_key(|r| (r.partition, r.offset));
    v
}

/// A republished record is the streamed one but for the commit LSN and the position (and the
/// commit time, 0 without `track_commit_timestamp`).
fn assert_same_record(streamed: &Rec, again: &Rec, commit_times: bool) {
    assert_eq!(streamed.topic, again.topic);
    assert_eq!(streamed.partition, again.partition);
    assert_eq!(streamed.key, again.key);
    assert_eq!(streamed.value, again.value);
    for h in ["id", "eventType"] {
        assert_eq!(streamed.header(h), again.header(h), "header {h}");
    }
    let time = "outbox-relay.commit-time-us";
    if commit_times {
        assert_eq!(streamed.header(time), again.header(time), "header {time}");
    } else {
        assert_eq!(
            again.header(time),
            "0",
            "header {time} without commit timestamps"
        );
    }
    assert_eq!(again.header("outbox-relay.commit-lsn"), "0/0");
    let mut names: Vec<&String> = streamed.headers.keys().collect();
    let mut again_names: Vec<&String> = again.headers.keys().collect();
    names.sort();
    again_names.sort();
    assert_eq!(names, again_names, "the same headers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_by_ids_aggregate_and_time_range_with_a_dry_run_that_sends_nothing() {
    let cluster = PgCluster::start(25600, "-c track_commit_timestamp=on");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "republish").await;
    let cfg = db.relay_config(&db.outbox_section());
    let topic = db.topic("order");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let first = write(&db, &["a1", "a2", "a3", "a4"], 3).await;
    let t1 = now(&db).await;
    let second = write(&db, &["a1", "a2", "a3", "a4"], 2).await;
    let t2 = now(&db).await;
    let all: Vec<Written> = first.iter().chain(&second).cloned().collect();
    let streamed = kafka::consume(vec![topic.clone()], Duration::from_secs(60), all.len()).await;
    assert_eq!(streamed.len(), all.len(), "streamed once each");
    relay.terminate(Duration::from_secs(30));
    let config = relay.config.clone();
    let wm = kafka::watermark_client();
    let offsets = |c| kafka::high_watermark_sum(c, &topic);
    let before = offsets(&wm);

    // Dry run: prints, sends nothing.
    let ids = format!("{},{}", all[0].id, all[5].id);
    let (code, out, err) = republish(&config, &["--ids", &ids]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("would send")).count(),
        2,
        "{out}"
    );
    assert!(
        out.contains(&all[0].id) && out.contains(&all[5].id),
        "{out}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(offsets(&wm), before, "a dry run changed the topic");
    // No selection: refused, nothing sent.
    let (code, _, err) = republish(&config, &["--execute"]);
    assert_eq!(code, Some(3), "{err}");

    // By ids.
    let (code, out, err) = republish(&config, &["--ids", &ids, "--execute"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    // By aggregate: its five events, in order.
    let (code, _, err) = republish(&config, &["--aggregate", "a2", "--execute"]);
    assert_eq!(code, Some(0), "{err}");
    // By commit time: the second batch only.
    let (code, out, err) = republish(&config, &["--since", &t1, "--until", &t2]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), second.len(), "{out}");
    let (code, _, err) = republish(&config, &["--since", &t1, "--until", &t2, "--execute"]);
    assert_eq!(code, Some(0), "{err}");

    let expected = all.len() + 2 + 5 + second.len();
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&[topic], Duration::from_secs(30), |r| r.len() >= expected)
    })
    .await
    .unwrap();
    assert_eq!(got.len(), expected);
    let mut again_total = 0;
    for w in &all {
        let recs = of(&got, &w.id);
        let by_id = [&all[0].id, &all[5].id].contains(&&w.id);
        let by_agg = w.aggregate == "a2";
        let by_time = second.iter().any(|s| s.id == w.id);
        let times = 1 + usize::from(by_id) + usize::from(by_agg) + usize::from(by_time);
        assert_eq!(recs.len(), times, "records of {} ({})", w.id, w.aggregate);
        for again in &recs[1..] {
            assert_same_record(recs[0], again, true);
        }
        again_total += times - 1;
    }
    // Each command's records of the aggregate come in its order.
    let mut a2: Vec<&Rec> = got
        .iter()
        .filter(|r| r.key.as_deref() == Some("a2") && r.header("outbox-relay.commit-lsn") == "0/0")
        .collect();
    a2.sort_by_key(|r| r.offset);
    let seqs: Vec<i64> = a2
        .iter()
        .map(|r| r.json()["seq"].as_i64().unwrap())
        .collect();
    crate::support::check::note(&format!(
        "republish: {} events streamed; re-published {again_total} (2 by id, 5 by aggregate, {} \
         by time range), each the streamed record but for commit-lsn 0/0; the dry run left the \
         topic's offsets at {before} (its records, and under transactions their commit markers)",
        all.len(),
        second.len()
    ));
    // By id (seq 2), by aggregate (1-5 in order), by time (4, 5 in order).
    assert_eq!(seqs, [2, 1, 2, 3, 4, 5, 4, 5]);
    db.cleanup().await;
}

/// Exactly-once mode (the shared cluster: `track_commit_timestamp` off): the records go out in
/// a Kafka transaction of the command's own transactional id, visible to read-committed
/// consumers, and the running relay (whose ids it does not take) streams on unfenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_republish_commits_its_records_and_leaves_the_running_relay_alone() {
    let db = TestDb::new("republisheos").await;
    let cfg = db.relay_config(&format!(
        "transactional_id = \"outbox-relay-{}\"\n{}\n[relay]\ndelivery = \"exactly-once\"\n",
        db.name,
        db.outbox_section()
    ));
    let topic = db.topic("order");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let first = write(&db, &["b1", "b2"], 3).await;
    let streamed = kafka::consume(vec![topic.clone()], Duration::from_secs(60), first.len()).await;
    assert_eq!(streamed.len(), first.len());
    let (code, out, err) = republish(&relay.config, &["--aggregate", "b1", "--execute"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert!(err.contains("republish_done"), "{err}");
    // The relay was not fenced: it streams what comes next.
    let second = write(&db, &["b1", "b2"], 2).await;
    let expected = first.len() + 3 + second.len();
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until(&[topic], Duration::from_secs(60), |r| r.len() >= expected)
    })
    .await
    .unwrap();
    assert_eq!(got.len(), expected, "read committed");
    for w in second.iter() {
        assert_eq!(
            of(&got, &w.id).len(),
            1,
            "streamed after the republish: {}",
            w.id
        );
    }
    for w in first.iter().filter(|w| w.aggregate == "b1") {
        let recs = of(&got, &w.id);
        assert_eq!(recs.len(), 2, "{}", w.id);
        assert_same_record(recs[0], recs[1], false);
    }
    assert!(relay.is_running(), "{}", relay.log_text());
    relay.terminate(Duration::from_secs(30));
    crate::support::check::note(&format!(
        "republish (exactly-once): {} streamed, 3 re-published by aggregate in a Kafka \
         transaction (read committed), {} streamed after it by the unfenced relay",
        first.len(),
        second.len()
    ));
    db.cleanup().await;
}

/// `[outbox.debezium]` (JsonConverter with schemas, extended headers, the record timestamp and
/// a header from `created_at`, a timestamptz whose text depends on the session's settings):
/// the re-published record's key, value, timestamp and headers are the streamed record's bytes,
/// but for the relay's position headers and Debezium's per-run `runId`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republished_debezium_records_are_the_streamed_bytes() {
    let db = TestDb::new("republishdbz").await;
    let cfg = db.relay_config(&format!(
        "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{db}.{{aggregatetype}}\"\n\
         headers = {{ id = \"id\" }}\n[outbox.debezium]\n\"topic.prefix\" = \"{db}\"\n\
         \"extended.headers.enabled\" = true\n\
         \"key.converter\" = \"org.apache.kafka.connect.json.JsonConverter\"\n\
         \"value.converter\" = \"org.apache.kafka.connect.json.JsonConverter\"\n\
         \"table.field.event.timestamp\" = \"created_at\"\n\
         \"table.fields.additional.placement\" = \"type:header:eventType,created_at:header:createdAt\"\n",
        db = db.name
    ));
    let topic = db.topic("order");
    let relay = Relay::streaming(&db.name, &cfg).await;
    let written = write(&db, &["d1", "d2"], 2).await;
    let streamed =
        kafka::consume(vec![topic.clone()], Duration::from_secs(60), written.len()).await;
    assert_eq!(streamed.len(), written.len());
    let (got, _) = republished_beside_streamed(relay, "d1,d2", topic, written.len()).await;
    let skip = |h: &str| h.starts_with("outbox-relay.") || h == "__debezium.context.runId";
    for w in &written {
        let recs = of(&got, &w.id);
        assert_eq!(recs.len(), 2, "{}", w.id);
        let (a, b) = (recs[0], recs[1]);
        assert_eq!((a.partition, &a.key), (b.partition, &b.key));
        assert_eq!(a.value_bytes(), b.value_bytes(), "value bytes of {}", w.id);
        assert_eq!(
            a.timestamp_ms, b.timestamp_ms,
            "record timestamp of {}",
            w.id
        );
        let mut ha: Vec<_> = a.headers.iter().filter(|(k, _)| !skip(k)).collect();
        let mut hb: Vec<_> = b.headers.iter().filter(|(k, _)| !skip(k)).collect();
        ha.sort();
        hb.sort();
        assert_eq!(ha, hb, "headers of {}", w.id);
        assert!(ha.iter().any(|(k, _)| *k == "createdAt"), "{ha:?}");
    }
    crate::support::check::note(&format!(
        "republish ([outbox.debezium] JsonConverter): {} events re-published, key, value, \
         timestamp and headers equal to the streamed records' (relay position headers and runId \
         aside)",
        written.len()
    ));
    db.cleanup().await;
}

/// The order of one transaction's rows read back from the table (issue 40: the heal's 6 order
/// violations of an early run). A row goes where the free space map finds room, so a later
/// statement of a transaction can land on an earlier page than an earlier one: here the first
/// row fills a new page and the second, too large for what is left of it, goes back to a page
/// whose free space a VACUUM recorded. Ordering by physical position alone (the build of that
/// run) would publish the second event first; the statement's command id (`cmin`) puts it back
/// in insertion order, as streaming sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_rows_on_pages_out_of_insertion_order_are_republished_in_insertion_order() {
    let db = TestDb::new("republish_pages").await;
    let pad = |n: usize| format!("{{\"pad\": \"{}\"}}", "x".repeat(n));
    // Stored in line (no compression, no TOAST): the sizes below decide the pages.
    db.client
        .batch_execute("ALTER TABLE outbox ALTER COLUMN payload SET STORAGE PLAIN")
        .await
        .unwrap();
    let insert = "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
                  VALUES (gen_random_uuid(), 'order', $1, 'Event', $2::text::jsonb) \
                  RETURNING id::text, ctid::text";
    // Page 0 full of ~1.5 KB fillers; one deleted and vacuumed: ~1.5 KB free on page 0.
    let mut fillers = Vec::new();
    for _ in 0..6 {
        let r = db
            .client
            .query_one(insert, &[&"filler", &pad(1500)])
            .await
            .unwrap();
        fillers.push((r.get::<_, String>(0), r.get::<_, String>(1)));
    }
    let on_page_0 = fillers
        .iter()
        .find(|(_, ctid)| ctid.starts_with("(0,"))
        .unwrap();
    db.client
        .execute(
            "DELETE FROM outbox WHERE id = $1::text::uuid",
            &[&on_page_0.0],
        )
        .await
        .unwrap();
    db.client.batch_execute("VACUUM outbox").await.unwrap();
    // One transaction: a ~7.6 KB event (a page of its own), then a ~1 KB one.
    db.client.batch_execute("BEGIN").await.unwrap();
    let first = db
        .client
        .query_one(insert, &[&"agg", &pad(7600)])
        .await
        .unwrap();
    let second = db
        .client
        .query_one(insert, &[&"agg", &pad(1000)])
        .await
        .unwrap();
    db.client.batch_execute("COMMIT").await.unwrap();
    let (first_id, first_ctid): (String, String) = (first.get(0), first.get(1));
    let (second_id, second_ctid): (String, String) = (second.get(0), second.get(1));
    let page = |ctid: &str| -> u32 {
        ctid.trim_start_matches('(')
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        page(&second_ctid) < page(&first_ctid),
        "the setup did not put the second row on an earlier page ({first_ctid}, {second_ctid}): \
         the test proves nothing on this server"
    );

    let config = std::env::temp_dir().join(format!("{}.toml", db.name));
    std::fs::write(&config, db.relay_config(&db.outbox_section())).unwrap();
    let (code, out, err) = republish(&config, &["--aggregate", "agg"]);
    let _ = std::fs::remove_file(&config);
    assert_eq!(code, Some(0), "{err}");
    let listed: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("would send"))
        .collect();
    let at = |id: &str| listed.iter().position(|l| l.contains(id));
    assert_eq!(listed.len(), 2, "{out}");
    assert!(
        at(&first_id) < at(&second_id),
        "the transaction's events out of insertion order (rows at {first_ctid}, {second_ctid}):\n{out}"
    );
}

/// Issue 44: while PostgreSQL still holds a transaction's commit record and `pg_walinspect` is
/// installed, a re-published record carries the commit LSN streaming gave it, and (for a whole
/// transaction) the same `outbox-relay.seq`: every header the streamed record's, for a row a
/// subtransaction inserted too (the commit record names its top-level transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republished_records_carry_the_streamed_commit_lsn_while_the_wal_holds_it() {
    let cluster = PgCluster::start(25605, "-c track_commit_timestamp=on");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "republishlsn").await;
    db.client
        .batch_execute("CREATE EXTENSION pg_walinspect")
        .await
        .expect("pg_walinspect (PostgreSQL 15+ contrib)");
    let cfg = db.relay_config(&db.outbox_section());
    let topic = db.topic("order");
    let relay = Relay::streaming(&db.name, &cfg).await;
    // Transactions of three rows, one whose second row a subtransaction inserts, and last one
    // whose only row a subtransaction inserts.
    let mut written = Vec::new();
    let mut in_subxact = Vec::new();
    for round in 0..3 {
        db.client.batch_execute("BEGIN").await.unwrap();
        for agg in ["l1", "l2", "l3"] {
            written.push(
                writer::insert_event(&db.client, "order", agg, 0)
                    .await
                    .unwrap(),
            );
        }
        db.client.batch_execute("COMMIT").await.unwrap();
        if round == 1 {
            db.client.batch_execute("BEGIN").await.unwrap();
            written.push(
                writer::insert_event(&db.client, "order", "l1", 0)
                    .await
                    .unwrap(),
            );
            db.client.batch_execute("SAVEPOINT s").await.unwrap();
            let w = writer::insert_event(&db.client, "order", "l2", 0)
                .await
                .unwrap();
            in_subxact.push(w.id.clone());
            written.push(w);
            db.client.batch_execute("RELEASE s; COMMIT").await.unwrap();
        }
    }
    db.client.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    let w = writer::insert_event(&db.client, "order", "l3", 0)
        .await
        .unwrap();
    in_subxact.push(w.id.clone());
    written.push(w);
    db.client.batch_execute("RELEASE s; COMMIT").await.unwrap();
    let streamed =
        kafka::consume(vec![topic.clone()], Duration::from_secs(60), written.len()).await;
    assert_eq!(streamed.len(), written.len());
    // A commit LSN range (dry runs): the second and third transactions, then the last on.
    let mut commits: Vec<u64> = streamed.iter().map(Rec::commit_lsn).collect();
    commits.sort_unstable();
    commits.dedup();
    assert_eq!(commits.len(), 5, "five transactions");
    let text = |l: u64| format!("{:X}/{:X}", l >> 32, l & 0xFFFF_FFFF);
    for (from, to, want) in [
        (commits[1], Some(commits[3]), 5), // the second, and the one with a subtransaction
        (commits[3], None, 4),
    ] {
        let mut args = vec!["--since-lsn".to_string(), text(from)];
        if let Some(to) = to {
            args.extend(["--until-lsn".to_string(), text(to)]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = republish(&relay.config, &args);
        assert_eq!(code, Some(0), "{err}\n{out}");
        let listed: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("would send"))
            .collect();
        let expected: Vec<&Rec> = streamed
            .iter()
            .filter(|r| r.commit_lsn() >= from && to.is_none_or(|t| r.commit_lsn() < t))
            .collect();
        assert_eq!(listed.len(), want, "{args:?}: {out}");
        assert_eq!(expected.len(), want);
        for r in expected {
            assert!(
                out.contains(r.header("id")),
                "{args:?} lists {}",
                r.header("id")
            );
        }
    }
    let (code, _, err) = republish(&relay.config, &["--since-lsn", "nonsense"]);
    assert_eq!(code, Some(3), "{err}");
    let (got, err) = republished_beside_streamed(relay, "l1,l2,l3", topic, written.len()).await;
    assert!(err.contains("commit_lsns_read"), "{err}");
    let lsn = "outbox-relay.commit-lsn";
    for w in &written {
        let recs = of(&got, &w.id);
        assert_eq!(recs.len(), 2, "{}", w.id);
        let (a, b) = (recs[0], recs[1]);
        assert_ne!(a.header(lsn), "0/0", "streamed {}", w.id);
        assert_eq!(a.header(lsn), b.header(lsn), "commit LSN of {}", w.id);
        assert_eq!(
            (&a.key, &a.value, a.partition),
            (&b.key, &b.value, b.partition)
        );
        let mut ha: Vec<_> = a.headers.iter().collect();
        let mut hb: Vec<_> = b.headers.iter().collect();
        ha.sort();
        hb.sort();
        assert_eq!(ha, hb, "every header of {}", w.id);
    }
    crate::support::check::note(&format!(
        "republish with pg_walinspect: {} events re-published ({} inserted by a \
         subtransaction), every header the streamed record's, commit LSN and seq included; \
         commit LSN ranges listed 5 and 4 events, the ones committed there",
        written.len(),
        in_subxact.len()
    ));
    db.cleanup().await;
}
