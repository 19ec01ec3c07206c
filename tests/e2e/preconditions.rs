//! Preconditions the relay cannot stream without are refused before streaming, each with the
//! fix: a server older than PostgreSQL 14, a slot created with two_phase, a mapped column the
//! table lacks. And a precondition that changes while streaming: an outbox table renamed while
//! in the publication is matched by OID, so its rows are never confirmed without a record.

use std::time::Duration;

use outbox_relay::telemetry::events;

use crate::support::{
    TestDb,
    cluster::{PgCluster, pg_bin},
    eventually, kafka,
    relay::Relay,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_13_is_refused_with_exit_3() {
    let cluster = PgCluster::start_with(Some(pg_bin(13)), 25474, "");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "pg13").await;
    let cfg = db.relay_config(&db.outbox_section());
    for cmd in ["setup", "run"] {
        let (status, log) = Relay::once(&db.name, &cfg, &[cmd], &[]);
        assert_eq!(status.code(), Some(3), "{cmd}: {log}");
        assert!(
            log.contains("runs PostgreSQL 13.22") && log.contains("needs PostgreSQL 14 or later"),
            "{cmd}: {log}"
        );
    }
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_phase_slot_is_refused_with_the_gap_its_fix_leaves() {
    let db = TestDb::new("twophase").await;
    let cfg = db.relay_config(&db.outbox_section());
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, true)",
            &[&db.name],
        )
        .await
        .unwrap();
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("two_phase = true") && log.contains("NOT relayed"),
        "{log}"
    );
    // PostgreSQL 18 (the version matrix runs this on every version): the advice's own command
    // clears the flag in place, and the relay streams from the slot.
    let version = db.server_version_num().await;
    if version >= 180_000 {
        let advised = format!("ALTER_REPLICATION_SLOT \"{}\" (TWO_PHASE false)", db.name);
        assert!(log.contains(&advised), "{log}");
        let out = std::process::Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", &advised])
            .arg(format!("{} replication=database", db.conninfo()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut relay = Relay::streaming(&db.name, &cfg).await;
        let w = crate::support::writer::insert_event(&db.client, "order", "tp", 0)
            .await
            .unwrap();
        let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
        assert!(got.iter().any(|r| r.header("id") == w.id), "{got:?}");
        relay.terminate(Duration::from_secs(30));
    }
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_checks_every_mapped_column_against_the_table() {
    let db = TestDb::new("mapcol").await;
    let cfg = db.relay_config(&format!(
        "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{}.{{nope}}\"\n",
        db.name
    ));
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("has no column \"nope\"") && log.contains("part of the topic"),
        "{log}"
    );
    assert_eq!(
        db.confirmed_flush().await,
        None,
        "no slot for a broken mapping"
    );
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_an_outbox_table_renamed_in_the_publication_are_still_published() {
    let db = TestDb::new("renamed").await;
    let cfg = db.relay_config(&db.outbox_section());
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    db.client
        .batch_execute(
            "BEGIN;
             ALTER TABLE outbox RENAME TO outbox_renamed;
             INSERT INTO outbox_renamed(id, aggregatetype, aggregateid, type, payload)
               VALUES ('00000000-0000-0000-0000-0000000000e1', 'order', 'k', 'Event', '{\"n\": 1}');
             COMMIT;",
        )
        .await
        .unwrap();
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
    assert!(
        got.iter()
            .any(|r| r.header("id") == "00000000-0000-0000-0000-0000000000e1"),
        "the renamed table's row must reach Kafka: {got:?}\n{}",
        relay.log_text()
    );
    relay
        .wait_log(events::OUTBOX_TABLE_RENAMED, Duration::from_secs(10))
        .await;
    // The publication no longer lists the configured name: the drift check stops the relay.
    let (status, log) = eventually("the relay to stop", Duration::from_secs(30), || {
        let r = relay
            .wait(Duration::from_millis(10))
            .map(|s| (s, relay.log_text()));
        async move { r }
    })
    .await;
    assert_eq!(status.code(), Some(3), "{log}");
    db.cleanup().await;
}
