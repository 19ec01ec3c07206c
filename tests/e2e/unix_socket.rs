//! `postgres.host` a socket directory: both of the relay's connections go over PostgreSQL's
//! Unix-domain socket (a relay on the database's own host), and nothing else changes: every
//! committed event arrives once, in commit order, and the slot is confirmed to the end of WAL.

use std::time::Duration;

use crate::support::{TestDb, check, kafka, relay::Relay, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_the_socket_directory_streams_over_the_unix_socket() {
    let db = TestDb::new("unixsock").await;
    let dirs: String = db
        .client
        .query_one("SHOW unix_socket_directories", &[])
        .await
        .unwrap()
        .get(0);
    let dir = dirs.split(',').next().unwrap().trim().to_string();
    assert!(dir.starts_with('/'), "a socket directory: {dirs:?}");
    let cfg = db.relay_config(&db.outbox_section()).replacen(
        "[postgres]\n",
        &format!("[postgres]\nhost = \"{dir}\"\n"),
        1,
    );
    let mut relay = Relay::streaming(&db.name, &cfg).await;

    // The slot's walsender serves a Unix-socket client (no address, port -1).
    let port: i32 = db
        .client
        .query_one(
            "SELECT r.client_port FROM pg_stat_replication r \
             JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1",
            &[&db.name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        port, -1,
        "the replication connection is not on the Unix socket"
    );

    let stats = writer::run_writers(&db.conninfo(), 4, 60, 20).await;
    let got = kafka::consume(
        vec![db.topic("order")],
        Duration::from_secs(90),
        stats.written.len(),
    )
    .await;
    let f = check::check("unix_socket", |t| db.topic(t), &stats.written, &got);
    check::assert_absent(&stats.discarded, &got);
    f.assert_exactly_once("");

    let end = db.current_wal_lsn().await;
    db.wait_confirmed(end, Duration::from_secs(30)).await;
    let status = relay.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "graceful stop must exit 0, got {status}; log:\n{}",
        relay.log_text()
    );
    db.cleanup().await;
}
