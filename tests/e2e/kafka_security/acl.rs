//! Authorisation: what the relay does when the principal may not write a topic or use its
//! transactional id, and that the grants docs/security.md lists are enough.

use std::time::Duration;

use outbox_relay::telemetry::events;

use super::{broker::Broker, *};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_the_principal_may_not_write_halts_then_is_dead_lettered() {
    let broker = Broker::get();
    let db = TestDb::new("kacl").await;
    let user = format!("User:{LIMITED_USER}");
    // What a relay needs (docs/security.md), on this test's topics; WRITE denied on one of them.
    broker.grant_relay_topics(&user, &format!("{}.", db.name));
    // For RELAY_TEST_FENCED=1 runs (kafka.transactional_id = "outbox-relay-<db>").
    broker.grant_transactional_id(&user, &format!("outbox-relay-{}", db.name));
    let denied = db.topic("secret");
    broker.acl(&[
        "--add",
        "--deny-principal",
        &user,
        "--operation",
        "Write",
        "--topic",
        &denied,
    ]);

    let base = scram_ssl_config(&db, LIMITED_USER, &broker.ca("ca.pem"));
    let env = [("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", LIMITED_PASSWORD)];
    // The slot first: the events below are written while no relay runs.
    let (status, log) = Relay::once(&db.name, &base, &["setup"], &env);
    assert_eq!(status.code(), Some(0), "{log}");
    let c = connect(&db.conninfo()).await;
    let mut written = Vec::new();
    for _ in 0..2 {
        written.push(
            writer::insert_event(&c, "order", "kacl-0", 0)
                .await
                .unwrap(),
        );
    }
    let secret = writer::insert_event(&c, "secret", "kacl-1", 0)
        .await
        .unwrap();
    let after_secret = db.current_wal_lsn().await;
    for _ in 0..2 {
        written.push(
            writer::insert_event(&c, "order", "kacl-0", 0)
                .await
                .unwrap(),
        );
    }

    // halt (default): stops at the refused event, says what to grant, confirms nothing past it.
    let mut relay = Relay::start_with(&db.name, &base, &["run"], &env);
    let (status, log) = relay.wait_exit(Duration::from_secs(90));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "Kafka refused an event for topic \"{denied}\" for good"
        )) && log.contains("may not write to this topic; grant WRITE on it"),
        "{log}"
    );
    let confirmed = db.confirmed_flush().await.unwrap();
    assert!(
        confirmed < after_secret,
        "confirmed {confirmed} past the refused event ({after_secret})"
    );
    assert_no_password(&log);

    // dead-letter: the event goes to the dead-letter topic with the reason; the rest goes on.
    let dlq = db.topic("dlq");
    let cfg = format!(
        "{base}\n[relay]\non_poison = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n\
         restart_backoff_initial_ms = 100\n"
    );
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &env);
    let topics = vec![db.topic("order"), dlq.clone()];
    let want: std::collections::HashSet<String> = written.iter().map(|w| w.id.clone()).collect();
    let dlq_topic = dlq.clone();
    let got = consume_as_admin(topics, Duration::from_secs(90), move |r| {
        let ids: std::collections::HashSet<&str> = r.iter().map(|x| x.header("id")).collect();
        r.iter().any(|x| x.topic == dlq_topic) && want.iter().all(|id| ids.contains(id.as_str()))
    })
    .await;
    let (dead, events): (Vec<_>, Vec<_>) = got.into_iter().partition(|r| r.topic == dlq);
    assert_eq!(dead.len(), 1, "{dead:?}\n{}", relay.log_text());
    let d = &dead[0];
    assert_eq!(
        d.header("id"),
        secret.id,
        "the dead-letter record keeps the event's headers"
    );
    assert_eq!(d.header("outbox-relay.dlq.topic"), denied);
    assert!(
        d.header("outbox-relay.dlq.reason")
            .contains("Authorization"),
        "{:?}",
        d.headers
    );
    let f = check::check("kafka_acl_dead_letter", |t| db.topic(t), &written, &events);
    f.assert_nothing_lost_or_reordered("");
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    relay.terminate(Duration::from_secs(30));
    assert_no_password(&relay.log_text());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_id_the_principal_may_not_use_stops_the_relay_until_granted() {
    let broker = Broker::get();
    let db = TestDb::new("ktxn").await;
    let user = format!("User:{LIMITED_USER}");
    // Everything docs/security.md lists for topics, but nothing for the transactional id.
    broker.grant_relay_topics(&user, &format!("{}.", db.name));
    let id = format!("outbox-relay-{}", db.name);
    let mut cfg = scram_ssl_config(&db, LIMITED_USER, &broker.ca("ca.pem"));
    if !cfg.contains("transactional_id") {
        cfg = cfg.replace(
            "[kafka]\n",
            &format!("[kafka]\ntransactional_id = \"{id}\"\n"),
        );
    }
    let env = [("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", LIMITED_PASSWORD)];
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &env);
    assert_eq!(status.code(), Some(0), "{log}");
    let slot_before = db.confirmed_flush().await;
    let c = connect(&db.conninfo()).await;
    let mut written = Vec::new();
    for _ in 0..3 {
        written.push(
            writer::insert_event(&c, "order", "ktxn-0", 0)
                .await
                .unwrap(),
        );
    }

    // Refused: a definite error naming what to grant, not an endless retry; nothing confirmed.
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &env);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!("Kafka refused kafka.transactional_id \"{id}\""))
            && log.contains(
                "grant the relay's principal WRITE and DESCRIBE on the transactional ids starting with it"
            ),
        "{log}"
    );
    assert_eq!(db.confirmed_flush().await, slot_before);
    assert_no_password(&log);

    // docs/security.md's grant, then the relay streams.
    broker.grant_transactional_id(&user, &id);
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &env);
    relay
        .wait_log(
            events::KAFKA_PRODUCER_FENCED_OTHERS,
            Duration::from_secs(60),
        )
        .await;
    let topics = vec![db.topic("order")];
    let got = consume_as_admin(topics, Duration::from_secs(60), |r| r.len() >= 3).await;
    let f = check::check("kafka_txn_acl", |t| db.topic(t), &written, &got);
    f.assert_exactly_once(&relay.log_text());
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
