//! Every failed precondition is one actionable sentence and the right exit code; transient
//! problems are retried; a missing slot is never created silently by `run`.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use crate::support::{TestDb, connect, kafka, relay::Relay, repo_root, writer};

fn code(status: std::process::ExitStatus) -> i32 {
    status.code().unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_table_and_missing_slot_are_explained_and_nothing_is_created() {
    let db = TestDb::new("pre").await;
    let cfg = db.relay_config("[[outbox]]\ntable = \"public.nope\"\n");
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(code(status), 3, "{log}");
    assert!(
        log.contains("outbox table public.nope does not exist"),
        "{log}"
    );

    // run without create_slot: refuses, and leaves no slot behind.
    let cfg = db
        .relay_config(&db.outbox_section())
        .replace("create_slot = true", "create_slot = false");
    let (status, log) = Relay::once(&db.name, &cfg, &["run"], &[]);
    assert_eq!(code(status), 3, "{log}");
    assert!(
        log.contains(&format!("replication slot \"{}\" does not exist", db.name)),
        "{log}"
    );
    assert!(log.contains("outbox-relay setup"), "{log}");
    assert_eq!(
        db.confirmed_flush().await,
        None,
        "run must not create the slot"
    );

    // setup creates publication and slot; then run works.
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert_eq!(code(status), 0, "{log}");
    assert!(db.confirmed_flush().await.is_some());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_reported_without_leaking_it() {
    let db = TestDb::new("pw").await;
    // infra/pg/start.sh requires SCRAM for this role on 127.0.0.1.
    db.client
        .batch_execute(
            "DO $$ BEGIN
               IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'relay_pw_test') THEN
                 CREATE ROLE relay_pw_test LOGIN REPLICATION PASSWORD 'right-password';
               END IF;
             END $$;",
        )
        .await
        .unwrap();
    let cfg = db
        .relay_config(&db.outbox_section())
        .replace("[postgres]\n", "[postgres]\nuser = \"relay_pw_test\"\n");
    let secret = "s3cr3t-Wr0ng-pw";
    let (status, log) = Relay::once(
        &db.name,
        &cfg,
        &["run"],
        &[("OUTBOX_RELAY__POSTGRES__PASSWORD", secret)],
    );
    assert_eq!(code(status), 3, "{log}");
    assert!(
        log.contains("rejected the credentials of user \"relay_pw_test\""),
        "{log}"
    );
    assert!(
        !log.contains(secret),
        "the password appeared in the log:\n{log}"
    );
    // check-config prints the config with the secret redacted.
    let (status, out) = Relay::once(
        &db.name,
        &cfg,
        &["check-config"],
        &[("OUTBOX_RELAY__POSTGRES__PASSWORD", secret)],
    );
    assert_eq!(code(status), 0);
    assert!(!out.contains(secret));

    // The right password authenticates with SCRAM-SHA-256 on the control and the replication
    // connection (the publication is the table owner's to create).
    db.create_publication().await;
    let right = [("OUTBOX_RELAY__POSTGRES__PASSWORD", "right-password")];
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &right);
    relay
        .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
        .await;
    let method: String = db
        .client
        .query_one(
            "SELECT coalesce(max(a.backend_type), '') FROM pg_stat_activity a \
              WHERE a.usename = 'relay_pw_test' AND a.backend_type = 'walsender'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        method, "walsender",
        "the replication connection runs as relay_pw_test"
    );
    assert_eq!(code(relay.terminate(Duration::from_secs(30))), 0);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_config_keys_and_unreachable_broker_are_explained() {
    let db = TestDb::new("cfg").await;
    let (status, log) = Relay::once(
        &db.name,
        "[postgres]\nhots = \"x\"\n",
        &["check-config"],
        &[],
    );
    assert_eq!(code(status), 2, "{log}");
    assert!(log.contains("unknown field `hots`"), "{log}");

    let cfg = db
        .relay_config(&db.outbox_section())
        .replace(&crate::support::kafka_brokers(), "127.0.0.1:1")
        .replace("[kafka]\n", "[kafka]\nconnect_timeout_ms = 2000\n");
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert_eq!(code(status), 1, "{log}");
    assert!(log.contains("cannot reach Kafka at 127.0.0.1:1"), "{log}");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_level_replica_is_explained() {
    const PORT: &str = "25439";
    let run = |script: &str, args: &[&str]| {
        let ok = Command::new(repo_root().join("infra/pg").join(script))
            .args(args)
            .env("PGPORT", PORT)
            .env("PG_EXTRA_OPTS", "-c wal_level=replica")
            .status()
            .unwrap()
            .success();
        assert!(ok, "infra/pg/{script} failed");
    };
    run("start.sh", &[]);
    let cfg = format!(
        "[postgres]\nport = {PORT}\n[kafka]\nbrokers = \"{}\"\n",
        crate::support::kafka_brokers()
    );
    let (status, log) = Relay::once("wal_level_replica", &cfg, &["setup"], &[]);
    run("stop.sh", &["--destroy"]);
    assert_eq!(code(status), 3, "{log}");
    assert!(
        log.contains("wal_level is \"replica\"") && log.contains("wal_level = logical"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_is_retried_until_stopped() {
    let cfg = format!(
        "[postgres]\nport = 1\n[kafka]\nbrokers = \"{}\"\n",
        crate::support::kafka_brokers()
    );
    let mut relay = Relay::start("pg_unreachable", &cfg);
    relay
        .wait_log(
            "cannot reach PostgreSQL at 127.0.0.1:1",
            Duration::from_secs(30),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        relay.is_running(),
        "a transient error must be retried, not fatal"
    );
    assert_eq!(code(relay.terminate(Duration::from_secs(10))), 0);
    // Logged once while the reason repeats.
    assert_eq!(
        relay.log_text().matches(events::PIPELINE_RESTART).count(),
        1,
        "{}",
        relay.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_waits_for_the_slot_and_takes_over_after_kill9() {
    let db = TestDb::new("ha").await;
    // Default restart settings: the passive instance watches the slot, so its takeover does
    // not wait for the backoff (whose cap, 30 s, it would otherwise have reached).
    let cfg = db.relay_config(&format!(
        "{}\n[http]\nlisten = \"127.0.0.1:0\"\n",
        db.outbox_section()
    ));
    let mut active = Relay::streaming(&db.name, &cfg).await;
    let mut passive = Relay::start(&db.name, &cfg);
    passive.wait_log("slot_busy", Duration::from_secs(30)).await;
    assert!(passive.is_running());
    assert!(!passive.log_text().contains(events::STREAMING_STARTED));
    // Readiness per role (Kubernetes probes, docs/operations.md): the passive instance is not
    // ready to stream, but with `role=any` it is ready in its role; the active one is both.
    use crate::support::http::{get, relay_addr};
    let (passive_addr, active_addr) = (relay_addr(&passive).await, relay_addr(&active).await);
    let (code, body) = get(passive_addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("not streaming"), "{body}");
    assert_eq!(get(passive_addr, "/readyz?role=any").await.0, 200);
    assert_eq!(get(active_addr, "/readyz").await.0, 200);
    assert_eq!(get(active_addr, "/readyz?role=any").await.0, 200);

    let c = connect(&db.conninfo()).await;
    let mut written = vec![writer::insert_event(&c, "order", "ha-1", 0).await.unwrap()];
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;

    active.kill9();
    let killed = Instant::now();
    written.push(writer::insert_event(&c, "order", "ha-1", 0).await.unwrap());
    passive
        .wait_log(events::STREAMING_STARTED, Duration::from_secs(60))
        .await;
    let takeover = killed.elapsed();
    eprintln!("takeover after kill -9: {takeover:?} (default restart backoff)");
    assert!(
        passive.log_text().contains(events::SLOT_FREED),
        "{}",
        passive.log_text()
    );
    assert!(
        takeover < Duration::from_secs(10),
        "takeover took {takeover:?} with default settings"
    );
    crate::support::check::note(&format!(
        "ha_takeover: standby streaming {} ms after kill -9 of the active instance",
        takeover.as_millis()
    ));

    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 2).await;
    let f = crate::support::check::check("ha_takeover", |t| db.topic(t), &written, &got);
    assert_eq!((f.lost, f.order_violations), (0, 0), "{f:?}");
    passive.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_system_identifier_is_refused_and_failover_slots_need_pg17() {
    let db = TestDb::new("sysid").await;
    let actual: String = db
        .client
        .query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let cfg = db.relay_config(&db.outbox_section());
    let pinned = |id: &str| {
        cfg.replace(
            "[postgres]\n",
            &format!("[postgres]\nsystem_identifier = \"{id}\"\n"),
        )
    };
    let (status, log) = Relay::once(&db.name, &pinned("7000000000000000001"), &["run"], &[]);
    assert_eq!(code(status), 1, "{log}");
    assert!(
        log.contains(&format!(
            "is PostgreSQL system {actual}, but this relay streams from system 7000000000000000001"
        )),
        "{log}"
    );
    // The right identifier streams.
    let mut relay = Relay::streaming(&db.name, &pinned(&actual)).await;
    assert_eq!(code(relay.terminate(Duration::from_secs(30))), 0);

    // failover slots exist from PostgreSQL 17 on; on this server the request is explained.
    let version = db.server_version_num().await;
    if version < 170000 {
        let cfg = db
            .relay_config(&db.outbox_section())
            .replace(
                "[postgres]\n",
                "[postgres]\nfailover_slot = true\nslot = \"other_slot_name_x\"\n",
            )
            .replace(&format!("slot = \"{}\"\n", db.name), "");
        let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
        assert_eq!(code(status), 3, "{log}");
        assert!(log.contains("PostgreSQL 17"), "{log}");
    }
    db.cleanup().await;
}
