//! Kafka TLS and SASL: a broker of its own whose client listeners are SASL_SSL (SCRAM-SHA-512,
//! certificate made here with openssl) and SASL_PLAINTEXT (PLAIN); no PLAINTEXT listener but
//! the controller's. The relay authenticates with the first-class `[kafka]` options, the
//! password coming from `OUTBOX_RELAY__KAFKA__SASL_PASSWORD` or `sasl_password_file`; an
//! independent consumer with the same settings reads what it produced. A wrong password and
//! a wrong CA are refused by `setup` with the reason, and no password ever reaches the log.
//! The broker runs StandardAuthorizer: the principals above are super users, a third one
//! (`limited`) gets only the ACLs a test grants it (infra/kafka/acls.sh).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::Duration,
};

use outbox_relay::events;

use crate::support::{TestDb, certs, check, connect, kafka, relay::Relay, repo_root, writer};

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

/// The test certificates (support/certs.rs) plus `server.pem`, the broker's PEM keystore
/// (unencrypted PKCS#8 key + certificate).
fn make_certs(dir: &Path) {
    certs::make(dir);
    let key = std::fs::read_to_string(dir.join("server.key")).unwrap();
    let crt = std::fs::read_to_string(dir.join("server.crt")).unwrap();
    std::fs::write(dir.join("server.pem"), format!("{key}{crt}")).unwrap();
}

fn kafka_script(name: &str, args: &[&str], env: &[(&str, String)]) -> bool {
    let mut cmd = Command::new(repo_root().join("infra/kafka").join(name));
    cmd.args(args).env("KAFKA_PORT", PORT.to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.status().unwrap().success()
}

/// Starts the secured broker on a fresh data dir (SCRAM credentials are created at format).
fn start_broker(certs: &Path) {
    // A broker left over by an aborted run would hold old certificates: start from scratch.
    kafka_script("stop.sh", &["--destroy"], &[]);
    make_certs(certs);
    let jaas = |module: &str, opts: &str| {
        format!("org.apache.kafka.common.security.{module} required {opts};")
    };
    let props = [
        format!(
            "listeners=SECURE://127.0.0.1:{PORT},SASLPLAIN://127.0.0.1:{PLAIN_PORT},\
             CONTROLLER://127.0.0.1:{}",
            PORT + 1
        ),
        format!(
            "advertised.listeners=SECURE://127.0.0.1:{PORT},SASLPLAIN://127.0.0.1:{PLAIN_PORT}"
        ),
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SECURE:SASL_SSL,\
         SASLPLAIN:SASL_PLAINTEXT"
            .into(),
        "inter.broker.listener.name=SECURE".into(),
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512".into(),
        "listener.name.secure.sasl.enabled.mechanisms=SCRAM-SHA-512".into(),
        format!(
            "listener.name.secure.scram-sha-512.sasl.jaas.config={}",
            jaas(
                "scram.ScramLoginModule",
                &format!("username=\"broker\" password=\"{BROKER_PASSWORD}\"")
            )
        ),
        "listener.name.saslplain.sasl.enabled.mechanisms=PLAIN".into(),
        format!(
            "listener.name.saslplain.plain.sasl.jaas.config={}",
            jaas(
                "plain.PlainLoginModule",
                &format!("user_{PLAIN_USER}=\"{PLAIN_PASSWORD}\"")
            )
        ),
        "ssl.keystore.type=PEM".into(),
        format!(
            "ssl.keystore.location={}",
            certs.join("server.pem").display()
        ),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", certs.join("ca.pem").display()),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        // ANONYMOUS: the combined node's own controller listener (PLAINTEXT).
        format!("super.users=User:broker;User:ANONYMOUS;User:{SCRAM_USER};User:{PLAIN_USER}"),
        "allow.everyone.if.no.acl.found=false".into(),
    ]
    .join("\n");
    let format_args = [
        "--add-scram".to_string(),
        format!("SCRAM-SHA-512=[name=broker,password={BROKER_PASSWORD}]"),
        "--add-scram".into(),
        format!("SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"),
        "--add-scram".into(),
        format!("SCRAM-SHA-512=[name={LIMITED_USER},password={LIMITED_PASSWORD}]"),
    ]
    .join("\n");
    assert!(
        kafka_script(
            "start.sh",
            &[],
            &[
                ("KAFKA_EXTRA_PROPS", props),
                ("KAFKA_FORMAT_ARGS", format_args)
            ]
        ),
        "the SASL/TLS broker did not start (see .stack/kafka-{PORT}/server.out)"
    );
}

/// The broker is shared by the tests of this module: started by the first, destroyed by the
/// last (also when a test fails).
struct Broker {
    certs: PathBuf,
}

static USERS: Mutex<usize> = Mutex::new(0);

impl Broker {
    fn get() -> Broker {
        let certs = repo_root().join("target/e2e/kafka-security-certs");
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        if *users == 0 {
            start_broker(&certs);
        }
        *users += 1;
        Broker { certs }
    }

    /// Runs AclCommand (infra/kafka/acls.sh) as the super user `plainrelay`.
    fn acl(&self, args: &[&str]) {
        let admin = self.certs.join("admin.properties");
        std::fs::write(
            &admin,
            format!(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n\
                 sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \
                 required username=\"{PLAIN_USER}\" password=\"{PLAIN_PASSWORD}\";\n"
            ),
        )
        .unwrap();
        let out = Command::new(repo_root().join("infra/kafka/acls.sh"))
            .args(args)
            .env("KAFKA_BOOTSTRAP", format!("127.0.0.1:{PLAIN_PORT}"))
            .env("KAFKA_COMMAND_CONFIG", &admin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "acls.sh {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ca(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }

    /// What docs/security.md grants a relay's principal `user` for topics starting with
    /// `prefix`: IDEMPOTENT_WRITE on the cluster, WRITE, DESCRIBE and CREATE on the topics.
    fn grant_relay_topics(&self, user: &str, prefix: &str) {
        self.acl(&[
            "--add",
            "--allow-principal",
            user,
            "--operation",
            "IdempotentWrite",
            "--cluster",
        ]);
        self.acl(&[
            "--add",
            "--allow-principal",
            user,
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--operation",
            "Create",
            "--topic",
            prefix,
            "--resource-pattern-type",
            "prefixed",
        ]);
    }

    /// What docs/security.md grants for `kafka.transactional_id`: WRITE and DESCRIBE on the
    /// ids starting with `id` (`id` and `id.2`).
    fn grant_transactional_id(&self, user: &str, id: &str) {
        self.acl(&[
            "--add",
            "--allow-principal",
            user,
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--transactional-id",
            id,
            "--resource-pattern-type",
            "prefixed",
        ]);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        *users -= 1;
        if *users == 0 {
            kafka_script("stop.sh", &["--destroy"], &[]);
        }
    }
}

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
