//! Kafka TLS and SASL: a broker of its own whose client listeners are SASL_SSL (SCRAM-SHA-512,
//! certificate made here with openssl) and SASL_PLAINTEXT (PLAIN); no PLAINTEXT listener but
//! the controller's. The relay authenticates with the first-class `[kafka]` options, the
//! password coming from `OUTBOX_RELAY__KAFKA__SASL_PASSWORD` or `sasl_password_file`; an
//! independent consumer with the same settings reads what it produced. A wrong password and
//! a wrong CA are refused by `setup` with the reason, and no password ever reaches the log.
//! The broker runs StandardAuthorizer: the principals above are super users, a third one
//! (`limited`) gets only the ACLs a test grants it (infra/kafka/acls.sh).

mod acl;
mod broker;

use std::time::Duration;

use outbox_relay::telemetry::events;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, repo_root, writer};
use broker::Broker;

/// SASL_SSL listener (the port infra/kafka/start.sh waits for); controller on +1.
const PORT: u16 = 26392;
/// SASL_PLAINTEXT listener with PLAIN.
const PLAIN_PORT: u16 = 26394;

const SCRAM_USER: &str = "relay";
const SCRAM_PASSWORD: &str = "scram-Pa55-8c1f0e";
const PLAIN_USER: &str = "plainrelay";
const PLAIN_PASSWORD: &str = "plain-Pa55-77d2a1";
/// The broker's own SCRAM identity on its inter-broker (SASL_SSL) listener.
const BROKER_PASSWORD: &str = "broker-Pa55-31b9";
const WRONG_PASSWORD: &str = "wr0ng-Pa55-d00d5e";
/// A SCRAM-SHA-512 principal that is not a super user: ACLs decide what it may do.
const LIMITED_USER: &str = "limited";
const LIMITED_PASSWORD: &str = "limited-Pa55-4e0b9c";

/// Reads `topics` as the super user on the PLAIN listener until `done` holds or `timeout`.
async fn consume_as_admin(
    topics: Vec<String>,
    timeout: Duration,
    done: impl Fn(&[kafka::Rec]) -> bool + Send + 'static,
) -> Vec<kafka::Rec> {
    tokio::task::spawn_blocking(move || {
        let props = [
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", PLAIN_USER),
            ("sasl.password", PLAIN_PASSWORD),
        ];
        kafka::consume_until_with(
            &format!("127.0.0.1:{PLAIN_PORT}"),
            &props,
            &topics,
            timeout,
            done,
        )
    })
    .await
    .unwrap()
}

/// The test's relay config with `kafka_keys` added to `[kafka]` and the brokers replaced.
fn relay_config(db: &TestDb, brokers: &str, kafka_keys: &str) -> String {
    db.relay_config(&db.outbox_section())
        .replace(&crate::support::kafka_brokers(), brokers)
        .replace(
            "[kafka]\n",
            &format!("[kafka]\nconnect_timeout_ms = 5000\n{kafka_keys}"),
        )
}

/// The test's relay config for SASL_SSL with SCRAM-SHA-512 as `user`, trusting `ca`; the
/// password comes from the environment.
fn scram_ssl_config(db: &TestDb, user: &str, ca: &str) -> String {
    relay_config(
        db,
        &format!("127.0.0.1:{PORT}"),
        &format!(
            "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"{user}\"\nssl_ca_location = \"{ca}\"\n"
        ),
    )
}

/// Writes events for two aggregates, consumes them with `props` and checks them.
async fn relay_and_check(
    db: &TestDb,
    relay: &Relay,
    test: &str,
    brokers: &str,
    props: &[(&str, &str)],
) {
    let c = connect(&db.conninfo()).await;
    let mut written = Vec::new();
    for i in 0..6 {
        let agg = format!("{test}-{}", i % 2);
        written.push(writer::insert_event(&c, "order", &agg, 0).await.unwrap());
    }
    let n = written.len();
    let topics = vec![db.topic("order")];
    let brokers = brokers.to_string();
    let props: Vec<(String, String)> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let got = tokio::task::spawn_blocking(move || {
        let props: Vec<(&str, &str)> = props.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        kafka::consume_until_with(&brokers, &props, &topics, Duration::from_secs(60), |r| {
            r.len() >= n
        })
    })
    .await
    .unwrap();
    let f = check::check(test, |t| db.topic(t), &written, &got);
    assert_eq!(
        (
            f.delivered,
            f.lost,
            f.duplicated,
            f.order_violations,
            f.unexpected
        ),
        (n, 0, 0, 0, 0),
        "{f:?}\nrelay log:\n{}",
        relay.log_text()
    );
    // Acknowledged by Kafka, so confirmed to PostgreSQL.
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
}

