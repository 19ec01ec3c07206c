//! The outbox tables both sides read (one per combination and payload type) and their rows.

use std::fmt::Write as _;

use super::combos::{COMBOS, rows_of, table};
use crate::support::TestDb;

pub(super) async fn create_tables(db: &TestDb) {
    let mut sql = String::new();
    for combo in COMBOS {
        for ty in combo.types.chars() {
            let payload = match ty {
                'j' => "jsonb",
                't' => "text",
                _ => "bytea",
            };
            let _ = writeln!(
                sql,
                "CREATE TABLE {} (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
                 aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, \
                 payload {payload}, ts timestamp, tracingspancontext text, ver varchar(10), \
                 n int);",
                table(combo, ty)
            );
        }
    }
    db.client.batch_execute(&sql).await.unwrap();
}

pub(super) async fn insert_rows(db: &TestDb) {
    for combo in COMBOS {
        for ty in combo.types.chars() {
            // `ts` becomes the record timestamp in two combinations, and Kafka's retention
            // (7 days, checked every 5 minutes) deletes older records mid-test: keep it recent.
            let mut sql = format!("INSERT INTO {} VALUES ", table(combo, ty));
            for (n, (i, p)) in rows_of(combo).into_iter().enumerate() {
                let payload = match (p, ty) {
                    (None, _) => "NULL".to_string(),
                    (Some(p), 'b') => format!("convert_to({}, 'UTF8')", quote(p)),
                    (Some(p), _) => quote(p),
                };
                // A `mix…` combination's rows carry three aggregate types (`j-0`, `j-1`, `j-2`)
                // that its route.topic.regex brings back to one topic.
                let aggregate_type = if combo.name.starts_with("mix") {
                    format!("{ty}-{}", i % 3)
                } else {
                    ty.to_string()
                };
                let _ = write!(
                    sql,
                    "{}('00000000-0000-0000-0000-{i:012}', '{aggregate_type}', 'agg-{k}', 'T{i}', {payload}, \
                     date_trunc('second', localtimestamp) - interval '1 hour' \
                     + interval '0.678912 second' + {i} * interval '1.0013 second', \
                     NULL, 'v{i}', {n})",
                    if n == 0 { "" } else { ", " },
                    k = i % 5,
                    n = i % 3,
                );
            }
            db.client.batch_execute(&sql).await.unwrap();
        }
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
