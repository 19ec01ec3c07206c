//! The articles' example, both halves, converging through faults: `accounts` (examples/balances)
//! changes balances with 4 connections, each change and its `BalanceChanged` outbox row in one
//! transaction; the relay publishes them to a broker of this test's own; `client-balances`, in
//! another database, keeps per-client totals with the inbox. Meanwhile the relay is killed with
//! SIGKILL and restarted, the broker is restarted (both asserted to come before the writer's
//! last commit), and the consumer exits twice right after a database commit and before its
//! offset commit (`CRASH_AFTER_COMMITS`); at the end a new consumer group replays the whole
//! topic. Every client total must equal the sum of its accounts' balances, every event must be
//! applied exactly once (applied == distinct events == changes committed), and the redeliveries
//! the inbox absorbed are counted (> 0).

use std::{
    collections::BTreeMap,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use crate::support::{
    TestDb,
    broker::OwnBroker,
    check, eventually,
    inbox::{RunFigures, example_binary},
    kafka, kafka_brokers,
    relay::Relay,
    repo_root,
};

/// The broker's port (controller: +1); this test's range is 28000-28099.
const KAFKA_PORT: u16 = 28010;

fn kafka_script(name: &str) {
    let out = Command::new(repo_root().join("infra/kafka").join(name))
        .env("KAFKA_PORT", KAFKA_PORT.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "infra/kafka/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One run of a service binary, stdout kept for its figures line, stderr in a file.
struct Service {
    child: Option<Child>,
    name: String,
}

impl Service {
    fn start(bin: &str, name: &str, env: &[(&str, String)]) -> Service {
        let dir = repo_root().join("target/e2e/balances");
        std::fs::create_dir_all(&dir).unwrap();
        let err = std::fs::File::create(dir.join(format!("{name}.err"))).unwrap();
        let child = Command::new(example_binary("balances", bin))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap();
        Service {
            child: Some(child),
            name: name.to_string(),
        }
    }

    /// Waits (bounded) for the exit; returns the status and the figures line.
    async fn finish(mut self, timeout: Duration) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + timeout;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                panic!("{} still running after {timeout:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    fn terminate(&self) {
        let pid = self.child.as_ref().unwrap().id();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn query_map(db: &TestDb, sql: &str) -> BTreeMap<String, i64> {
    db.client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    db.client.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_converge_through_relay_broker_and_consumer_faults() {
    let started = Instant::now();
    // The broker starts (a JVM: seconds) while the databases are made.
    let broker = tokio::task::spawn_blocking(|| OwnBroker::start(KAFKA_PORT, ""));
    let brokers = format!("127.0.0.1:{KAFKA_PORT}");
    let accounts_db = TestDb::new("bal_accounts").await;
    let clients_db = TestDb::new("bal_clients").await;
    for (db, files) in [
        (&accounts_db, &["examples/balances/accounts.sql"][..]),
        (
            &clients_db,
            &[
                "migrations/0003_inbox.sql",
                "examples/balances/client_balances.sql",
            ][..],
        ),
    ] {
        for f in files {
            let sql = std::fs::read_to_string(repo_root().join(f)).unwrap();
            db.client.batch_execute(&sql).await.unwrap();
        }
    }
    let _broker = broker.await.unwrap();
    let topic = accounts_db.topic("account");
    kafka::create_topic_on(&brokers, &topic, 3).await;
    let cfg = accounts_db
        .relay_config(&format!(
            "{}\n[relay]\nrestart_backoff_initial_ms = 100\nrestart_backoff_max_ms = 1000\n",
            accounts_db.outbox_section()
        ))
        .replace(&kafka_brokers(), &brokers);
    let mut relay = Relay::streaming(&accounts_db.name, &cfg).await;

    let pg = |db: &TestDb| {
        vec![
            ("PGHOST", "127.0.0.1".to_string()),
            ("PGPORT", db.port.to_string()),
            ("PGUSER", "postgres".into()),
            ("PGDATABASE", db.name.clone()),
        ]
    };
    let consumer = |group: &str, crash_after: Option<u64>, idle_ms: u64| {
        let mut env = pg(&clients_db);
        env.extend([
            ("BROKERS", brokers.clone()),
            ("TOPIC", topic.clone()),
            ("GROUP", group.to_string()),
            ("IDLE_MS", idle_ms.to_string()),
        ]);
        if let Some(n) = crash_after {
            env.push(("CRASH_AFTER_COMMITS", n.to_string()));
        }
        env
    };
    const CHANGES: i64 = 3000;
    let mut writer_env = pg(&accounts_db);
    writer_env.extend([
        ("CHANGES", CHANGES.to_string()),
        ("CONCURRENCY", "4".into()),
        ("ACCOUNTS", "24".into()),
        ("CLIENTS", "6".into()),
        // >= 7.5 s of writing however fast the machine (750 changes per writer, 10 ms apart):
        // the faults below must come while it writes.
        ("PAUSE_MS", "10".into()),
    ]);
    let writer = Service::start("accounts", "accounts", &writer_env);
    eprintln!(
        "balances: writer started at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut runs: Vec<RunFigures> = Vec::new();

    // Fault 1: the consumer dies between its database commit and its offset commit.
    let c1 = Service::start(
        "client-balances",
        "consumer-1",
        &consumer("g1", Some(150), 0),
    );
    let (status, out) = c1.finish(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(42), "consumer-1: {out}");
    runs.push(RunFigures::parse(&out));
    eprintln!(
        "balances: c1 exited at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let c2 = Service::start(
        "client-balances",
        "consumer-2",
        &consumer("g1", Some(600), 0),
    );

    // Fault 2: the relay is killed with SIGKILL and restarted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_relay_kill = count(&accounts_db, "SELECT count(*) FROM outbox").await;
    relay.kill9();
    relay = Relay::start(&accounts_db.name, &cfg);

    // Fault 3: the broker is restarted (its data kept).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let at_broker_stop = count(&accounts_db, "SELECT count(*) FROM outbox").await;
    kafka_script("stop.sh");
    kafka_script("start.sh");
    let at_broker_start = count(&accounts_db, "SELECT count(*) FROM outbox").await;
    eprintln!(
        "balances: broker restarted at {:.1} s; changes committed at the relay kill \
         {at_relay_kill}, at the broker stop {at_broker_stop}, once it was back {at_broker_start}",
        started.elapsed().as_secs_f64()
    );
    // The faults must hit a running workload: changes committed after each of them are what
    // the restarted relay and broker have to carry. They come ~1.3 s after consumer-1 applied
    // its 150 events, well inside the writer's 7.5 s floor; a slow machine slows the writer too.
    for (fault, at) in [
        ("relay kill", at_relay_kill),
        ("broker stop", at_broker_stop),
    ] {
        assert!(
            at < CHANGES,
            "the {fault} came after the writer had committed all {CHANGES} changes ({at}): \
             it did not happen while writing"
        );
    }

    // Fault 1 again, after the broker came back.
    let (status, out) = c2.finish(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(42), "consumer-2: {out}");
    runs.push(RunFigures::parse(&out));
    let c3 = Service::start("client-balances", "consumer-3", &consumer("g1", None, 0));
    eprintln!(
        "balances: c2 exited at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let (status, out) = writer.finish(Duration::from_secs(60)).await;
    assert!(status.success(), "accounts: {out}");
    let committed = count(&accounts_db, "SELECT count(*) FROM outbox").await;
    assert_eq!(committed, CHANGES, "accounts committed every change: {out}");
    eprintln!(
        "balances: writer done at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Convergence: every event applied (bounded wait on the consumer's own table).
    eventually(
        "client-balances to apply every event",
        Duration::from_secs(60),
        || async {
            (count(
                &clients_db,
                "SELECT coalesce(sum(events), 0)::bigint FROM client_totals",
            )
            .await
                >= committed)
                .then_some(())
        },
    )
    .await;
    let converged = started.elapsed();
    eprintln!(
        "balances: converged at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    c3.terminate();
    let (status, out) = c3.finish(Duration::from_secs(30)).await;
    assert!(status.success(), "consumer-3: {out}");
    runs.push(RunFigures::parse(&out));

    // A replay of the whole topic by a new consumer group: all absorbed.
    let replay = Service::start("client-balances", "replay", &consumer("g2", None, 3000));
    let (status, out) = replay.finish(Duration::from_secs(60)).await;
    assert!(status.success(), "replay: {out}");
    let replay = RunFigures::parse(&out);
    eprintln!(
        "balances: replayed at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // What Kafka holds (read committed): every committed event, maybe some twice (the relay's
    // kill -9 re-sends what was in flight).
    let got = {
        let (brokers, topic) = (brokers.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            kafka::consume_until_from(&brokers, &[topic], Duration::from_secs(30), |r| {
                r.len() as u64 >= replay.records
            })
        })
        .await
        .unwrap()
    };
    let distinct: std::collections::HashSet<&str> = got.iter().map(|r| r.header("id")).collect();

    let expected = query_map(
        &accounts_db,
        "SELECT client_id, sum(balance)::bigint FROM accounts GROUP BY 1",
    )
    .await;
    let totals = query_map(&clients_db, "SELECT client_id, total FROM client_totals").await;
    let applied: u64 = runs.iter().map(|r| r.applied).sum();
    let absorbed: u64 = runs.iter().map(|r| r.duplicates).sum();
    let inbox_rows = count(&clients_db, "SELECT count(*) FROM inbox").await;
    check::note(&format!(
        "{}balances: {committed} balance changes (4 writers, 24 accounts, 6 clients) through relay \
         kill -9 (after {at_relay_kill} committed), broker restart (after {at_broker_stop}; \
         {at_broker_start} once back), 2 consumer exits between DB commit and offset commit; Kafka \
         holds {} records of {} distinct events; consumer runs applied {applied}, absorbed {absorbed} \
         redeliveries ({}); replay of the topic: {} records, {} applied, {} absorbed; \
         converged {:.1} s after the start; client totals equal: {}",
        if crate::support::fenced_pass() {
            "fenced/"
        } else {
            ""
        },
        got.len(),
        distinct.len(),
        runs.iter()
            .map(|r| format!("{}/{}", r.applied, r.duplicates))
            .collect::<Vec<_>>()
            .join(", "),
        replay.records,
        replay.applied,
        replay.duplicates,
        converged.as_secs_f64(),
        totals == expected,
    ));
    assert_eq!(
        totals, expected,
        "every client total = the sum of its accounts"
    );
    assert_eq!(
        distinct.len() as i64,
        committed,
        "every committed event is in Kafka"
    );
    assert_eq!(applied as i64, committed, "each event applied exactly once");
    assert_eq!(inbox_rows, committed);
    assert_eq!(
        count(&clients_db, "SELECT sum(events)::bigint FROM client_totals").await,
        committed,
        "nothing applied twice"
    );
    assert!(
        absorbed >= 2,
        "each consumer exit leaves one record to redeliver: {runs:?}"
    );
    assert_eq!(
        (replay.records, replay.applied, replay.duplicates),
        (got.len() as u64, 0, got.len() as u64),
        "the replay applies nothing"
    );
    relay.terminate(Duration::from_secs(30));
    accounts_db.cleanup().await;
    clients_db.cleanup().await;
}
