//! Schema changes mid-stream and large payloads.

use std::time::Duration;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_add_column_mid_stream_keeps_every_event() {
    let db = TestDb::new("alter").await;
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&db.outbox_section())).await;
    let mut c = connect(&db.conninfo()).await;
    let mut written = writer::insert_orders(&c, 5, |i| format!("a-{}", i % 2)).await;
    // In one transaction: a row with the old layout, the ALTER, a row with the new one.
    let tx = c.transaction().await.unwrap();
    written.push(writer::insert_event(&tx, "order", "a-0", 0).await.unwrap());
    tx.batch_execute("ALTER TABLE outbox ADD COLUMN tenant text DEFAULT 'acme'")
        .await
        .unwrap();
    written.push(writer::insert_event(&tx, "order", "a-1", 0).await.unwrap());
    tx.commit().await.unwrap();
    c.batch_execute("ALTER TABLE outbox ADD COLUMN note2 text")
        .await
        .unwrap();
    written.extend(writer::insert_orders(&c, 5, |i| format!("a-{}", i % 2)).await);
    let f = db
        .check_order_topic("alter_table_mid_stream", &written, Duration::from_secs(60))
        .await;
    f.assert_exactly_once("");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_megabyte_jsonb_payload_arrives_whole() {
    let db = TestDb::new("big").await;
    // The topic and the producer must both allow the size (Kafka's default limit is ~1 MB).
    let topic = db.topic("order");
    kafka::create_topic_with_max_bytes(&topic, 4_000_000).await;
    let cfg = db.relay_config(&format!(
        "{}\n[kafka.properties]\n\"message.max.bytes\" = \"4000000\"\n",
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;

    // ~1.2 MB of incompressible text: TOASTed on disk, must arrive in full.
    let big: String = (0..150_000)
        .map(|i: u64| format!("{:08x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32))
        .collect();
    let c = connect(&db.conninfo()).await;
    let mut w = writer::insert_event(&c, "order", "big-1", 0).await.unwrap();
    let payload = serde_json::json!({"aggregate": "big-1", "seq": w.seq, "writer": 0, "note": "x", "blob": big});
    c.execute(
        "UPDATE outbox SET payload = $2::text::jsonb WHERE id = $1::text::uuid",
        &[&w.id, &payload.to_string()],
    )
    .await
    .unwrap();
    // The UPDATE is not published; publish a second event that carries the big payload itself.
    let id = uuid::Uuid::new_v4().to_string();
    let seq: i32 = c
        .query_one(
            "UPDATE agg SET seq = seq + 1 WHERE id = 'big-1' RETURNING seq",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let payload = serde_json::json!({"aggregate": "big-1", "seq": seq, "writer": 0, "note": "x", "blob": big});
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) VALUES ($1::text::uuid, 'order', 'big-1', 'Event', $2::text::jsonb)",
        &[&id, &payload.to_string()],
    ).await.unwrap();
    w.payload = serde_json::json!({"aggregate": "big-1", "seq": w.seq, "writer": 0, "note": "x"});
    let big_event = writer::Written {
        id,
        aggregate_type: "order".into(),
        aggregate: "big-1".into(),
        seq,
        payload,
    };
    assert!(big_event.payload.to_string().len() > 1_000_000);

    let written = vec![w, big_event];
    let got = kafka::consume(vec![topic], Duration::from_secs(60), 2).await;
    let f = check::check("one_megabyte_payload", |t| db.topic(t), &written, &got);
    f.assert_exactly_once("");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_outbox_is_published_through_its_root() {
    let db = TestDb::new("part").await;
    db.partitioned_outbox(
        "CREATE TABLE outbox_old PARTITION OF outbox FOR VALUES FROM (MINVALUE) TO ('2000-01-01');
         CREATE TABLE outbox_new PARTITION OF outbox DEFAULT;",
    )
    .await;
    // A publication created per partition (the PostgreSQL default) is refused with the fix.
    db.create_publication().await;
    let cfg = db.relay_config(&db.outbox_section());
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("publish_via_partition_root = true"), "{log}");
    db.client
        .batch_execute(&format!("DROP PUBLICATION {}", db.name))
        .await
        .unwrap();

    // The relay creates it through the root; rows in any partition arrive under `outbox`.
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    let written = writer::insert_orders(&c, 6, |i| format!("p-{}", i % 2)).await;
    let f = db
        .check_order_topic("partitioned_outbox", &written, Duration::from_secs(60))
        .await;
    f.assert_exactly_once("");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_dropped_and_recreated_is_detected_at_start() {
    let db = TestDb::new("recreate").await;
    let cfg = db.relay_config(&db.outbox_section());
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert_eq!(status.code(), Some(0), "{log}");
    // Dropping the table silently removes it from a FOR TABLE publication.
    let migration =
        std::fs::read_to_string(crate::support::repo_root().join("migrations/0001_outbox.sql"))
            .unwrap();
    db.client
        .batch_execute(&format!("DROP TABLE outbox; {migration}"))
        .await
        .unwrap();
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("does not include public.outbox") && log.contains("ADD TABLE"),
        "{log}"
    );
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_dropped_and_recreated_while_running_stops_the_relay() {
    let db = TestDb::new("recreaterun").await;
    let cfg = db.relay_config(&format!(
        "{}\n[monitor]\npoll_interval_ms = 300\n",
        db.outbox_section()
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let migration =
        std::fs::read_to_string(crate::support::repo_root().join("migrations/0001_outbox.sql"))
            .unwrap();
    db.client
        .batch_execute(&format!("DROP TABLE outbox; {migration}"))
        .await
        .unwrap();
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("the relay must stop when the outbox leaves the publication");
    assert_eq!(status.code(), Some(3), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(
        log.contains("does not include public.outbox") && log.contains("ADD TABLE"),
        "{log}"
    );
    db.cleanup().await;
}
