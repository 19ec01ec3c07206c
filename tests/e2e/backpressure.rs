//! Back-pressure never holds PostgreSQL's checkpointer. While Kafka takes no records the relay
//! stops reading the stream and the walsender blocks writing to it; once the retained WAL
//! passes `max_slot_wal_keep_size` the checkpointer waits for that walsender to let the slot
//! go. So the relay releases the replication connection (at once when `wal_status` leaves
//! reserved/extended, else after `relay.backpressure_release_ms`), PostgreSQL applies the
//! limit its operator set, and the relay stops with the documented lost-slot error.

use std::time::{Duration, Instant};

use crate::support::{
    TestDb, broker, check, cluster::PgCluster, eventually, http, relay::Relay, writer,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_with_wal_past_the_limit_does_not_block_a_checkpoint() {
    let cluster = PgCluster::start(25473, "-c max_slot_wal_keep_size=64MB");
    let (_broker, kafka) = broker::behind_proxy(26992, 26996).await;
    let db = TestDb::new_on(&cluster.base(), cluster.port, "bpckpt").await;
    let cfg = db
        .relay_config(&format!(
            "{}\n[relay]\nmax_in_flight_records = 1000\nrestart_backoff_max_ms = 2000\n\n\
             [monitor]\npoll_interval_ms = 500\n\n[http]\nlisten = \"127.0.0.1:0\"\n",
            db.outbox_section()
        ))
        .replace(
            &format!("brokers = \"{}\"", crate::support::kafka_brokers()),
            "brokers = \"127.0.0.1:26996\"",
        )
        .replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 2000\n");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    writer::insert_event(&db.client, "order", "k", 0)
        .await
        .unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;

    kafka.cut();
    // ~120 MB of outbox rows: far more than the relay may hold in flight.
    for i in 0..120 {
        db.client
            .execute(
                "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
                 SELECT gen_random_uuid(), 'order', 'bulk-' || $1::text, 'Event', \
                        jsonb_build_object('p', repeat('x', 1000)) \
                 FROM generate_series(1, 1000)",
                &[&i.to_string()],
            )
            .await
            .unwrap();
    }
    let started = Instant::now();
    let checkpoint = tokio::time::timeout(
        Duration::from_secs(60),
        db.client.batch_execute("CHECKPOINT"),
    )
    .await;
    let took = started.elapsed();
    assert!(
        matches!(checkpoint, Ok(Ok(()))),
        "CHECKPOINT did not return within 60 s ({checkpoint:?}):\n{}",
        relay.log_text()
    );
    check::note(&format!(
        "backpressure_checkpoint: CHECKPOINT returned in {} ms with Kafka down and WAL past \
         max_slot_wal_keep_size",
        took.as_millis()
    ));
    assert!(took < Duration::from_secs(20), "CHECKPOINT took {took:?}");
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert!(log.contains("backpressure_released"), "{log}");
    // The monitor or the next attempt's preflight finds the slot invalidated, whichever is first.
    assert!(log.contains("was invalidated (wal_status = lost"), "{log}");
    assert_eq!(status.code(), Some(3), "{log}");
    db.cleanup().await;
}

/// Behind one record Kafka does not acknowledge, the relay keeps reading other tables'
/// transactions (they carry no record) and its memory must not grow with them: the ack
/// tracker folds them into one mark. The figure is the tracker's pending-transaction gauge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_transactions_behind_a_stuck_record_take_no_memory() {
    let (_broker, kafka) = broker::behind_proxy(27092, 27096).await;
    let db = TestDb::new("stuckmem").await;
    // Other tables in the publication: their transactions reach the relay (PostgreSQL 15
    // sends nothing for transactions that touch no published table).
    db.client
        .batch_execute(&format!(
            "CREATE PUBLICATION {} FOR TABLE outbox, business WITH (publish = 'insert')",
            db.name
        ))
        .await
        .unwrap();
    let cfg = db
        .relay_config(&format!(
            "{}\n[http]\nlisten = \"127.0.0.1:0\"\n",
            db.outbox_section()
        ))
        .replace(
            &format!("brokers = \"{}\"", crate::support::kafka_brokers()),
            "brokers = \"127.0.0.1:27096\"",
        )
        // Without Kafka transactions even in the fenced pass: there the loop waits in the
        // commit of the transaction that holds the stuck record and reads nothing meanwhile,
        // which is not what this test measures.
        .lines()
        .filter(|l| !l.starts_with("transactional_id"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let addr = http::relay_addr(&relay).await;
    // The stuck record's partition acknowledged one before: mid-stream, not the partition's
    // head, whose report the relay would wait for before reading on (relay_core::head).
    writer::insert_event(&db.client, "order", "stuck", 0)
        .await
        .unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    kafka.cut();
    writer::insert_event(&db.client, "order", "stuck", 0)
        .await
        .unwrap();
    // 20,000 transactions of another published table behind it.
    db.client
        .batch_execute(
            "DO $$ BEGIN FOR i IN 1..20000 LOOP \
               INSERT INTO business(note) VALUES ('x'); COMMIT; \
             END LOOP; END $$",
        )
        .await
        .unwrap();
    let end = db.current_wal_lsn().await;
    // Wait until the walsender has sent them all, give the relay time to read what it
    // buffered, then read its tracker's size (the gauge is refreshed every second).
    eventually(
        "the walsender to send the other transactions",
        Duration::from_secs(60),
        || async {
            let sent: Option<String> = db
                .client
                .query_opt(
                    "SELECT r.sent_lsn::text FROM pg_stat_replication r \
                   JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1",
                    &[&db.name],
                )
                .await
                .unwrap()
                .and_then(|r| r.get(0));
            sent.and_then(|s| s.parse::<relay_core::Lsn>().ok())
                .filter(|s| *s >= end)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = http::scrape(addr).await;
    let pending = m
        .value("outbox_relay_inflight_transactions", &[])
        .expect("the gauge exists");
    assert_eq!(
        m.value("outbox_relay_inflight_events", &[]),
        Some(1.0),
        "the head is stuck"
    );
    check::note(&format!(
        "stuck_head_memory: {pending} pending transactions in the tracker behind one stuck record \
         and 20,000 other transactions"
    ));
    assert!(
        pending <= 2.0,
        "tracker holds {pending} transactions:\n{}",
        relay.log_text()
    );
    kafka.heal();
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
