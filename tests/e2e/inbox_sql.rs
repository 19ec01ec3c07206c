//! The SQL recipe's `examples/inbox-sql/apply.sql` run alone with psql against the real
//! PostgreSQL, fed records the way its driver feeds them (kcat's JSON envelope): an event
//! delivered three times (twice at the same moment) is applied once. The whole recipe, with
//! Kafka, is a row of `recipes.rs`.

use std::process::Command;

use crate::support::{inbox::consumer_db, repo_root};

/// One record as `kcat -C -J` prints it; quotes in the values must reach the tables unchanged.
fn record(offset: u32, event_id: &str, aggregate: &str, amount: &str) -> String {
    serde_json::json!({
        "topic": "payments", "partition": 0, "offset": offset, "tstype": "create", "ts": 1,
        "broker": 1, "headers": ["eventType", "PaymentMade", "id", event_id],
        "key": aggregate, "payload": format!("{{\"amount\": {amount}}}"),
    })
    .to_string()
}

fn psql(conninfo: &str, record: &str) -> std::process::Child {
    Command::new("psql")
        .arg(conninfo)
        .args(["-X", "-q", "-tA", "-v", "consumer=recipe", "-v", "group=g"])
        .args(["-v", &format!("record={record}")])
        .arg("-f")
        .arg(repo_root().join("examples/inbox-sql/apply.sql"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql (postgresql-client)")
}

/// Waits for psql; what apply.sql printed: "1" applied, "0" a duplicate.
fn ok(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_recipe_applies_a_redelivered_event_once() {
    let db = consumer_db("inbox_sql").await;
    let c = db.conninfo();
    let e1 = record(0, "e-1", "a-'1", "5");
    assert_eq!(ok(psql(&c, &e1)), "1");
    assert_eq!(ok(psql(&c, &record(1, "e-2", "a-'1", "2.5"))), "1");
    // The redelivery, twice at once: neither applies.
    let (x, y) = (psql(&c, &e1), psql(&c, &e1));
    assert_eq!((ok(x), ok(y)), ("0".into(), "0".into()));
    assert_eq!(ok(psql(&c, &record(2, "e-3;'", "a-2", "-1"))), "1");
    let rows: Vec<(String, i64, String)> = db
        .client
        .query(
            "SELECT aggregate_id, events, amount::text FROM recipe_totals ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        [
            ("a-'1".into(), 2, "7.5".into()),
            ("a-2".into(), 1, "-1".into())
        ]
    );
    let inbox: i64 = db
        .client
        .query_one("SELECT count(*) FROM inbox WHERE consumer = 'recipe'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(inbox, 3);
    let next: i64 = db
        .client
        .query_one(
            "SELECT next_offset FROM kafka_offsets \
             WHERE consumer_group = 'g' AND topic = 'payments' AND kafka_partition = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(next, 3, "the offset after the last record, stored with it");
    db.cleanup().await;
}
