//! The applier on the articles' own workload (issue 41): `BalanceChanged` events keyed by
//! account (the relay's order guarantee) in a 6-partition topic, each moving the total of one
//! of 5 client rows that many accounts share (examples/applier/client_balances.sql), with the
//! default `pool_size` and `batch_records`. Events are produced straight to Kafka at
//! `RELAY_TEST_SHARED_RATE` per second (default 500) for `RELAY_TEST_SHARED_SECS` seconds
//! (default 60, the figure). The applier must keep up: every total right within 5 s of
//! the writer's stop, and no more than a handful of deadlocks in PostgreSQL's own count
//! (`pg_stat_database.deadlocks`, read once the applier's connections are closed).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig,
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};

use crate::support::{
    TestDb,
    applier::{count, setup, subscribed_config},
    check, kafka, kafka_brokers,
    relay::Relay,
    repo_root,
};

const PARTITIONS: i32 = 6;
const CLIENTS: usize = 5;
const ACCOUNTS: usize = 60;
/// Deadlocks tolerated over the whole run ("a handful").
const DEADLOCKS_AT_MOST: i64 = 5;
/// The writer's stop to every total right.
const CONVERGE_WITHIN: Duration = Duration::from_secs(5);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn deadlocks(db: &TestDb) -> i64 {
    count(
        db,
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applier_keeps_up_with_handlers_that_share_rows_across_partitions() {
    let rate = env_or("RELAY_TEST_SHARED_RATE", 500);
    let secs = env_or("RELAY_TEST_SHARED_SECS", 60);
    let db = TestDb::new("ap_shared").await;
    let sql =
        std::fs::read_to_string(repo_root().join("examples/applier/client_balances.sql")).unwrap();
    db.client.batch_execute(&sql).await.unwrap();
    let topic = format!("{}.account", db.name);
    kafka::create_topic(&topic, PARTITIONS).await;
    // The defaults: pool_size 4, batch_records 100, batch_wait_ms 0.
    let cfg = subscribed_config(
        &db,
        &topic,
        "[apply]\nconsumer = \"client-balances\"\non_failure = \"dead-letter\"\n\n\
         [[handler]]\nevent_type = \"BalanceChanged\"\nsql = \"SELECT apply_balance_changed(:value)\"\n",
        Some(crate::support::http::free_port()),
    );
    setup(&db, &cfg);
    let deadlocks_before = deadlocks(&db).await;
    let mut applier = Relay::start_with(&format!("{}-run", db.name), &cfg, &["apply", "run"], &[]);
    applier
        .wait_log("apply_partitions_assigned", Duration::from_secs(60))
        .await;

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("linger.ms", "2")
        .create()
        .unwrap();
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let total = rate * secs;
    // Ticks of 100 ms, each offering a tenth of a second's events.
    let per_tick = (rate / 10).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        tick.tick().await;
        let n = per_tick.min(total - sent);
        let mut sends = Vec::with_capacity(n as usize);
        for i in sent..sent + n {
            let account = (i as usize * 7919) % ACCOUNTS;
            let client = format!("client-{}", account % CLIENTS);
            let delta = (i % 19) as i64 - 9;
            let e = expected.entry(client.clone()).or_default();
            e.0 += delta;
            e.1 += 1;
            let value = format!(
                "{{\"account\": \"acct-{account}\", \"client\": \"{client}\", \"delta\": {delta}}}"
            );
            let (key, id) = (format!("acct-{account}"), format!("ev-{i}"));
            let (p, topic) = (&producer, &topic);
            sends.push(async move {
                let headers = OwnedHeaders::new()
                    .insert(Header {
                        key: "id",
                        value: Some(&id),
                    })
                    .insert(Header {
                        key: "eventType",
                        value: Some("BalanceChanged"),
                    });
                p.send(
                    FutureRecord::to(topic)
                        .key(&key)
                        .payload(&value)
                        .headers(headers),
                    Duration::from_secs(30),
                )
                .await
                .unwrap();
            });
        }
        futures::future::join_all(sends).await;
        sent += n;
    }
    let offered_for = started.elapsed();
    let stopped = Instant::now();
    let applied = || {
        count(
            &db,
            "SELECT coalesce(sum(events), 0)::bigint FROM client_totals",
        )
    };
    let backlog_at_stop = total as i64 - applied().await;
    let mut converged = None;
    while stopped.elapsed() < CONVERGE_WITHIN + Duration::from_secs(1) {
        if applied().await == total as i64 {
            converged = Some(stopped.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let backlog_after = total as i64 - applied().await;
    assert!(applier.terminate(Duration::from_secs(30)).success());
    // Each backend's counters reach pg_stat_database by its exit at the latest.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dl = deadlocks(&db).await - deadlocks_before;
    let log = applier.log_text();
    let (conflicts, retries) = (
        log.matches("apply_transaction_conflict:").count(),
        log.matches("apply_transaction_retry:").count(),
    );
    let figures = format!(
        "applier_shared_rows: {total} events offered in {:.1} s ({:.0}/s, {PARTITIONS} partitions, \
         {ACCOUNTS} accounts, {CLIENTS} client rows, default pool_size/batch_records): backlog \
         {backlog_at_stop} at the writer's stop, {backlog_after} {:.0} s later, converged {}, \
         {dl} deadlocks (pg_stat_database), {conflicts} conflicts and {retries} other retries \
         logged",
        offered_for.as_secs_f64(),
        total as f64 / offered_for.as_secs_f64(),
        CONVERGE_WITHIN.as_secs_f64() + 1.0,
        converged.map_or("no".to_string(), |d| format!("in {:.1} s", d.as_secs_f64())),
    );
    check::note(&figures);
    assert!(
        converged.is_some_and(|d| d <= CONVERGE_WITHIN),
        "not converged within {CONVERGE_WITHIN:?} of the writer's stop: {figures}"
    );
    assert!(dl <= DEADLOCKS_AT_MOST, "too many deadlocks: {figures}");
    let rows = db
        .client
        .query(
            "SELECT client_id, total, events FROM client_totals ORDER BY client_id",
            &[],
        )
        .await
        .unwrap();
    let got: BTreeMap<String, (i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    assert_eq!(got, expected, "every client's total and event count");
    db.cleanup().await;
}
