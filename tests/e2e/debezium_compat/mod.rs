//! Side by side with the real thing: Debezium 3.6.1 (Kafka Connect 4.3.1 standalone, the
//! PostgreSQL connector and the Outbox Event Router from Maven, `infra/debezium/`) and
//! outbox-relay read the same rows, and every record is compared by event id: key bytes, value
//! bytes, header names (in order) and bytes, partition, and the timestamp where
//! `table.field.event.timestamp` sets it.
//!
//! One Connect worker runs one connector per combination (own slot, publication, topics), and
//! one relay runs one `[[outbox]]` per combination and payload type; the worker is stopped
//! when the test ends, passed or not.

mod combos;
mod records;
mod rows;
mod sides;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::support::{
    TestDb,
    debezium::{Worker, start_command, turn},
    relay::Relay,
    repo_root,
};
use combos::COMBOS;

const REST_PORT: u16 = 28200;

fn plugins() -> PathBuf {
    repo_root().join("infra/debezium/plugins/debezium-connector-postgres")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_and_the_relay_write_the_same_bytes() {
    let _turn = turn().await;
    assert!(
        plugins()
            .join("debezium-connector-postgres-3.6.1.Final.jar")
            .exists(),
        "no Debezium plugin jars in {}: run infra/install-deps.sh",
        plugins().display()
    );
    let db = TestDb::new("dbzc").await;
    rows::create_tables(&db).await;
    let data = std::env::temp_dir().join(format!("{}-connect", db.name));
    std::fs::create_dir_all(&data).unwrap();
    let mut files = Vec::new();
    for combo in COMBOS {
        let f = data.join(format!("{}.properties", combo.name));
        std::fs::write(&f, sides::connector_properties(&db.name, combo)).unwrap();
        files.push(f);
    }
    let t0 = Instant::now();
    let slots: Vec<String> = COMBOS
        .iter()
        .map(|c| format!("{}_{}", db.name, c.name))
        .collect();
    let worker = Worker {
        data: data.clone(),
        slots: slots.clone(),
    };
    let started = start_command(&data, REST_PORT)
        .args(&files)
        .status()
        .unwrap();
    assert!(
        started.success(),
        "Connect did not start; see {}",
        data.display()
    );
    // A drop-in runs without the relay's own position headers.
    let cfg = db.relay_config(&format!(
        "[relay]\nrelay_headers = false\n\n{}",
        sides::relay_sections(&db.name)
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    // RUNNING is not "streaming": wait until every connector's slot is in use.
    crate::support::eventually(
        "the Debezium slots are active",
        Duration::from_secs(60),
        || async {
            let n: i64 = db
            .client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE active AND slot_name = ANY($1)",
                &[&slots],
            )
            .await
            .unwrap()
            .get(0);
            (n == slots.len() as i64).then_some(())
        },
    )
    .await;
    rows::insert_rows(&db).await;

    let mut report = String::from(
        "| combination | records | key | value | headers | partition | timestamp |\n|---|---|---|---|---|---|---|\n",
    );
    let mut diffs = String::new();
    let mut all_equal = true;
    for combo in COMBOS {
        let compared = records::compare(&db.name, combo);
        report.push_str(&compared.row);
        diffs.push_str(&compared.diffs);
        all_equal &= compared.equal;
    }
    eprintln!(
        "{report}\n(side by side in {:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    relay.terminate(Duration::from_secs(10));
    drop(worker);
    db.cleanup().await;
    let _ = std::fs::remove_dir_all(&data);
    assert!(
        all_equal,
        "records differ from Debezium's:\n{diffs}\n{report}"
    );
}
