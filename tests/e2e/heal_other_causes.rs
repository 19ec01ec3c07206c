//! `setup --recreate-slot --heal` for the other ways a slot goes: dropped by hand, and
//! PostgreSQL 18's idle timeout; and the gaps it cannot heal (insert-then-delete, `[[message]]`
//! sections), refused with exit 5 naming what is not covered.

use std::time::Duration;

use outbox_relay::telemetry::events;

use crate::{
    heal::heal_field,
    support::{
        TestDb,
        check::{self, note},
        cluster::PgCluster,
        kafka,
        relay::Relay,
        writer,
    },
};

/// The events' aggregates: `a0` to `a4`.
fn aggregate(i: usize) -> String {
    format!("a{}", i % 5)
}

/// A relay streams 50 events until its slot has confirmed them and a checkpoint followed (one
/// per status interval), and stops: the events.
async fn streamed_then_stopped(db: &TestDb, cfg: &str) -> Vec<writer::Written> {
    let mut relay = Relay::streaming(&db.name, cfg).await;
    let written = writer::insert_orders(&db.client, 50, aggregate).await;
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.terminate(Duration::from_secs(30));
    written
}

/// A slot dropped by hand: the same heal, from the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_dropped_by_hand_is_healed_and_what_cannot_be_healed_exits_5() {
    let cluster = PgCluster::start(25602, "-c track_commit_timestamp=on");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "healdrop").await;
    // The gap's commit records are still in pg_wal: the heal reads their LSNs (issue 44).
    db.client
        .batch_execute("CREATE EXTENSION pg_walinspect")
        .await
        .expect("pg_walinspect (PostgreSQL 15+ contrib)");
    let cfg = db.relay_config(&db.outbox_section());
    let mut written = streamed_then_stopped(&db, &cfg).await;
    db.drop_released_slot(&db.name).await;
    written.extend(writer::insert_orders(&db.client, 100, aggregate).await);
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup", "--recreate-slot", "--heal"], &[]);
    assert_eq!(exit.code(), Some(0), "{log}");
    let healed = heal_field(&log, "healed");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    written.extend(writer::insert_orders(&db.client, 20, aggregate).await);
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check(
        "heal_other_causes::a_slot_dropped_by_hand_is_healed",
        |t| db.topic(t),
        &written,
        &got,
    );
    note(&format!(
        "heal (slot dropped by hand): 50 streamed, 100 in the gap, healed {healed}, 20 after; \
         delivered {}, lost {}, duplicates {}, order violations {}; every healed record with \
         its commit LSN (pg_walinspect)",
        f.delivered, f.lost, f.duplicated, f.order_violations
    ));
    f.assert_nothing_lost_or_reordered("heal after a dropped slot");
    // Each event's commit LSN as its first record says: the 50 streamed, the 100 healed (one
    // transaction each, in commit order), the 20 streamed after. Healed ones carry their own
    // transaction's commit LSN, read from pg_wal, between the two streamed runs.
    let lsns: Vec<u64> = written
        .iter()
        .map(|w| {
            let r = got
                .iter()
                .find(|r| r.header("id") == w.id)
                .expect("delivered");
            r.commit_lsn()
        })
        .collect();
    assert!(
        lsns.iter().all(|&l| l > 0),
        "a record without its commit LSN: {lsns:?}"
    );
    assert!(
        lsns.windows(2).all(|w| w[0] < w[1]),
        "commit LSNs not in commit order: {lsns:?}"
    );

    // Insert-then-delete: the checkpoint's event is gone from the table, so is the gap.
    db.client
        .batch_execute(
            "BEGIN; INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'order', 'gone', 'Event', '{}'); \
             DELETE FROM outbox WHERE aggregateid = 'gone'; COMMIT;",
        )
        .await
        .unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.terminate(Duration::from_secs(30));
    db.drop_released_slot(&db.name).await;
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup", "--recreate-slot", "--heal"], &[]);
    assert_eq!(exit.code(), Some(5), "{log}");
    assert!(
        log.contains(events::HEAL_UNCOVERED) && log.contains("no longer in the outbox table"),
        "{log}"
    );
    note(&format!(
        "heal refused (insert-then-delete): exit 5, {}",
        log.lines().last().unwrap_or_default()
    ));

    // [[message]] sections: their part of a gap is in no table.
    let with_messages = format!(
        "{cfg}\n[[message]]\nprefix = \"outbox\"\ntopic = \"{}.messages\"\n",
        db.name
    );
    db.drop_released_slot(&db.name).await;
    let (exit, log) = Relay::once(
        &db.name,
        &with_messages,
        &["setup", "--recreate-slot", "--heal"],
        &[],
    );
    assert_eq!(exit.code(), Some(5), "{log}");
    assert!(log.contains("[[message]] sections"), "{log}");
    note(&format!(
        "heal refused ([[message]]): exit 5, {}",
        log.lines().last().unwrap_or_default()
    ));
    db.cleanup().await;
}

/// PostgreSQL 18: a slot invalidated by `idle_replication_slot_timeout` while the relay was
/// down is healed the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_a_slot_lost_to_the_idle_timeout_is_healed() {
    let cluster = PgCluster::start_with(
        Some(crate::support::cluster::pg_bin(18)),
        25604,
        "-c idle_replication_slot_timeout=1 -c track_commit_timestamp=on",
    );
    let db = TestDb::new_on(&cluster.base(), cluster.port, "heal18").await;
    let cfg = db.relay_config(&db.outbox_section());
    let mut written = streamed_then_stopped(&db, &cfg).await;
    written.extend(writer::insert_orders(&db.client, 300, aggregate).await);
    assert_eq!(db.wait_invalidated().await.as_deref(), Some("idle_timeout"));
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup", "--recreate-slot", "--heal"], &[]);
    assert_eq!(exit.code(), Some(0), "{log}");
    assert!(log.contains("reason=\"idle_timeout\""), "{log}");
    let healed = heal_field(&log, "healed");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    written.extend(writer::insert_orders(&db.client, 20, aggregate).await);
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    relay.terminate(Duration::from_secs(30));
    let f = check::check(
        "heal_other_causes::pg18_a_slot_lost_to_the_idle_timeout_is_healed",
        |t| db.topic(t),
        &written,
        &got,
    );
    note(&format!(
        "heal (PostgreSQL 18 idle_timeout): 50 streamed, 300 in the gap, healed {healed}, 20 \
         after; delivered {}, lost {}, duplicates {}, order violations {}",
        f.delivered, f.lost, f.duplicated, f.order_violations
    ));
    f.assert_exactly_once("heal after an idle-timeout invalidation");
    db.cleanup().await;
}
