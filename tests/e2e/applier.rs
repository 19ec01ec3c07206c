//! The articles' two services with no consumer code: `accounts` (examples/balances) changes
//! balances, each change and its `BalanceChanged` outbox row in one transaction, and the test
//! writes `AuditNote` events beside them, every 7th of which its handler refuses; the relay
//! publishes both to one 3-partition topic; `outbox-relay apply` keeps the client totals and the
//! audit log in another PostgreSQL (a cluster of this test's own) through the SQL functions of
//! examples/applier/client_balances.sql, with `on_failure = "dead-letter"`.
//!
//! Faults while both writers write (each asserted to come before the last change is committed):
//! the applier killed with SIGKILL while one of its transactions is open (seen in
//! pg_stat_activity), the relay killed with SIGKILL, a second applier joining the group and
//! leaving it (two rebalances), the broker (one of this test's own) killed with SIGKILL and
//! started again, and the consumer's PostgreSQL stopped with `-m immediate` and started again. Then: every client total equals the sum of its accounts, every event is in
//! the inbox once, no balance change or audit note was applied twice, and the refused notes are
//! each in the dead-letter table exactly once, with their error.

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::support::{
    TestDb, broker::OwnBroker, check, cluster::PgCluster, eventually, inbox::example_binary, kafka,
    kafka_brokers, relay::Relay, repo_root,
};

/// The consumer's own PostgreSQL (it is crashed on purpose).
const CONSUMER_PG_PORT: u16 = 25493;
/// A broker of this test's own (it is crashed on purpose; controller: +1).
const KAFKA_PORT: u16 = 28020;
const CHANGES: i64 = 1500;
const NOTES: i64 = 210;

async fn count(db: &TestDb, sql: &str) -> i64 {
    db.client.query_one(sql, &[]).await.unwrap().get(0)
}

