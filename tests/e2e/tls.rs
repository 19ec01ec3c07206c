//! TLS to PostgreSQL with `sslmode = "verify-full"`: both of the relay's connections are
//! encrypted and the server certificate is checked; a wrong CA is refused with a clear error.

use std::{path::Path, process::Command, time::Duration};

use crate::support::{TestDb, certs, check, connect, kafka, relay::Relay, repo_root, writer};

const PORT: u16 = 25441;

/// The test certificates (support/certs.rs), with the key made readable for PostgreSQL only.
fn make_certs(dir: &Path) {
    certs::make(dir);
    // PostgreSQL reads the key as its own user and insists on mode 0600.
    for f in ["server.key", "server.crt"] {
        assert!(
            Command::new("chown")
                .args(["postgres", dir.join(f).to_str().unwrap()])
                .status()
                .unwrap()
                .success()
        );
    }
    assert!(
        Command::new("chmod")
            .args(["600", dir.join("server.key").to_str().unwrap()])
            .status()
            .unwrap()
            .success()
    );
}

struct Cluster;
impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("infra/pg/stop.sh"))
            .arg("--destroy")
            .env("PGPORT", PORT.to_string())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_encrypts_both_connections_and_refuses_a_wrong_ca() {
    let dir = repo_root().join("target/e2e/tls-certs");
    make_certs(&dir);
    let _cluster = Cluster;
    let opts = format!(
        "-c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key",
        d = dir.display()
    );
    let ok = Command::new(repo_root().join("infra/pg/start.sh"))
        .env("PGPORT", PORT.to_string())
        .env("PG_EXTRA_OPTS", opts)
        .status()
        .unwrap()
        .success();
    assert!(ok, "TLS cluster did not start");
    let db = TestDb::new_on(
        &format!("host=127.0.0.1 port={PORT} user=postgres"),
        PORT,
        "tls",
    )
    .await;
    let tls_cfg = |ca: &str| {
        db.relay_config(&db.outbox_section()).replace(
            "[postgres]\n",
            &format!(
                "[postgres]\nhost = \"localhost\"\nsslmode = \"verify-full\"\nsslrootcert = \"{}\"\n",
                dir.join(ca).display()
            ),
        )
    };

    // A CA that did not sign the server certificate: refused, with the reason.
    let (status, log) = Relay::once(&db.name, &tls_cfg("otherca.pem"), &["setup"], &[]);
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("TLS verification of PostgreSQL at localhost"),
        "{log}"
    );

    let mut relay = Relay::streaming(&db.name, &tls_cfg("ca.pem")).await;
    let c = connect(&db.conninfo()).await;
    let written = vec![
        writer::insert_event(&c, "order", "tls-1", 0).await.unwrap(),
        writer::insert_event(&c, "order", "tls-1", 0).await.unwrap(),
    ];
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 2).await;
    let f = check::check("tls_verify_full", |t| db.topic(t), &written, &got);
    assert_eq!((f.lost, f.order_violations), (0, 0), "{f:?}");
    // The replication connection and the control connections all use TLS.
    let rows = c
        .query(
            "SELECT a.application_name, s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name LIKE 'outbox-relay%'",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<(String, bool)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(
        names.iter().any(|(n, _)| n == "outbox-relay"),
        "no replication connection: {names:?}"
    );
    assert!(
        names.iter().all(|(_, ssl)| *ssl),
        "a connection without TLS: {names:?}"
    );
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
