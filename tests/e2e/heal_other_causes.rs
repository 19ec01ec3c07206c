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

/// A slot dropped by hand: the same heal, from the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_dropped_by_hand_is_healed_and_what_cannot_be_healed_exits_5() {
    let cluster = PgCluster::start(25602, "-c track_commit_timestamp=on");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "healdrop").await;
    let cfg = db.relay_config(&db.outbox_section());
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let mut written = Vec::new();
    for i in 0..50 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a{}", i % 5), 0)
                .await
                .unwrap(),
        );
    }
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    // A checkpoint after the last acknowledgement (one per status interval).
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.terminate(Duration::from_secs(30));
    db.drop_slot(&db.name).await;
    for i in 0..100 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a{}", i % 5), 0)
                .await
                .unwrap(),
        );
    }
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup", "--recreate-slot", "--heal"], &[]);
    assert_eq!(exit.code(), Some(0), "{log}");
    let healed = heal_field(&log, "healed");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    for i in 0..20 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a{}", i % 5), 0)
                .await
                .unwrap(),
        );
    }
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check(
        "heal_other_causes::a_slot_dropped_by_hand_is_healed",
        |t| db.topic(t),
        &written,
        &got,
    );
    note(&format!(
        "heal (slot dropped by hand): 50 streamed, 100 in the gap, healed {healed}, 20 after; \
         delivered {}, lost {}, duplicates {}, order violations {}",
        f.delivered, f.lost, f.duplicated, f.order_violations
    ));
    f.assert_nothing_lost_or_reordered("heal after a dropped slot");

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
    db.drop_slot(&db.name).await;
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
    db.drop_slot(&db.name).await;
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
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let mut written = Vec::new();
    for i in 0..50 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a{}", i % 5), 0)
                .await
                .unwrap(),
        );
    }
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.terminate(Duration::from_secs(30));
    for i in 0..300 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a{}", i % 5), 0)
                .await
                .unwrap(),
        );
    }
    let mut reason = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        db.client.batch_execute("CHECKPOINT").await.unwrap();
        reason = db
            .client
            .query_one(
                "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1",
                &[&db.name],
            )
            .await
            .unwrap()
            .get::<_, Option<String>>(0);
        if reason.is_some() {
            break;
        }
    }
    assert_eq!(reason.as_deref(), Some("idle_timeout"));
    let (exit, log) = Relay::once(&db.name, &cfg, &["setup", "--recreate-slot", "--heal"], &[]);
    assert_eq!(exit.code(), Some(0), "{log}");
    assert!(log.contains("reason=\"idle_timeout\""), "{log}");
    let healed = heal_field(&log, "healed");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    for i in 0..20 {
        written.push(
            writer::insert_event(&db.client, "order", &format!("a{}", i % 5), 0)
                .await
                .unwrap(),
        );
    }
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
