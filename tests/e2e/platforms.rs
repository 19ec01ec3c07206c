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
