//! Kafka TLS and SASL: a broker of its own whose client listeners are SASL_SSL (SCRAM-SHA-512,
//! certificate made here with openssl) and SASL_PLAINTEXT (PLAIN); no PLAINTEXT listener but
//! the controller's. The relay authenticates with the first-class `[kafka]` options, the
//! password coming from `OUTBOX_RELAY__KAFKA__SASL_PASSWORD` or `sasl_password_file`; an
//! independent consumer with the same settings reads what it produced. A wrong password and
//! a wrong CA are refused by `setup` with the reason, and no password ever reaches the log.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::Duration,
};

use crate::support::{TestDb, check, connect, kafka, relay::Relay, repo_root, writer};

/// SASL_SSL listener (the port infra/kafka/start.sh waits for); controller on +1.
const PORT: u16 = 49392;
/// SASL_PLAINTEXT listener with PLAIN.
const PLAIN_PORT: u16 = 49394;

const SCRAM_USER: &str = "relay";
const SCRAM_PASSWORD: &str = "scram-Pa55-8c1f0e";
const PLAIN_USER: &str = "plainrelay";
const PLAIN_PASSWORD: &str = "plain-Pa55-77d2a1";
/// The broker's own SCRAM identity on its inter-broker (SASL_SSL) listener.
const BROKER_PASSWORD: &str = "broker-Pa55-31b9";
const WRONG_PASSWORD: &str = "wr0ng-Pa55-d00d5e";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn self_signed_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// `ca.pem`, a broker certificate for localhost / 127.0.0.1 signed by it, as the PEM keystore
/// `server.pem` (unencrypted PKCS#8 key + certificate), and an unrelated `otherca.pem`.
fn make_certs(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    self_signed_ca(dir, "ca");
    self_signed_ca(dir, "otherca");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ],
    );
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
    ]
    .join("\n");
    let format_args = [
        "--add-scram".to_string(),
        format!("SCRAM-SHA-512=[name=broker,password={BROKER_PASSWORD}]"),
        "--add-scram".into(),
        format!("SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"),
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

    fn ca(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
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

/// The test's relay config with `kafka_keys` added to `[kafka]` and the brokers replaced.
fn relay_config(db: &TestDb, brokers: &str, kafka_keys: &str) -> String {
    db.relay_config(&db.outbox_section())
        .replace(&crate::support::kafka_brokers(), brokers)
        .replace(
            "[kafka]\n",
            &format!("[kafka]\nconnect_timeout_ms = 5000\n{kafka_keys}"),
        )
}

/// Writes events for two aggregates, consumes them with `props` and checks them.
async fn relay_and_check(db: &TestDb, test: &str, brokers: &str, props: &[(&str, &str)]) {
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
        "{f:?}"
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
    let cfg = relay_config(
        &db,
        &brokers,
        &format!(
            "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"{SCRAM_USER}\"\nssl_ca_location = \"{}\"\n",
            broker.ca("ca.pem")
        ),
    );

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
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;
    relay_and_check(
        &db,
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
    let cfg = relay_config(
        &db,
        &brokers,
        &format!(
            "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"{SCRAM_USER}\"\nssl_ca_location = \"{}\"\n",
            broker.ca("otherca.pem")
        ),
    );
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
    let mut relay = Relay::start(&db.name, &cfg);
    relay
        .wait_log("streaming_started", Duration::from_secs(60))
        .await;
    relay_and_check(
        &db,
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
