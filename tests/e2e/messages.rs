//! A table-less outbox (`[[message]]`): transactional logical messages published like outbox
//! rows, against the real servers. Messages and rows of one transaction arrive in commit order;
//! messages in a rolled-back savepoint or an aborted transaction never arrive; a messages-only
//! config needs no outbox table; poison halts or is dead-lettered; exactly-once survives a
//! slot rewind with messages in the transactions.

use std::time::Duration;

use crate::support::{
    TestDb, check, connect, kafka,
    relay::Relay,
    writer::{Written, emit_event},
};

/// The `[[message]]` section of these tests: prefix `outbox`, topics in the test's namespace.
pub(crate) fn message_section(db: &TestDb) -> String {
    format!(
        "[[message]]\nprefix = \"outbox\"\ntopic = \"{}.{{aggregatetype}}\"\n",
        db.name
    )
}

/// Rows and messages interleaved on the same aggregates (the `agg` row lock makes their
/// sequence the commit order), a rolled-back savepoint and an aborted transaction holding
/// messages, and messages with other prefixes.
async fn write_mixed(db: &TestDb, tag: &str) -> (Vec<Written>, Vec<String>) {
    let mut c = connect(&db.conninfo()).await;
    let (mut out, mut discarded) = (Vec::new(), Vec::new());
    for i in 0..3 {
        let tx = c.transaction().await.unwrap();
        let agg = format!("{tag}-{}", i % 2);
        out.push(
            crate::support::writer::insert_event(&tx, "order", &agg, 0)
                .await
                .unwrap(),
        );
        out.push(emit_event(&tx, "order", &agg, 9).await.unwrap());
        tx.execute(
            "SELECT pg_logical_emit_message(true, 'other-app', 'not for kafka')",
            &[],
        )
        .await
        .unwrap();
        out.push(emit_event(&tx, "order", &agg, 9).await.unwrap());
        out.push(
            crate::support::writer::insert_event(&tx, "order", &agg, 0)
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    // A savepoint rolled back with a message (and a row) in it.
    let tx = c.transaction().await.unwrap();
    out.push(
        emit_event(&tx, "order", &format!("{tag}-sp"), 9)
            .await
            .unwrap(),
    );
    tx.batch_execute("SAVEPOINT s").await.unwrap();
    let gone = emit_event(&tx, "order", &format!("{tag}-gone"), 9)
        .await
        .unwrap();
    discarded.push(gone.id);
    let gone = crate::support::writer::insert_event(&tx, "order", &format!("{tag}-gone"), 0)
        .await
        .unwrap();
    discarded.push(gone.id);
    tx.batch_execute("ROLLBACK TO SAVEPOINT s").await.unwrap();
    out.push(
        emit_event(&tx, "order", &format!("{tag}-sp"), 9)
            .await
            .unwrap(),
    );
    tx.commit().await.unwrap();
    // An aborted transaction.
    let tx = c.transaction().await.unwrap();
    discarded.push(
        emit_event(&tx, "order", &format!("{tag}-abort"), 9)
            .await
            .unwrap()
            .id,
    );
    tx.rollback().await.unwrap();
    (out, discarded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_and_messages_of_a_transaction_arrive_in_commit_order() {
    let db = TestDb::new("msg_mixed").await;
    let cfg = db.relay_config(&format!(
        "{}{}[http]\nlisten = \"127.0.0.1:0\"\n",
        db.outbox_section(),
        message_section(&db)
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let (written, discarded) = write_mixed(&db, "a").await;
    // One message whose value is checked byte for byte: the payload text as PostgreSQL emitted it.
    let c = connect(&db.conninfo()).await;
    c.execute(
        "SELECT pg_logical_emit_message(true, 'outbox', json_build_object('id', 'exact-1', \
         'aggregatetype','exact','aggregateid','42','type','OrderCreated', \
         'payload', json_build_object('total', 10))::text)",
        &[],
    )
    .await
    .unwrap();
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    check::assert_absent(&discarded, &got);
    let f = check::check("messages_mixed", |t| db.topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered("rows and messages");
    assert_eq!((f.written, f.unexpected), (14, 0), "{f:?}");
    let exact = kafka::consume(vec![db.topic("exact")], Duration::from_secs(30), 1).await;
    assert_eq!(exact.len(), 1, "{exact:?}");
    assert_eq!(exact[0].value.as_deref(), Some("{\"total\" : 10}"));
    assert_eq!(exact[0].key.as_deref(), Some("42"));
    assert_eq!(exact[0].header("eventType"), "OrderCreated");
    assert_eq!(exact[0].header("id"), "exact-1");
    // Everything confirmed, the other prefix counted, not published.
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    let addr = crate::support::http::relay_addr(&relay).await;
    let scrape = crate::support::http::scrape(addr).await;
    assert_eq!(
        scrape.value("outbox_relay_logical_messages_ignored_total", &[]),
        Some(3.0)
    );
    assert_eq!(scrape.value("outbox_relay_outbox_tables", &[]), Some(1.0));
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_only_config_needs_no_outbox_table() {
    let db = TestDb::new("msg_only").await;
    db.client.batch_execute("DROP TABLE outbox").await.unwrap();
    let cfg = db.relay_config(&message_section(&db));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let tables: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1",
            &[&db.name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "the publication lists tables");
    let mut c = connect(&db.conninfo()).await;
    let mut written = Vec::new();
    for i in 0..5 {
        let tx = c.transaction().await.unwrap();
        written.push(
            emit_event(&tx, "order", &format!("k{}", i % 2), 9)
                .await
                .unwrap(),
        );
        tx.execute("INSERT INTO business(note) VALUES ('x')", &[])
            .await
            .unwrap();
        written.push(
            emit_event(&tx, "order", &format!("k{}", i % 2), 9)
                .await
                .unwrap(),
        );
        tx.commit().await.unwrap();
    }
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check("messages_only", |t| db.topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered("messages only");
    assert_eq!(f.duplicated, 0, "{f:?}");
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    let out = relay.status();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("publishes        no outbox table; message prefixes \"outbox\""),
        "{text}"
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_transactional_message_with_a_configured_prefix_halts_naming_it() {
    let db = TestDb::new("msg_nontx").await;
    let cfg = db.relay_config(&message_section(&db));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    let good = emit_event(&c, "order", "k", 9).await.unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    c.execute(
        "SELECT pg_logical_emit_message(false, 'outbox', '{\"aggregateid\": \"k\"}')",
        &[],
    )
    .await
    .unwrap();
    let status = relay
        .wait(Duration::from_secs(30))
        .expect("the relay must stop on a non-transactional message");
    assert_eq!(status.code(), Some(1), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(
        log.contains("non-transactional logical message with prefix \\\"outbox\\\"")
            || log.contains("non-transactional logical message with prefix \"outbox\""),
        "{log}"
    );
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(30), 1).await;
    let f = check::check("messages_nontx", |t| db.topic(t), &[good], &got);
    assert_eq!((f.lost, f.unexpected), (0, 0), "{f:?}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_messages_halt_naming_the_prefix_or_are_dead_lettered() {
    let db = TestDb::new("msg_poison").await;
    let dlq = format!("{}.dlq", db.name);
    let halt = db.relay_config(&message_section(&db));
    let mut relay = Relay::streaming(&db.name, &halt).await;
    let c = connect(&db.conninfo()).await;
    let mut written = vec![emit_event(&c, "order", "k", 9).await.unwrap()];
    c.execute(
        "SELECT pg_logical_emit_message(true, 'outbox', '[\"not an object\"]')",
        &[],
    )
    .await
    .unwrap();
    let status = relay.wait(Duration::from_secs(30)).expect("halt");
    assert_eq!(status.code(), Some(1), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(log.contains("prefix") && log.contains("outbox") && log.contains("committed at"));
    assert!(log.contains("not a JSON object"), "{log}");

    let dead = format!(
        "{}[relay]\non_poison = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n",
        message_section(&db)
    );
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&dead)).await;
    written.push(emit_event(&c, "order", "k", 9).await.unwrap());
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check("messages_dead_letter", |t| db.topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered("around a dead-lettered message");
    let dl = kafka::consume_until(std::slice::from_ref(&dlq), Duration::from_secs(30), |r| {
        !r.is_empty()
    });
    assert!(!dl.is_empty(), "no dead-letter record");
    assert_eq!(dl[0].key.as_deref(), Some("outbox"));
    assert_eq!(dl[0].value.as_deref(), Some("[\"not an object\"]"));
    assert!(
        dl[0]
            .header("outbox-relay.dlq.reason")
            .contains("not a JSON object")
    );
    assert_eq!(dl[0].header("outbox-relay.dlq.prefix"), "outbox");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_skips_messages_exactly_after_a_slot_rewind() {
    let db = TestDb::new("msg_eos").await;
    let cfg = db.relay_config(&format!(
        "transactional_id = \"outbox-relay-{}\"\nmax_transaction_records = 5\n{}{}\
         [relay]\ndelivery = \"exactly-once\"\nstatus_interval_ms = 200\n\
         restart_backoff_initial_ms = 100\n",
        db.name,
        db.outbox_section(),
        message_section(&db)
    ));
    let copy = format!("{}_copy", db.name);
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    relay.terminate(Duration::from_secs(30));
    db.copy_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let (mut written, _) = write_mixed(&db, "a").await;
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    assert!(relay.terminate(Duration::from_secs(30)).success());
    // The slot goes back to before every event.
    db.rewind_slot(&copy).await;
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    written.extend(write_mixed(&db, "b").await.0);
    let got = kafka::consume_settled(vec![db.topic("order")], written.len()).await;
    let f = check::check("messages_eos_rewind", |t| db.topic(t), &written, &got);
    check::record("messages_eos_rewind", &f);
    let log = relay.log_text();
    assert!(
        log.contains(outbox_relay::telemetry::events::CHECKPOINT_SKIP_DONE),
        "{log}"
    );
    relay.terminate(Duration::from_secs(30));
    db.drop_slot(&copy).await;
    f.assert_nothing_lost_or_reordered("messages after a rewind");
    assert_eq!(f.duplicated, 0, "exactly-once re-sent events: {f:?}");
    db.cleanup().await;
}

/// A `[[message]]` section with its own field names: `kind` picks the topic, `k` the key,
/// `body` (or `body_base64`) the value, `eid` and `trace` two headers.
fn custom_section(db: &TestDb) -> String {
    format!(
        "[[message]]\nprefix = \"bin\"\ntopic = \"{}.{{kind}}\"\nkey_column = \"k\"\n\
         payload_column = \"body\"\nheaders = {{ event-id = \"eid\", trace = \"trace\" }}\n",
        db.name
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_custom_fields_binary_payloads_and_a_dead_lettered_non_transactional_message() {
    let db = TestDb::new("msg_custom").await;
    db.client.batch_execute("DROP TABLE outbox").await.unwrap();
    let dlq = format!("{}.dlq", db.name);
    let cfg = db.relay_config(&format!(
        "{}[relay]\non_poison = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n",
        custom_section(&db)
    ));
    // `setup` with a messages-only config: a publication without tables, and the slot.
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert!(status.success(), "{log}");
    let row = db
        .client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = $1), \
             (SELECT count(*) FROM pg_publication_tables WHERE pubname = $1), \
             (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1)",
            &[&db.name],
        )
        .await
        .unwrap();
    let counts: (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(counts, (1, 0, 1), "publication, its tables, slot: {log}");

    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    // Every byte value twice: not UTF-8, and its base64 is longer than the 76-character lines
    // PostgreSQL's encode() writes (the newlines are removed: they are not base64).
    let binary: Vec<u8> = (0..=255u8).chain(0..=255).collect();
    let emit = |content: &'static str| {
        format!("SELECT pg_logical_emit_message(true, 'bin', {content}::text)")
    };
    c.execute(
        &emit(
            "json_build_object('kind', 'blob', 'k', 'key-1', 'eid', 'e-bin', 'trace', null, \
             'body_base64', translate(encode($1::bytea, 'base64'), E'\\n', ''))",
        ),
        &[&binary],
    )
    .await
    .unwrap();
    c.execute(
        &emit(
            "json_build_object('kind', 'blob', 'k', 'key-1', 'eid', 'e-json', 'trace', 't-1', \
             'body', json_build_object('n', 1))",
        ),
        &[],
    )
    .await
    .unwrap();
    // Not transactional: dead-lettered with the reason; the stream goes on.
    let nontx = r#"{"kind": "blob", "k": "key-1", "eid": "e-nontx", "trace": null, "body": 1}"#;
    c.execute(
        "SELECT pg_logical_emit_message(false, 'bin', $1::text)",
        &[&nontx],
    )
    .await
    .unwrap();
    c.execute(
        &emit(
            "json_build_object('kind', 'blob', 'k', 'key-1', 'eid', 'e-after', 'trace', 't-2', \
             'body', '\"text\"'::json)",
        ),
        &[],
    )
    .await
    .unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(60))
        .await;
    // Everything is confirmed: what the topic holds now is all it gets (one key: one partition,
    // commit order).
    let got = kafka::consume_until(&[db.topic("blob")], Duration::from_secs(5), |r| r.len() > 3);
    let ids: Vec<&str> = got.iter().map(|r| r.header("event-id")).collect();
    assert_eq!(ids, ["e-bin", "e-json", "e-after"], "{got:?}");
    assert!(got.iter().all(|r| r.key.as_deref() == Some("key-1")));
    assert_eq!(got[0].value_bytes(), Some(&binary[..]), "binary value");
    assert_eq!(got[1].value.as_deref(), Some(r#"{"n" : 1}"#));
    assert_eq!(got[2].value.as_deref(), Some(r#""text""#));
    // `trace`: null gives a header without a value (read back as empty).
    let traces: Vec<&str> = got.iter().map(|r| r.header("trace")).collect();
    assert_eq!(traces, ["", "t-1", "t-2"]);
    assert!(
        !got[0].headers.contains_key("id"),
        "a default header was added"
    );

    let dl = kafka::consume_until(std::slice::from_ref(&dlq), Duration::from_secs(30), |r| {
        !r.is_empty()
    });
    assert_eq!(dl.len(), 1, "{dl:?}");
    assert_eq!(dl[0].key.as_deref(), Some("bin"));
    assert_eq!(dl[0].value.as_deref(), Some(nontx), "the content as sent");
    assert_eq!(dl[0].header("outbox-relay.dlq.prefix"), "bin");
    let reason = dl[0].header("outbox-relay.dlq.reason");
    assert!(
        reason.contains("non-transactional logical message with prefix \"bin\""),
        "{reason}"
    );
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
