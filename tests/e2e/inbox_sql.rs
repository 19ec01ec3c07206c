//! The SQL recipe (`examples/inbox-sql/apply.sql`) run with psql against the real PostgreSQL:
//! an event delivered three times (twice at the same moment) is applied once.

use std::process::Command;

use crate::support::{inbox::consumer_db, repo_root};

fn psql(conninfo: &str, event_id: &str, aggregate: &str, amount: &str) -> std::process::Child {
    Command::new("psql")
        .arg(conninfo)
        .args(["-X", "-q", "-v", "consumer=recipe"])
        .args(["-v", &format!("event_id={event_id}")])
        .args(["-v", &format!("aggregate_id={aggregate}")])
        .args(["-v", &format!("amount={amount}")])
        .arg("-f")
        .arg(repo_root().join("examples/inbox-sql/apply.sql"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql (postgresql-client)")
}

fn ok(child: std::process::Child) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_recipe_applies_a_redelivered_event_once() {
    let db = consumer_db("inbox_sql").await;
    let c = db.conninfo();
    ok(psql(&c, "e-1", "a-1", "5"));
    ok(psql(&c, "e-2", "a-1", "2.5"));
    // The redelivery, twice at once.
    let (x, y) = (psql(&c, "e-1", "a-1", "5"), psql(&c, "e-1", "a-1", "5"));
    ok(x);
    ok(y);
    ok(psql(&c, "e-3", "a-2", "-1"));
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
            ("a-1".into(), 2, "7.5".into()),
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
    db.cleanup().await;
}
