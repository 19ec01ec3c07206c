//! What a local server can show of the managed services (docs/platforms.md): a role that may
//! replicate only through membership in a role named `rds_replication` (RDS and Aurora's model)
//! gets past the relay's own role check to the server's, and the server's refusal comes with
//! the `GRANT rds_replication` advice, never `ALTER ROLE … REPLICATION`; a role with neither
//! gets the advice of the platform detected.

use crate::support::{TestDb, cluster::PgCluster, relay::Relay};

/// The relay's config for `db` as `user`, with the publication left to the owner.
fn config_as(db: &TestDb, user: &str) -> String {
    db.relay_config(&db.outbox_section()).replace(
        "[postgres]\n",
        &format!("[postgres]\nuser = \"{user}\"\ncreate_publication = false\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_through_rds_replication_membership_gets_the_grant_advice() {
    // Its own cluster: the marker role rds_replication is cluster-wide and would turn every
    // other test's cluster into "RDS".
    let cluster = PgCluster::start(25482, "");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "rdsrole").await;
    let (member, plain) = (format!("{}_m", db.name), format!("{}_p", db.name));
    db.client
        .batch_execute(&format!(
            "CREATE ROLE rds_replication NOLOGIN;
             CREATE ROLE {member} LOGIN;
             CREATE ROLE {plain} LOGIN;
             GRANT rds_replication TO {member};
             GRANT CONNECT ON DATABASE {db} TO {member}, {plain};
             GRANT USAGE ON SCHEMA public TO {member}, {plain};
             GRANT SELECT ON public.outbox TO {member}, {plain};
             CREATE PUBLICATION {db} FOR TABLE public.outbox
                 WITH (publish = 'insert', publish_via_partition_root = true);",
            db = db.name
        ))
        .await
        .unwrap();
    let attribute: bool = db
        .client
        .query_one(
            "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = $1",
            &[&member],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!attribute, "the member has no REPLICATION attribute");

    // The member is let through to the server, which (not being RDS) refuses the slot.
    let (exit, log) = Relay::once(&db.name, &config_as(&db, &member), &["setup"], &[]);
    assert_eq!(exit.code(), Some(3), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        log.contains("replication_by_membership"),
        "the membership was recognised:\n{log}"
    );
    assert!(
        last.contains("cannot create replication slot")
            && last.contains(&format!("GRANT rds_replication TO \"{member}\""))
            && last.contains("master user")
            && !last.contains(&format!("ALTER ROLE \"{member}\"")),
        "setup reached the server's check and gives RDS's grant: {last}"
    );

    // A role with neither is stopped by the relay's own check, with the same platform's advice.
    let (exit, log) = Relay::once(&db.name, &config_as(&db, &plain), &["setup"], &[]);
    assert_eq!(exit.code(), Some(3), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("cannot open a replication connection on Amazon RDS / Aurora")
            && last.contains(&format!("GRANT rds_replication TO \"{plain}\""))
            && !last.contains(&format!("ALTER ROLE \"{plain}\"")),
        "{last}"
    );
    let slots: i64 = db
        .client
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0, "no slot was created");
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_replication_on_a_self_managed_server_gets_alter_role() {
    let db = TestDb::new("noreplrole").await;
    let role = format!("{}_r", db.name);
    db.client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT CONNECT ON DATABASE {db} TO {role};
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT ON public.outbox TO {role};",
            db = db.name
        ))
        .await
        .unwrap();
    let (exit, log) = Relay::once(&db.name, &config_as(&db, &role), &["setup"], &[]);
    assert_eq!(exit.code(), Some(3), "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("cannot open a replication connection on self-managed PostgreSQL")
            && last.contains(&format!(
                "ALTER ROLE \"{role}\" REPLICATION; run it as a superuser"
            ))
            && !last.contains("rds_replication"),
        "{last}"
    );
    db.cleanup().await;
    let admin =
        crate::support::connect(&format!("{} dbname=postgres", crate::support::pg_base())).await;
    admin
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
        .await
        .unwrap();
}

