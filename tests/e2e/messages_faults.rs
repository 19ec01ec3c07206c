//! The table-less outbox under stress: logical messages near the broker's size limit, and a
//! relay killed with SIGKILL in the middle of one large transaction of rows and messages, in
//! both delivery modes. Nothing may be lost or reordered; exactly-once re-sends nothing, which
//! needs the restart to skip *inside* the PostgreSQL transaction by change index.

use std::time::{Duration, Instant};

use relay_core::Lsn;

use crate::{
    messages::message_section,
    support::{
        TestDb, check, connect, kafka,
        relay::Relay,
        writer::{Written, emit_event},
    },
};

/// Emits one message whose payload is `{"big": "<n × c>"}`: `n + 11` bytes of JSON text.
/// Returns the LSN `pg_logical_emit_message` returns: the end of the message's WAL record (its
/// transaction's commit record starts there or later).
async fn emit_big(c: &tokio_postgres::Client, id: &str, key: &str, n: i32, fill: &str) -> Lsn {
    let lsn: String = c
        .query_one(
            "SELECT pg_logical_emit_message(true, 'outbox', json_build_object('id', $1::text, \
             'aggregatetype', 'order', 'aggregateid', $2::text, 'type', 'Event', \
             'payload', json_build_object('big', repeat($4::text, $3)))::text)::text",
            &[&id, &key, &n, &fill],
        )
        .await
        .unwrap()
        .get(0);
    lsn.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_near_the_broker_limit_arrive_whole_and_one_over_it_is_poison() {
    let db = TestDb::new("msg_large").await;
    let halt = db.relay_config(&message_section(&db));
    let mut relay = Relay::streaming(&db.name, &halt).await;
    let c = connect(&db.conninfo()).await;
    // 950,000 bytes of payload: the record (value, key, headers, batch framing) stays under the
    // producer's message.max.bytes (1,000,000) and the broker's default (1,048,588).
    emit_big(&c, "near-limit", "k", 950_000, "n").await;
    let mut written = vec![emit_event(&c, "order", "k", 9).await.unwrap()];
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 2).await;
    let near = got
        .iter()
        .find(|r| r.header("id") == "near-limit")
        .expect("the near-limit message arrived");
    let value = near.value.as_deref().unwrap();
    assert_eq!(
        value.len(),
        950_000 + r#"{"big" : ""}"#.len(),
        "value length"
    );
    assert!(value.starts_with(r#"{"big" : "nnnn"#) && value.ends_with("nnnn\"}"));
    let f = check::check(
        "messages_near_limit",
        |t| db.topic(t),
        &written,
        &got.iter()
            .filter(|r| r.header("id") != "near-limit")
            .cloned()
            .collect::<Vec<_>>(),
    );
    f.assert_nothing_lost_or_reordered("after a near-limit message");

    // 1.2 MB: the producer refuses it. `halt` stops naming the size rule, the prefix and the
    // commit LSN (checked below against the dead-letter record and PostgreSQL).
    let message_end = emit_big(&c, "over-limit", "k", 1_200_000, "o").await;
    let wal_after = db.current_wal_lsn().await;
    let status = relay.wait(Duration::from_secs(60)).expect("halt");
    assert_eq!(status.code(), Some(1), "{}", relay.log_text());
    let halt_log = relay.log_text();
    assert!(halt_log.contains("message.max.bytes"), "{halt_log}");

    // `dead-letter` replaces it by its reason and goes on: the next event arrives.
    let dlq = format!("{}.dlq", db.name);
    let dead = format!(
        "{}[relay]\non_poison = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n",
        message_section(&db)
    );
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&dead)).await;
    written.push(emit_event(&c, "order", "k", 9).await.unwrap());
    let got = kafka::consume_settled(vec![db.topic("order")], written.len() + 1).await;
    assert!(
        got.iter().all(|r| r.header("id") != "over-limit"),
        "the refused message reached the topic"
    );
    let rest: Vec<_> = got
        .into_iter()
        .filter(|r| r.header("id") != "near-limit")
        .collect();
    let f = check::check("messages_over_limit", |t| db.topic(t), &written, &rest);
    f.assert_nothing_lost_or_reordered("around a refused message");
    let dl = kafka::consume_until(std::slice::from_ref(&dlq), Duration::from_secs(30), |r| {
        !r.is_empty()
    });
    assert!(
        !dl.is_empty(),
        "no dead-letter record for the refused message"
    );
    // Like a refused row: its key and headers, the topic it was for, the value left out.
    assert_eq!(dl[0].header("id"), "over-limit");
    assert_eq!(dl[0].header("outbox-relay.dlq.topic"), db.topic("order"));
    assert_eq!(
        dl[0].header("outbox-relay.dlq.omitted-value-bytes"),
        "1200012"
    );
    assert!(
        dl[0]
            .header("outbox-relay.dlq.reason")
            .contains("message.max.bytes"),
        "{:?}",
        dl[0].headers
    );
    // Like a message that cannot be routed: its prefix.
    assert_eq!(dl[0].header("outbox-relay.dlq.prefix"), "outbox");
    // Its commit LSN (where the commit record starts) is at or after the message's end and
    // before where WAL was once it committed; the halt named it, with the prefix and the
    // position (alone in its transaction: 0).
    let commit_lsn = dl[0].header("outbox-relay.commit-lsn");
    let parsed: Lsn = commit_lsn.parse().unwrap();
    assert!(
        message_end <= parsed && parsed < wal_after,
        "commit LSN {parsed} not in [{message_end}, {wal_after})"
    );
    let named = format!(
        "It is the logical message with prefix \"outbox\" committed at {commit_lsn} (position 0)"
    );
    assert!(
        halt_log.contains(&named) || halt_log.contains(&named.replace('"', "\\\"")),
        "the halt did not name {named:?}:\n{halt_log}"
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

/// One transaction of `n` events on 20 aggregates, rows and messages alternating, written by
/// the server itself (fast enough that the relay is still publishing it when it is killed).
/// Per aggregate, event i has sequence number i / 20 + 1: its position in the transaction.
async fn write_one_large_transaction(db: &TestDb, n: i32) -> Vec<Written> {
    let c = connect(&db.conninfo()).await;
    c.batch_execute(&format!(
        "DO $$ DECLARE agg text; seq int; id text; p json; BEGIN \
         FOR i IN 0..{last} LOOP \
           agg := 'big-' || (i % 20); seq := i / 20 + 1; id := md5('{db}' || i)::uuid::text; \
           IF i % 2 = 0 THEN \
             p := json_build_object('aggregate', agg, 'seq', seq, 'writer', 0, 'note', 'x'); \
             INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
               VALUES (id::uuid, 'order', agg, 'Event', p::jsonb); \
           ELSE \
             p := json_build_object('aggregate', agg, 'seq', seq, 'writer', 9, 'note', 'm'); \
             PERFORM pg_logical_emit_message(true, 'outbox', json_build_object('id', id, \
               'aggregatetype', 'order', 'aggregateid', agg, 'type', 'Event', \
               'payload', p)::text); \
           END IF; \
         END LOOP; END $$",
        last = n - 1,
        db = db.name
    ))
    .await
    .unwrap();
    let rows = c
        .query(
            "SELECT md5($1 || i)::uuid::text, i FROM generate_series(0, $2 - 1) AS i",
            &[&db.name, &n],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            let i: i32 = r.get(1);
            let (agg, seq) = (format!("big-{}", i % 20), i / 20 + 1);
            let (writer, note) = if i % 2 == 0 { (0, "x") } else { (9, "m") };
            Written {
                id: r.get(0),
                aggregate_type: "order".into(),
                aggregate: agg.clone(),
                seq,
                payload: serde_json::json!({
                    "aggregate": agg, "seq": seq, "writer": writer, "note": note
                }),
            }
        })
        .collect()
}

/// Kills the relay with SIGKILL as soon as part of the transaction is in the topic; returns how
/// many records the topic held then.
fn kill_when_partly_published(relay: &mut Relay, topic: &str, n: i64) -> i64 {
    let watermarks = kafka::watermark_client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let hw = kafka::high_watermark_sum(&watermarks, topic);
        if hw > 0 {
            relay.kill9();
            let at_kill = kafka::high_watermark_sum(&watermarks, topic);
            assert!(
                at_kill < n,
                "the whole transaction was published before the kill ({at_kill} of {n} \
                 records): the test did not kill in the middle"
            );
            return at_kill;
        }
        assert!(Instant::now() < deadline, "nothing published in 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
}

async fn kill_9_in_the_middle_of_a_transaction(exactly_once: bool) {
    let mode = if exactly_once { "eos" } else { "alo" };
    let db = TestDb::new(&format!("msg_kill_{mode}")).await;
    let delivery = if exactly_once {
        format!(
            "transactional_id = \"outbox-relay-{}\"\nmax_transaction_records = 500\n",
            db.name
        )
    } else {
        String::new()
    };
    let relay_section = if exactly_once {
        "[relay]\ndelivery = \"exactly-once\"\nrestart_backoff_initial_ms = 100\n"
    } else {
        "[relay]\nrestart_backoff_initial_ms = 100\n"
    };
    let cfg = db.relay_config(&format!(
        "{delivery}{}{}{relay_section}",
        db.outbox_section(),
        message_section(&db)
    ));
    let topic = db.topic("order");
    kafka::create_topic(&topic, 3).await;
    let n = 40_000;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let written = write_one_large_transaction(&db, n).await;
    let topic_for_kill = topic.clone();
    let at_kill = tokio::task::spawn_blocking(move || {
        let at_kill = kill_when_partly_published(&mut relay, &topic_for_kill, n.into());
        (at_kill, relay)
    })
    .await
    .unwrap();
    let (at_kill, _killed) = at_kill;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let got = kafka::consume_settled(vec![topic], written.len()).await;
    let test = format!("messages_kill9_mid_transaction_{mode}");
    let f = check::check(&test, |t| db.topic(t), &written, &got);
    check::record(&test, &f);
    check::note(&format!(
        "{test}: killed with {at_kill} of {n} records in the topic"
    ));
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    let log = relay.log_text();
    relay.terminate(Duration::from_secs(30));
    f.assert_nothing_lost_or_reordered("after a kill -9 inside a transaction");
    if exactly_once {
        assert_eq!(f.duplicated, 0, "exactly-once re-sent events: {f:?}");
        assert!(
            log.contains(outbox_relay::telemetry::events::CHECKPOINT_SKIP_DONE),
            "the restart skipped nothing: {log}"
        );
    }
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_middle_of_a_transaction_of_rows_and_messages_at_least_once() {
    kill_9_in_the_middle_of_a_transaction(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_middle_of_a_transaction_of_rows_and_messages_exactly_once() {
    kill_9_in_the_middle_of_a_transaction(true).await;
}
