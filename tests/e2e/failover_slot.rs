//! PostgreSQL 17 failover slots (`postgres.failover_slot`), on real PostgreSQL 17 servers
//! (infra/pg/17, own clusters and ports). The standby streams through a physical slot that the
//! primary lists in `synchronized_standby_slots`, and synchronises the relay's slot: after a
//! promotion the relay finds its slot on the new primary, with no copy of the data directory
//! and no re-created slot, and nothing it published can be missing there, because the primary
//! hands a change to the relay only after the standby has it.
//!
//! The test synchronises on demand with `pg_sync_replication_slots()`. In production
//! `sync_replication_slots = on` runs the same synchronisation in a worker, but that worker
//! backs off to 30 s between rounds on an idle server, which took 70 s here before the first copy.

use std::time::Duration;

use outbox_relay::telemetry::events;
use tokio_postgres::Client;

use crate::{
    failover::{on_standby, write},
    support::{
        TestDb,
        cluster::{PgCluster, pg17_bin},
        connect, eventually,
        proxy::Proxy,
        relay::Relay,
    },
};

/// The slot `name` on `client`'s server: (failover, synced, confirmed_flush_lsn).
async fn slot_row(client: &Client, name: &str) -> Option<(bool, bool, relay_core::Lsn)> {
    client
        .query_opt(
            "SELECT failover, synced, coalesce(confirmed_flush_lsn, '0/0')::text \
               FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get::<_, String>(2).parse().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_slot_is_synchronised_to_the_standby_and_followed_after_promotion() {
    let primary = PgCluster::start_with(Some(pg17_bin()), 25456, "");
    let admin = connect(&format!("{} dbname=postgres", primary.base())).await;
    admin
        .batch_execute("SELECT pg_create_physical_replication_slot('standby_phys')")
        .await
        .unwrap();
    primary.stop("fast");
    let standby = PgCluster::clone_standby(
        &primary,
        25457,
        "-c primary_slot_name=standby_phys -c hot_standby_feedback=on",
    );
    primary.restart();
    // Set after the copy: a promoted standby must not wait for a slot it does not have.
    let admin = connect(&format!("{} dbname=postgres", primary.base())).await;
    for sql in [
        "ALTER SYSTEM SET synchronized_standby_slots = 'standby_phys'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    let db = TestDb::new_on(&primary.base(), primary.port, "fslot").await;
    let proxy = Proxy::start(0, primary.port).await;
    let cfg = db
        .relay_config(&format!(
            "{}\n[relay]\nrestart_backoff_initial_ms = 100\nrestart_backoff_max_ms = 500\n",
            db.outbox_section()
        ))
        .replace("[postgres]\n", "[postgres]\nfailover_slot = true\n")
        .replace(
            &format!("port = {}", primary.port),
            &format!("port = {}", proxy.port),
        );

    // A slot created without failover is refused with the command that fixes it; that command
    // works and keeps the slot.
    let plain = format!("{}_plain", db.name);
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&plain],
        )
        .await
        .unwrap();
    let plain_cfg = cfg.replace(
        &format!("slot = \"{}\"", db.name),
        &format!("slot = \"{plain}\""),
    );
    let (status, log) = Relay::once(&db.name, &plain_cfg, &["setup"], &[]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("was created without failover"), "{log}");
    let out = std::process::Command::new("/usr/lib/postgresql/15/bin/psql")
        .args([
            "-X",
            &format!("{} dbname={} replication=database", primary.base(), db.name),
            "-c",
            &format!("ALTER_REPLICATION_SLOT \"{plain}\" (FAILOVER true)"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (status, log) = Relay::once(&db.name, &plain_cfg, &["setup"], &[]);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(slot_row(&db.client, &plain).await.unwrap().0);
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&plain])
        .await
        .unwrap();

    // The relay creates its slot with failover; the standby keeps a synchronised copy.
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let (failover, synced, _) = slot_row(&db.client, &db.name).await.unwrap();
    assert!(failover && !synced);
    let mut written = write(&db, "a", 5).await;
    let end_a = db.current_wal_lsn().await;
    db.wait_confirmed(end_a, Duration::from_secs(30)).await;
    let on_standby_pg = connect(&format!("{} dbname=postgres", standby.base())).await;
    eventually(
        "the standby's synchronised copy of the slot past `a`",
        Duration::from_secs(30),
        || async {
            on_standby_pg
                .batch_execute("SELECT pg_sync_replication_slots()")
                .await
                .unwrap();
            match slot_row(&on_standby_pg, &db.name).await {
                Some((true, true, confirmed)) if confirmed >= end_a => Some(()),
                _ => None,
            }
        },
    )
    .await;
    let b = write(&db, "b", 5).await;
    let end_b = db.current_wal_lsn().await;
    db.wait_confirmed(end_b, Duration::from_secs(30)).await;

    // The primary crashes right after the relay confirmed `b`; the standby is promoted.
    primary.stop("immediate");
    standby.promote();
    proxy.retarget(standby.port);
    relay
        .wait_log(events::TIMELINE_CHANGED, Duration::from_secs(60))
        .await;
    let sdb = on_standby(&db, &standby).await;
    let c = write(&sdb, "c", 5).await;
    written.extend(b);
    written.extend(c);
    let f = db
        .check_order_topic("failover_slot_followed", &written, Duration::from_secs(60))
        .await;
    f.assert_nothing_lost_or_reordered(&relay.log_text());
    // The copy was synchronised past `a`, not since: `b` may be sent again.
    assert!(f.duplicated <= 5, "{f:?}\n{}", relay.log_text());
    let end_c = sdb.current_wal_lsn().await;
    sdb.wait_confirmed(end_c, Duration::from_secs(30)).await;
    assert_eq!(relay.terminate(Duration::from_secs(30)).code(), Some(0));
}