/// A managed server that sets `max_slot_wal_keep_size` but does not show `safe_wal_size`
/// (seen as a hidden column; Azure fixes the setting at -1 instead), and trims
/// `pg_stat_replication_slots` to no counters: views of the test's own come first on the
/// relay role's search_path. The forecast then runs on the estimate (limit minus retained WAL)
/// instead of switching off, the monitor keeps reading the slot without the spill counters,
/// and `status` says the server does not show `safe_wal_size`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_safe_wal_size_is_estimated_from_the_limit() {
    let cluster = PgCluster::start(25483, "-c max_slot_wal_keep_size=512MB");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "hiddensafe").await;
    let role = format!("{}_r", db.name);
    db.client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN REPLICATION;
             GRANT CONNECT ON DATABASE {db} TO {role};
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT ON public.outbox TO {role};
             CREATE PUBLICATION {db} FOR TABLE public.outbox
                 WITH (publish = 'insert', publish_via_partition_root = true);
             CREATE SCHEMA hidden;
             CREATE VIEW hidden.pg_replication_slots AS
                 SELECT (jsonb_populate_record(NULL::pg_catalog.pg_replication_slots,
                                               to_jsonb(s) - 'safe_wal_size')).*
                   FROM pg_catalog.pg_replication_slots s;
             CREATE VIEW hidden.pg_stat_replication_slots AS
                 SELECT slot_name FROM pg_catalog.pg_stat_replication_slots;
             GRANT USAGE ON SCHEMA hidden TO {role};
             GRANT SELECT ON hidden.pg_replication_slots, hidden.pg_stat_replication_slots
                 TO {role};
             ALTER ROLE {role} SET search_path = hidden, pg_catalog, public;",
            db = db.name
        ))
        .await
        .unwrap();
    // Kafka unreachable: the slot exists and never advances while WAL is written.
    let cfg = format!(
        "{}\n[http]\nlisten = \"127.0.0.1:0\"\n\n[monitor]\npoll_interval_ms = 250\n\n\
         [alerts]\nslot_forecast_window_secs = 3\nslot_forecast_warning_secs = 100000\n",
        config_as(&db, &role)
    )
    .replace(
        &crate::support::kafka_brokers(),
        &format!("127.0.0.1:{}", crate::support::http::free_port()),
    );
    let mut relay = Relay::start_with(&db.name, &cfg, &["run"], &[]);
    let addr = crate::support::http::relay_addr(&relay).await;
    crate::support::eventually(
        "the relay's slot",
        std::time::Duration::from_secs(30),
        || async { db.slot_exists().await.then_some(()) },
    )
    .await;
    // The relay really reads no safe_wal_size (-1), under a limit it reads.
    crate::support::eventually(
        "the monitor's reading of the slot",
        std::time::Duration::from_secs(20),
        || async {
            let m = crate::support::http::scrape(addr).await;
            (m.value("outbox_relay_slot_present", &[]) == Some(1.0)
                && m.value("outbox_relay_slot_safe_wal_size_bytes", &[]) == Some(-1.0)
                && m.value("outbox_relay_server_max_slot_wal_keep_size_bytes", &[])
                    == Some((512u64 << 20) as f64))
            .then_some(())
        },
    )
    .await;
    let writer = crate::support::connect(&db.conninfo()).await;
    // Warning or critical, depending on this machine's WAL rate.
    let firing = "] slot_forecast: at the current WAL rate";
    for _ in 0..200 {
        writer
            .batch_execute(
                "INSERT INTO business(note) SELECT repeat('x', 1900) FROM generate_series(1, 200)",
            )
            .await
            .unwrap();
        if relay.log_text().contains(firing) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    let log = relay.log_text();
    let line = log
        .lines()
        .find(|l| l.contains(firing))
        .unwrap_or_else(|| panic!("no forecast on the estimate:\n{log}"));
    assert!(
        line.contains("the server shows no safe_wal_size")
            && line.contains("max_slot_wal_keep_size minus the retained WAL"),
        "{line}"
    );
    let out = relay.status();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("safe_wal_size not shown by the server (about ")
            && text.contains("left under max_slot_wal_keep_size)"),
        "{text}"
    );
    relay.terminate(std::time::Duration::from_secs(30));
    db.cleanup().await;
    drop(cluster);
}
