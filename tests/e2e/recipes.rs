//! The inbox recipes (`examples/inbox-*`, one contract: `examples/recipes/README.md`) against
//! the real relay's output: each event applied once, redeliveries absorbed and counted, and a
//! record that cannot be de-duplicated stops the program with its offset uncommitted (in the
//! Kafka group, or for the SQL recipe in its `kafka_offsets` table).
//!
//! Table-driven: every test runs every row of [`RECIPES`] (concurrently, each in its own
//! database and topics). A row whose folder is not on the branch is skipped with a note.

use std::collections::BTreeMap;

use futures::future::join_all;

use crate::support::{
    TestDb, check, kafka,
    recipe::{self, Offsets, RECIPES, Recipe, Summary},
    relay::Relay,
};

const AGGREGATES: usize = 4;
const EVENTS: usize = 24;

/// A TestDb that is also a recipe's consumer database (the inbox and the effect table).
async fn consumer_db(hint: &str) -> TestDb {
    let db = TestDb::new(hint).await;
    for file in ["migrations/0003_inbox.sql", "examples/recipes/schema.sql"] {
        let sql = std::fs::read_to_string(crate::support::repo_root().join(file)).unwrap();
        db.client.batch_execute(&sql).await.unwrap();
    }
    db
}

/// The rows present on this branch; the others are noted as skipped.
async fn present(test: &str) -> Vec<&'static Recipe> {
    let mut rows = Vec::new();
    for r in &RECIPES {
        if r.program().await.is_some() {
            rows.push(r);
        } else {
            check::note(&format!(
                "{test}: SKIPPED the {} recipe: {} does not exist on this branch",
                r.name, r.dir
            ));
        }
    }
    assert!(
        rows.iter().any(|r| r.name == "go") && rows.iter().any(|r| r.name == "java"),
        "the Go and Java recipes must be there"
    );
    rows
}

