//! The relay runs as the least-privilege role of docs/security.md, not as a superuser and not
//! as the table's owner, with each statement of the recipe run by the actor it names.

use std::time::Duration;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_runs_as_a_non_superuser_replication_role() {
    let db = TestDb::new("leastpriv").await;
    let role = format!("{}_relay", db.name);
    let owner = format!("{}_owner", db.name);
    // docs/security.md's recipe, each statement by the actor it names. 1: an administrator (a
    // superuser here; CREATEROLE or the service's admin role on a managed server).
    db.client
        .batch_execute(&format!(
            "CREATE ROLE {owner} LOGIN;
             ALTER TABLE public.outbox OWNER TO {owner};
             CREATE ROLE {role} LOGIN REPLICATION;
             GRANT CONNECT ON DATABASE {db} TO {role};
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT CREATE ON DATABASE {db} TO {owner};",
            db = db.name
        ))
        .await
        .unwrap();
    // 2: the outbox table's owner, neither superuser nor replication role.
    let as_owner = connect(&format!("{} user={owner}", db.conninfo())).await;
    as_owner
        .batch_execute(&format!(
            "GRANT SELECT ON public.outbox TO {role};
             CREATE PUBLICATION {db} FOR TABLE public.outbox
                 WITH (publish = 'insert', publish_via_partition_root = true);",
            db = db.name
        ))
        .await
        .unwrap();
    drop(as_owner);
    // 3: the relay's role runs setup (the slot) and run.
    let superuser: bool = db
        .client
        .query_one(
            "SELECT bool_or(rolsuper) FROM pg_roles WHERE rolname IN ($1, $2)",
            &[&role, &owner],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!superuser);
    let table_owner: String = db
        .client
        .query_one(
            "SELECT tableowner::text FROM pg_tables WHERE tablename = 'outbox'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        table_owner, owner,
        "the relay's role does not own the table"
    );
    let cfg = db.relay_config(&db.outbox_section()).replace(
        "[postgres]\n",
        &format!("[postgres]\nuser = \"{role}\"\ncreate_publication = false\n"),
    );
    let (status, log) = Relay::once(&db.name, &cfg, &["setup"], &[]);
    assert_eq!(status.code(), Some(0), "{log}");
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    let written = vec![
        writer::insert_event(&c, "order", "lp-1", 0).await.unwrap(),
        writer::insert_event(&c, "order", "lp-1", 0).await.unwrap(),
    ];
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), 2).await;
    let f = check::check("least_privilege_role", |t| db.topic(t), &written, &got);
    assert_eq!((f.lost, f.order_violations), (0, 0), "{f:?}");
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
    let admin = connect(&format!("{} dbname=postgres", crate::support::pg_base())).await;
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; DROP ROLE IF EXISTS {owner}"
        ))
        .await
        .unwrap();
}
