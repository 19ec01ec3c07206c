//! Back-pressure never holds PostgreSQL's checkpointer. While Kafka takes no records the relay
//! stops reading the stream and the walsender blocks writing to it; once the retained WAL
//! passes `max_slot_wal_keep_size` the checkpointer waits for that walsender to let the slot
//! go. So the relay releases the replication connection (at once when `wal_status` leaves
//! reserved/extended, else after `relay.backpressure_release_ms`), PostgreSQL applies the
//! limit its operator set, and the relay stops with the documented lost-slot error.

use std::time::{Duration, Instant};

use crate::support::{TestDb, broker, check, cluster::PgCluster, relay::Relay, writer};

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