/// Totals per aggregate as `recipe_totals` holds them: (events, amount in cents).
async fn totals(db: &TestDb) -> BTreeMap<String, (i64, i64)> {
    db.client
        .query(
            "SELECT aggregate_id, events, (amount * 100)::bigint FROM recipe_totals",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recipe_applies_each_relayed_event_once_and_absorbs_redeliveries() {
    let rows = present("recipes_apply_once").await;
    join_all(rows.into_iter().map(apply_once)).await;
}

async fn apply_once(r: &'static Recipe) {
    let db = consumer_db(&format!("recipe_{}", r.name)).await;
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&db.outbox_section())).await;

    // EVENTS outbox rows over AGGREGATES aggregates, amounts with cents, in transactions of 6;
    // `expected` is what the rows say the totals are.
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut first = None;
    let mut writer = crate::support::connect(&db.conninfo()).await;
    for batch in 0..EVENTS / 6 {
        let tx = writer.transaction().await.unwrap();
        for i in batch * 6..batch * 6 + 6 {
            let (agg, cents) = (
                format!("acc-{}", i % AGGREGATES),
                (i * 137 % 1000 + 1) as i64,
            );
            let payload = format!("{{\"amount\": {}.{:02}}}", cents / 100, cents % 100);
            let id = uuid::Uuid::new_v4().to_string();
            tx.execute(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                 VALUES ($1::text::uuid, 'payment', $2, 'PaymentMade', $3::text::jsonb)",
                &[&id, &agg, &payload],
            )
            .await
            .unwrap();
            let e = expected.entry(agg.clone()).or_default();
            *e = (e.0 + 1, e.1 + cents);
            first.get_or_insert((id, agg, payload));
        }
        tx.commit().await.unwrap();
    }
    let topic = db.topic("payment");
    let relayed = kafka::consume(
        vec![topic.clone()],
        std::time::Duration::from_secs(60),
        EVENTS,
    )
    .await;
    assert!(relayed.len() >= EVENTS, "the relay published {relayed:?}");
    let test = format!("recipes_apply_once_{}", r.name);

    // First delivery: every event applied.
    let run = r.run(&test, &db.name, &topic, "g1").await;
    assert!(run.status.success(), "{} recipe failed: {run:?}", r.name);
    let n = EVENTS as u64;
    assert_eq!(
        run.summary(),
        summary(n, n, 0),
        "{} recipe: {run:?}",
        r.name
    );
    assert_eq!(totals(&db).await, expected, "{} recipe: totals", r.name);

    // Redelivery of one event (same id header) behind the committed offset: only it is read
    // (the group's offsets were committed), and it is absorbed.
    let (id, agg, payload) = first.unwrap();
    kafka::produce_one(&topic, &agg, &payload, &id).await;
    let run = r.run(&test, &db.name, &topic, "g1").await;
    assert!(run.status.success(), "{} recipe failed: {run:?}", r.name);
    assert_eq!(
        run.summary(),
        summary(1, 0, 1),
        "{} recipe: {run:?}",
        r.name
    );

    // The whole topic again (a new group starts at the earliest offset): all duplicates.
    let run = r.run(&test, &db.name, &topic, "g2").await;
    assert!(run.status.success(), "{} recipe failed: {run:?}", r.name);
    assert_eq!(
        run.summary(),
        summary(n + 1, 0, n + 1),
        "{} recipe: {run:?}",
        r.name
    );
    assert_eq!(totals(&db).await, expected, "{} recipe: totals", r.name);
    let inbox: i64 = db
        .client
        .query_one("SELECT count(*) FROM inbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(inbox, EVENTS as i64, "{} recipe: inbox rows", r.name);
    check::note(&format!(
        "{}{test}: events={EVENTS} applied={n} redelivered={} absorbed={} totals_equal=true",
        if crate::support::fenced_pass() {
            "fenced/"
        } else {
            ""
        },
        n + 2,
        n + 2
    ));

    relay.terminate(std::time::Duration::from_secs(30));
    db.cleanup().await;
}

fn summary(records: u64, applied: u64, duplicates: u64) -> Summary {
    Summary {
        records,
        applied,
        duplicates,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recipe_stops_at_a_record_without_an_id_header_and_does_not_commit_past_it() {
    let rows = present("recipes_missing_id").await;
    join_all(rows.into_iter().map(missing_id)).await;
}

async fn missing_id(r: &'static Recipe) {
    let db = consumer_db(&format!("recipe_noid_{}", r.name)).await;
    let topic = db.topic("payment");
    kafka::create_topic(&topic, 1).await;
    // offset 0: good; 1: no id header; 2: good, behind the bad one.
    kafka::produce_one(&topic, "acc-1", r#"{"amount": 3}"#, "ev-0").await;
    recipe::produce_without_id(&topic, "acc-1", r#"{"amount": 4}"#).await;
    kafka::produce_one(&topic, "acc-2", r#"{"amount": 5}"#, "ev-2").await;
    let test = format!("recipes_missing_id_{}", r.name);

    // Twice: the bad record is never skipped, a restart stops at it again.
    for attempt in 1..=2 {
        let run = r.run(&test, &db.name, &topic, "g1").await;
        assert!(
            !run.status.success(),
            "{} recipe must exit non-zero (attempt {attempt}): {run:?}",
            r.name
        );
        assert!(
            run.stderr.contains("id"),
            "{} recipe must say the id header is missing: {run:?}",
            r.name
        );
        let totals = totals(&db).await;
        assert_eq!(
            totals,
            BTreeMap::from([("acc-1".to_string(), (1, 300))]),
            "{} recipe: only the record before the bad one applied (attempt {attempt})",
            r.name
        );
        let group = recipe::group_id(&topic, "g1");
        let committed = match r.offsets {
            Offsets::KafkaGroup => {
                let t = topic.clone();
                tokio::task::spawn_blocking(move || recipe::committed_offset(&group, &t))
                    .await
                    .unwrap()
            }
            Offsets::Database => recipe::stored_offset(&db, &group, &topic).await,
        };
        assert_eq!(
            committed,
            Some(1),
            "{} recipe: the offset stays at the bad record (attempt {attempt})",
            r.name
        );
    }
    db.cleanup().await;
}
