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
    TestDb, applier::count, broker::OwnBroker, check, cluster::PgCluster, eventually,
    inbox::example_binary, kafka, kafka_brokers, relay::Relay, repo_root,
};

/// The consumer's own PostgreSQL (it is crashed on purpose).
const CONSUMER_PG_PORT: u16 = 25465;
/// A broker of this test's own (it is crashed on purpose; controller: +1).
const KAFKA_PORT: u16 = 28020;
const CHANGES: i64 = 1500;
const NOTES: i64 = 210;

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
    let eos = crate::support::fenced_pass();
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
