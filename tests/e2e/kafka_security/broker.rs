//! The secured broker of these tests: certificates, SCRAM credentials and listeners, shared by
//! the tests that run at once and stopped by the last one; the ACLs a test grants.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

use super::{
    BROKER_PASSWORD, LIMITED_PASSWORD, LIMITED_USER, PLAIN_PASSWORD, PLAIN_PORT, PLAIN_USER, PORT,
    SCRAM_PASSWORD, SCRAM_USER,
};
use crate::support::{certs, repo_root};

/// The test certificates (support/certs.rs) plus `server.pem`, the broker's PEM keystore
/// (unencrypted PKCS#8 key + certificate).
fn make_certs(dir: &Path) {
    certs::make(dir);
    let key = std::fs::read_to_string(dir.join("server.key")).unwrap();
    let crt = std::fs::read_to_string(dir.join("server.crt")).unwrap();
    std::fs::write(dir.join("server.pem"), format!("{key}{crt}")).unwrap();
}

pub(super) fn kafka_script(name: &str, args: &[&str], env: &[(&str, String)]) -> bool {
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
pub(super) struct Broker {
    certs: PathBuf,
}

static USERS: Mutex<usize> = Mutex::new(0);

impl Broker {
    pub(super) fn get() -> Broker {
        let certs = repo_root().join("target/e2e/kafka-security-certs");
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        if *users == 0 {
            start_broker(&certs);
        }
        *users += 1;
        Broker { certs }
    }

    /// Runs AclCommand (infra/kafka/acls.sh) as the super user `plainrelay`.
    pub(super) fn acl(&self, args: &[&str]) {
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

    pub(super) fn ca(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }

    /// What docs/security.md grants a relay's principal `user` for topics starting with
    /// `prefix`: IDEMPOTENT_WRITE on the cluster, WRITE, DESCRIBE and CREATE on the topics.
    pub(super) fn grant_relay_topics(&self, user: &str, prefix: &str) {
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
    pub(super) fn grant_transactional_id(&self, user: &str, id: &str) {
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