async fn query_map(c: &tokio_postgres::Client, sql: &str) -> BTreeMap<String, i64> {
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn try_count(conninfo: &str, sql: &str) -> Option<i64> {
    let (c, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    c.query_one(sql, &[]).await.ok().map(|r| r.get(0))
}

fn apply_config(db: &TestDb, brokers: &str, topic: &str) -> String {
    format!(
        "[postgres]\nport = {}\ndatabase = \"{}\"\npool_size = 3\n\n\
         [kafka]\nbrokers = \"{}\"\ngroup_id = \"{}-group\"\ntopics = [\"{topic}\"]\n\
         session_timeout_ms = 6000\n\n\
         [apply]\nconsumer = \"client-balances\"\non_failure = \"dead-letter\"\nbatch_records = 50\n\
         retry_backoff_initial_ms = 50\nretry_backoff_max_ms = 1000\n\n\
         [[handler]]\nevent_type = \"BalanceChanged\"\nsql = \"SELECT apply_balance_changed(:value)\"\n\n\
         [[handler]]\nevent_type = \"AuditNote\"\nsql = \"SELECT note_audit(:value, :event_id)\"\n\n\
         [http]\nenabled = false\n",
        db.port, db.name, brokers, db.name
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applier_keeps_balances_exactly_once_through_kills_rebalances_and_a_crashed_database() {
    let started = Instant::now();
    let broker = tokio::task::spawn_blocking(|| OwnBroker::start(KAFKA_PORT, ""));
    let brokers = format!("127.0.0.1:{KAFKA_PORT}");
    let cluster = tokio::task::spawn_blocking(|| PgCluster::start(CONSUMER_PG_PORT, ""))
        .await
        .unwrap();
    let accounts_db = TestDb::new("ap_accounts").await;
    let clients_db = TestDb::new_on(&cluster.base(), CONSUMER_PG_PORT, "ap_clients").await;
    for (db, file) in [
        (&accounts_db, "examples/balances/accounts.sql"),
        (&clients_db, "examples/applier/client_balances.sql"),
    ] {
        let sql = std::fs::read_to_string(repo_root().join(file)).unwrap();
        db.client.batch_execute(&sql).await.unwrap();
    }
    let broker = broker.await.unwrap();
    let topic = accounts_db.topic("account");
    kafka::create_topic_on(&brokers, &topic, 3).await;
    // The fenced pass (RELAY_TEST_FENCED=1) runs the relay exactly-once, the plain one
    // at-least-once.
    let eos = std::env::var("RELAY_TEST_FENCED").is_ok_and(|v| v == "1");
    let relay_cfg = accounts_db
        .relay_config(&format!(
            "{}\n[relay]\n{}restart_backoff_initial_ms = 100\nrestart_backoff_max_ms = 1000\n",
            accounts_db.outbox_section(),
            if eos {
                "delivery = \"exactly-once\"\n"
            } else {
                ""
            }
        ))
        .replace(&kafka_brokers(), &brokers);
    let mut relay = Relay::streaming(&accounts_db.name, &relay_cfg).await;
    let cfg = apply_config(&clients_db, &brokers, &topic);
    let name = |n: &str| format!("{}-{n}", clients_db.name);
    let (status, log) = Relay::once(&name("setup"), &cfg, &["apply", "setup"], &[]);
    assert!(status.success(), "apply setup: {log}");
    let mut a1 = Relay::start_with(&name("a1"), &cfg, &["apply", "run"], &[]);

    // The writers: balance changes (4 connections, >= 15 s) and audit notes (>= 12.6 s).
    let pg_env = |db: &TestDb| {
        vec![
            ("PGHOST", "127.0.0.1".to_string()),
            ("PGPORT", db.port.to_string()),
            ("PGUSER", "postgres".into()),
            ("PGDATABASE", db.name.clone()),
        ]
    };
    let mut writer_env = pg_env(&accounts_db);
    writer_env.extend([
        ("CHANGES", CHANGES.to_string()),
        ("CONCURRENCY", "4".into()),
        ("ACCOUNTS", "24".into()),
        ("CLIENTS", "6".into()),
        ("PAUSE_MS", "40".into()),
    ]);
    let mut writer = Command::new(example_binary("balances", "accounts"))
        .envs(writer_env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let notes = {
        let conninfo = accounts_db.conninfo();
        tokio::spawn(async move {
            let c = crate::support::connect(&conninfo).await;
            for n in 0..NOTES {
                c.execute(
                    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES \
                     (gen_random_uuid(), 'account', $1, 'AuditNote', \
                      jsonb_build_object('n', $2::int, 'bad', $2::int % 7 = 3))",
                    &[&format!("audit-{}", n % 5), &(n as i32)],
                )
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        })
    };
    let committed = || count(&accounts_db, "SELECT count(*) FROM outbox");

    // Fault 1: the applier is killed while one of its transactions is open.
    let in_tx = "SELECT count(*) FROM pg_stat_activity WHERE application_name = \
                 'outbox-relay-apply-apply' AND xact_start IS NOT NULL";
    let conninfo = clients_db.conninfo();
    eventually(
        "an applier transaction open",
        Duration::from_secs(30),
        || async { (try_count(&conninfo, in_tx).await.unwrap_or(0) > 0).then_some(()) },
    )
    .await;
    a1.kill9();
    let at_applier_kill = committed().await;
    let applied_at_kill = count(&clients_db, "SELECT count(*) FROM inbox").await;
    let mut a1 = Relay::start_with(&name("a1"), &cfg, &["apply", "run"], &[]);

    // Fault 2: the relay is killed and restarted.
    tokio::time::sleep(Duration::from_millis(400)).await;
    relay.kill9();
    let at_relay_kill = committed().await;
    relay = Relay::start(&accounts_db.name, &relay_cfg);

    // Faults 3 and 4: a second applier joins (rebalance), then leaves (SIGTERM, rebalance).
    let mut a2 = Relay::start_with(&name("a2"), &cfg, &["apply", "run"], &[]);
    a2.wait_log("apply_partitions_assigned", Duration::from_secs(30))
        .await;
    let at_join = committed().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = a2.terminate(Duration::from_secs(30));
    assert!(status.success(), "a2 exits 0 on SIGTERM: {}", a2.log_text());
    let at_leave = committed().await;

    // Faults 5 and 6: the broker crashes, and while it is down the consumer's PostgreSQL
    // crashes too; both come back.
    broker.kill9();
    let at_broker_kill = committed().await;
    cluster.stop("immediate");
    let at_db_crash = committed().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart();
    let broker = tokio::task::spawn_blocking(move || {
        broker.restart("");
        broker
    })
    .await
    .unwrap();
    for (fault, at) in [
        ("applier kill -9", at_applier_kill),
        ("relay kill -9", at_relay_kill),
        ("second applier joining", at_join),
        ("second applier leaving", at_leave),
        ("broker kill -9", at_broker_kill),
        ("consumer database crash", at_db_crash),
    ] {
        assert!(
            at < CHANGES + NOTES,
            "the {fault} came after every event was committed ({at}): not while writing"
        );
    }
    assert!(writer.wait().unwrap().success(), "accounts writer");
    notes.await.unwrap();
    let total = committed().await;
    assert_eq!(total, CHANGES + NOTES);

    // Convergence: every event claimed (inbox) and the positions at the log's end.
    let clients_db = clients_db.reconnect().await;
    let refused = (0..NOTES).filter(|n| n % 7 == 3).count() as i64;
    eventually(
        "the applier to claim every event",
        Duration::from_secs(90),
        || async {
            (count(&clients_db, "SELECT count(*) FROM inbox").await >= total
                && count(&clients_db, "SELECT count(*) FROM outbox_apply_dead_letter").await
                    >= refused)
                .then_some(())
        },
    )
    .await;
    let converged = started.elapsed();
    let status = a1.terminate(Duration::from_secs(30));
    assert!(status.success(), "a1 exits 0 on SIGTERM: {}", a1.log_text());

    let expected = query_map(
        &accounts_db.client,
        "SELECT client_id, sum(balance)::bigint FROM accounts GROUP BY 1",
    )
    .await;
    let totals = query_map(
        &clients_db.client,
        "SELECT client_id, total FROM client_totals",
    )
    .await;
    let events = count(
        &clients_db,
        "SELECT coalesce(sum(events), 0)::bigint FROM client_totals",
    )
    .await;
    let notes_applied = count(&clients_db, "SELECT count(*) FROM audit_notes").await;
    let notes_distinct = count(&clients_db, "SELECT count(DISTINCT n) FROM audit_notes").await;
    let dead = count(&clients_db, "SELECT count(*) FROM outbox_apply_dead_letter").await;
    let dead_ok = count(
        &clients_db,
        "SELECT count(*) FROM outbox_apply_dead_letter WHERE event_type = 'AuditNote' \
         AND error LIKE '%is refused%' AND (convert_from(value, 'UTF8')::jsonb->>'bad')::boolean",
    )
    .await;
    let inbox = count(&clients_db, "SELECT count(*) FROM inbox").await;
    let in_kafka = tokio::task::spawn_blocking({
        let (topic, brokers) = (topic.clone(), brokers.clone());
        move || kafka::high_watermark_sum(&kafka::watermark_client_on(&brokers), &topic)
    })
    .await
    .unwrap();
    check::note(&format!(
        "applier ({}): {CHANGES} balance changes + {NOTES} audit notes ({refused} refused) through \
         applier kill -9 with a transaction open (after {at_applier_kill} committed, {applied_at_kill} \
         claimed), relay kill -9 (after {at_relay_kill}), a second applier joining ({at_join}) and \
         leaving ({at_leave}), the broker killed (after {at_broker_kill}), the consumer's PostgreSQL \
         crashed (after {at_db_crash}); the topic's log ends sum to \
         {in_kafka} (records, re-sends and, with transactions, their markers); inbox {inbox}, balance events applied {events}, notes applied \
         {notes_applied}, dead letters {dead}; converged {:.1} s after the start; totals equal: {}",
        if eos {
            "relay exactly-once"
        } else {
            "relay at-least-once"
        },
        converged.as_secs_f64(),
        totals == expected
    ));
    assert_eq!(
        totals, expected,
        "every client total = the sum of its accounts"
    );
    assert_eq!(events, CHANGES, "each balance change applied exactly once");
    assert_eq!(inbox, total, "every event claimed once");
    assert_eq!(
        (notes_applied, notes_distinct),
        (NOTES - refused, NOTES - refused),
        "each accepted note applied once"
    );
    assert_eq!(
        (dead, dead_ok),
        (refused, refused),
        "each refused note dead-lettered once"
    );
    relay.terminate(Duration::from_secs(30));
    accounts_db.cleanup().await;
    drop(broker);
}

/// The inbox cleanup deletes this consumer's claims older than what its topic can replay (a
/// topic keeping records 60 s, segments rolled every 60 s: 7 minutes with the margin) and no
/// other: fresh claims and another consumer's old ones stay. A configured retention shorter than
/// the topic allows stops the applier at start (exit 3), naming the option and the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_cleanup_deletes_only_claims_the_topic_can_no_longer_replay() {
    let db = TestDb::new("ap_retention").await;
    let topic = format!("{}.notes", db.name);
    kafka::create_topic_with_configs(
        &topic,
        &[("retention.ms", "60000"), ("segment.ms", "60000")],
    )
    .await;
    let cfg = format!(
        "[postgres]\nport = {}\ndatabase = \"{}\"\n\n[kafka]\nbrokers = \"{}\"\n\
         group_id = \"{}-group\"\ntopics = [\"{topic}\"]\n\n[apply]\nconsumer = \"c\"\n\
         ignore_types = [\"Note\"]\n\n[retention]\ninterval_ms = 1000\n\n[http]\nlisten = \"127.0.0.1:{}\"\n",
        db.port,
        db.name,
        kafka_brokers(),
        db.name,
        crate::support::http::free_port()
    );
    let (status, log) = Relay::once(
        &format!("{}-setup", db.name),
        &cfg,
        &["apply", "setup"],
        &[],
    );
    assert!(status.success(), "apply setup: {log}");
    db.client
        .batch_execute(
            "INSERT INTO inbox (consumer, event_id, processed_at) VALUES \
             ('c', 'old-1', now() - interval '2 days'), ('c', 'old-2', now() - interval '1 hour'), \
             ('c', 'recent', now() - interval '2 minutes'), \
             ('other', 'old-3', now() - interval '2 days')",
        )
        .await
        .unwrap();
    {
        use rdkafka::{
            ClientConfig,
            message::{Header, OwnedHeaders},
            producer::{FutureProducer, FutureRecord},
        };
        let p: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", kafka_brokers())
            .create()
            .unwrap();
        for id in ["new-1", "new-2"] {
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: "id",
                    value: Some(id),
                })
                .insert(Header {
                    key: "eventType",
                    value: Some("Note"),
                });
            p.send(
                FutureRecord::to(&topic)
                    .key("k")
                    .payload("{}")
                    .headers(headers),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        }
    }
    let mut applier = Relay::start_with(&format!("{}-run", db.name), &cfg, &["apply", "run"], &[]);
    let claims = || async {
        db.client
            .query(
                "SELECT consumer || '/' || event_id FROM inbox ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    let left = eventually(
        "the cleanup to delete the old claims",
        Duration::from_secs(60),
        || async {
            let c = claims().await;
            (!c.iter().any(|x| x.starts_with("c/old"))
                && c.iter().filter(|x| x.starts_with("c/new")).count() == 2)
                .then_some(c)
        },
    )
    .await;
    assert_eq!(left, ["c/new-1", "c/new-2", "c/recent", "other/old-3"]);
    applier
        .wait_log("apply_inbox_cleaned", Duration::from_secs(10))
        .await;
    assert!(applier.terminate(Duration::from_secs(30)).success());
    check::note(&format!("applier_retention: claims left {left:?}"));

    let refused = cfg.replace(
        "interval_ms = 1000\n",
        "interval_ms = 1000\ninbox_ms = 60000\n",
    );
    let (status, log) = Relay::once(
        &format!("{}-refused", db.name),
        &refused,
        &["apply", "run"],
        &[],
    );
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("retention.inbox_ms is refused") && log.contains(&topic),
        "the refusal names the option and the topic: {log}"
    );
    db.cleanup().await;
}

/// What an operator does with the applier, end to end: a handler with a typo fails `apply
/// setup` (exit 3, naming it); a record whose handler raises halts its partition under
/// `on_failure = "halt"` (nothing after it applied), goes to the dead-letter table under
/// `"dead-letter"` (the records after it applied), and once the handler is fixed `apply redrive`
/// applies it once (a second re-drive finds nothing); a stored position beyond the log's end
/// makes `apply status` exit 4 and keeps the partition from starting, until `apply reset` moves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_halt_dead_letter_redrive_reset_and_see_handler_typos_at_setup() {
    let db = TestDb::new("ap_ops").await;
    let topic = format!("{}.ops", db.name);
    kafka::create_topic(&topic, 1).await;
    db.client
        .batch_execute(
            "CREATE TABLE ops_sum (n int NOT NULL, event_id text NOT NULL);
             CREATE FUNCTION ops_add(v jsonb, id text) RETURNS void LANGUAGE plpgsql AS $$
             BEGIN
               IF (v->>'n')::int < 0 THEN RAISE EXCEPTION 'negative %', v->>'n'; END IF;
               INSERT INTO ops_sum VALUES ((v->>'n')::int, id);
             END $$;",
        )
        .await
        .unwrap();
    let cfg = |policy: &str, sql: &str| {
        format!(
            "[postgres]\nport = {}\ndatabase = \"{}\"\n\n[kafka]\nbrokers = \"{}\"\n\
             group_id = \"{}-group\"\ntopics = [\"{topic}\"]\n\n[apply]\nconsumer = \"ops\"\n\
             on_failure = \"{policy}\"\n\n[[handler]]\nevent_type = \"Add\"\nsql = \"{sql}\"\n\n\
             [http]\nenabled = false\n",
            db.port,
            db.name,
            kafka_brokers(),
            db.name
        )
    };
    let good = "SELECT ops_add(:value, :event_id)";
    let name = |n: &str| format!("{}-{n}", db.name);
    let (status, log) = Relay::once(
        &name("typo"),
        &cfg("halt", "SELECT ops_ad(:value)"),
        &["apply", "setup"],
        &[],
    );
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("handler[0]") && log.contains("ops_ad"),
        "names the handler: {log}"
    );
    let (status, log) = Relay::once(&name("setup"), &cfg("halt", good), &["apply", "setup"], &[]);
    assert!(status.success(), "{log}");

    let p: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap();
    for (i, n) in [1, -1, 2].into_iter().enumerate() {
        use rdkafka::message::{Header, OwnedHeaders};
        let (id, value) = (format!("ev-{i}"), format!("{{\"n\": {n}}}"));
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "id",
                value: Some(&id),
            })
            .insert(Header {
                key: "eventType",
                value: Some("Add"),
            });
        p.send(
            rdkafka::producer::FutureRecord::to(&topic)
                .key("k")
                .payload(&value)
                .headers(headers),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    }
    let sums = || async {
        db.client
            .query("SELECT n FROM ops_sum ORDER BY event_id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i32>(0))
            .collect::<Vec<_>>()
    };
    let dead = || async { count(&db, "SELECT count(*) FROM outbox_apply_dead_letter").await };
    let status_of = |config: &std::path::Path| {
        let out = Command::new(crate::support::relay::binary())
            .args(["apply", "status", "--config"])
            .arg(config)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };

    // Halt: the first record applied, the raising one stops the partition, the third waits.
    let mut a = Relay::start_with(&name("halt"), &cfg("halt", good), &["apply", "run"], &[]);
    a.wait_log("apply_partition_halted", Duration::from_secs(60))
        .await;
    assert!(a.log_text().contains("negative -1"), "{}", a.log_text());
    assert_eq!((sums().await, dead().await), (vec![1], 0));
    assert!(a.terminate(Duration::from_secs(30)).success());
    let (code, text) = status_of(&a.config);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{topic}[0]"))
                && l.split_whitespace().nth(1) == Some("1")),
        "position 1: {text}"
    );

    // Dead-letter: the raising record goes to the table, the one after it is applied.
    let mut a = Relay::start_with(
        &name("dead"),
        &cfg("dead-letter", good),
        &["apply", "run"],
        &[],
    );
    eventually(
        "the third record applied",
        Duration::from_secs(60),
        || async { (sums().await == [1, 2]).then_some(()) },
    )
    .await;
    assert_eq!(dead().await, 1);
    assert!(a.terminate(Duration::from_secs(30)).success());

    // The handler fixed: the re-drive applies the dead letter once, and only once.
    db.client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION ops_add(v jsonb, id text) RETURNS void LANGUAGE sql AS $$
               INSERT INTO ops_sum VALUES ((v->>'n')::int, id) $$",
        )
        .await
        .unwrap();
    for expected in [
        "re-driven: 1; failed again: 0",
        "re-driven: 0; failed again: 0",
    ] {
        let out = Command::new(crate::support::relay::binary())
            .args(["apply", "redrive", "--config"])
            .arg(&a.config)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(expected),
            "{expected}: {text}"
        );
    }
    assert_eq!((sums().await, dead().await), (vec![1, -1, 2], 0));

    // A position beyond the log's end: status says so (exit 4), the partition does not start.
    let reset = |to: &str| {
        let out = Command::new(crate::support::relay::binary())
            .args(["apply", "reset", "--config"])
            .arg(&a.config)
            .args(["--topic", &topic, "--partition", "0", "--to", to])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(reset("100").contains("position 3 -> 100"));
    let (code, text) = status_of(&a.config);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("OUTSIDE THE LOG"), "{text}");
    let mut a = Relay::start_with(
        &name("out"),
        &cfg("dead-letter", good),
        &["apply", "run"],
        &[],
    );
    a.wait_log("apply_position_out_of_log", Duration::from_secs(60))
        .await;
    assert!(
        a.log_text().contains("beyond the log end 3"),
        "{}",
        a.log_text()
    );
    assert!(a.terminate(Duration::from_secs(30)).success());
    reset("3");
    assert_eq!(status_of(&a.config).0, Some(0));
    assert_eq!(sums().await, vec![1, -1, 2], "nothing applied twice");
    check::note(
        "applier_operations: typo at setup exit 3, halt at 1 of 3, dead-letter + redrive once, reset beyond the end exit 4",
    );
    db.cleanup().await;
}