/// The line of the final error (`setup` failed).
fn final_error(log: &str) -> &str {
    log.lines()
        .rev()
        .find(|l| l.contains("cannot reach Kafka"))
        .unwrap_or_else(|| panic!("no \"cannot reach Kafka\" error in the log:\n{log}"))
}

fn assert_no_password(log: &str) {
    for pw in [
        SCRAM_PASSWORD,
        LIMITED_PASSWORD,
        PLAIN_PASSWORD,
        WRONG_PASSWORD,
        BROKER_PASSWORD,
    ] {
        assert!(!log.contains(pw), "a password appeared in the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_scram_sha_512_relays_events_and_a_wrong_password_is_refused() {
    let broker = Broker::get();
    let db = TestDb::new("ksasl").await;
    let brokers = format!("127.0.0.1:{PORT}");
    let cfg = scram_ssl_config(&db, SCRAM_USER, &broker.ca("ca.pem"));

    // A wrong password: setup fails with the broker's reason, and the password is not logged.
    let (status, log) = Relay::once(
        &db.name,
        &cfg,
        &["setup"],
        &[("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", WRONG_PASSWORD)],
    );
    assert_eq!(status.code(), Some(1), "{log}");
    let error = final_error(&log);
    assert!(
        error.contains(&format!("cannot reach Kafka at {brokers}"))
            && error.contains("SASL authentication error: Authentication failed")
            && error.contains("SCRAM-SHA-512")
            && error.contains("kafka.sasl_username"),
        "{log}"
    );
    assert_no_password(&log);

    // The right password, from the environment.
    let env = [("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", SCRAM_PASSWORD)];
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &env);
    assert_eq!(status.code(), Some(0), "{log}");
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &env);
    relay
        .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
        .await;
    relay_and_check(
        &db,
        &relay,
        "kafka_sasl_ssl_scram",
        &brokers,
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", SCRAM_USER),
            ("sasl.password", SCRAM_PASSWORD),
            ("ssl.ca.location", &broker.ca("ca.pem")),
        ],
    )
    .await;
    relay.terminate(Duration::from_secs(30));
    assert_no_password(&relay.log_text());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_with_a_ca_that_did_not_sign_the_broker_is_refused() {
    let broker = Broker::get();
    let db = TestDb::new("kwrongca").await;
    let brokers = format!("127.0.0.1:{PORT}");
    let cfg = scram_ssl_config(&db, SCRAM_USER, &broker.ca("otherca.pem"));
    let (status, log) = Relay::once(
        &db.name,
        &cfg,
        &["setup"],
        &[("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", SCRAM_PASSWORD)],
    );
    assert_eq!(status.code(), Some(1), "{log}");
    let error = final_error(&log);
    assert!(
        error.contains(&format!("cannot reach Kafka at {brokers}"))
            && error.contains("certificate verify failed")
            && error.contains("kafka.ssl_ca_location"),
        "{log}"
    );
    assert_no_password(&log);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plaintext_plain_with_a_password_file_relays_events() {
    let _broker = Broker::get();
    let db = TestDb::new("kplain").await;
    let brokers = format!("127.0.0.1:{PLAIN_PORT}");
    let dir = repo_root().join("target/e2e").join(&db.name);
    std::fs::create_dir_all(&dir).unwrap();
    let pw_file = dir.join("kafka-password");
    std::fs::write(&pw_file, format!("{PLAIN_PASSWORD}\n")).unwrap();
    let cfg = relay_config(
        &db,
        &brokers,
        &format!(
            "security_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"PLAIN\"\n\
             sasl_username = \"{PLAIN_USER}\"\nsasl_password_file = \"{}\"\n",
            pw_file.display()
        ),
    );
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    relay_and_check(
        &db,
        &relay,
        "kafka_sasl_plaintext_plain",
        &brokers,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", PLAIN_USER),
            ("sasl.password", PLAIN_PASSWORD),
        ],
    )
    .await;
    relay.terminate(Duration::from_secs(30));
    assert_no_password(&relay.log_text());
    db.cleanup().await;
}
