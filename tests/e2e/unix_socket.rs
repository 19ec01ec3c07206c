//! `postgres.host` a socket directory: both of the relay's connections go over PostgreSQL's
//! Unix-domain socket (a relay on the database's own host), and nothing else changes: every
//! committed event arrives once, in commit order, and the slot is confirmed to the end of WAL.

use crate::support::{TestDb, relay::Relay};

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

    relay
        .delivers_concurrent_writers_once(&db, "unix_socket")
        .await;
    db.cleanup().await;
}
