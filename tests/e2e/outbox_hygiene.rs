//! Outbox table hygiene against real servers: the monitor's table gauges, the
//! `outbox_dead_tuples` alert and the `status` line, under each cleanup strategy of
//! docs/operations.md: insert-then-delete in one transaction (still published), a
//! time-partitioned outbox retired with DETACH/DROP PARTITION, per-table autovacuum settings
//! (own cluster on port 28435 with a 1 s autovacuum naptime), and the table-less mode.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use outbox_relay::telemetry::events;

use crate::support::{
    TestDb,
    cluster::PgCluster,
    connect, eventually,
    http::{WebhookReceiver, relay_addr, scrape},
    kafka,
    relay::{self, Relay},
    writer,
};

const AUTOVACUUM_PG_PORT: u16 = 28435;
const TABLE: (&str, &str) = ("table", "public.outbox");
const VACUUMED: &str = "outbox_relay_outbox_last_autovacuum_timestamp_seconds";
const ANALYZED: &str = "outbox_relay_outbox_last_autoanalyze_timestamp_seconds";

/// The outbox with `created_at_column`, a fast monitor that reads the table every 300 ms.
fn config(db: &TestDb, extra: &str) -> String {
    db.relay_config(&format!(
        "{}created_at_column = \"created_at\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n\
         [monitor]\npoll_interval_ms = 250\noutbox_stats_interval_ms = 300\n\n{extra}",
        db.outbox_section()
    ))
}

fn status(relay: &Relay) -> String {
    let o = Command::new(relay::binary())
        .args(["status", "--config"])
        .arg(&relay.config)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox-relay status");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `n` events, each inserted and deleted in its own transaction.
async fn insert_then_delete(db: &TestDb, n: usize) -> Vec<String> {
    let mut c = connect(&db.conninfo()).await;
    let mut ids = Vec::new();
    for i in 0..n {
        let tx = c.transaction().await.unwrap();
        let w = writer::insert_event(&tx, "order", &format!("d-{}", i % 3), 0)
            .await
            .unwrap();
        tx.execute("DELETE FROM outbox WHERE id = $1::text::uuid", &[&w.id])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        ids.push(w.id);
    }
    ids
}

async fn assert_published(db: &TestDb, ids: &[String]) {
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(60), ids.len()).await;
    for id in ids {
        assert!(
            got.iter().any(|r| r.header("id") == id),
            "event {id} missing"
        );
    }
}

/// [`assert_published`], then waits for the monitor to count `partitions` partitions.
async fn assert_published_with_partitions(
    db: &TestDb,
    ids: &[String],
    addr: std::net::SocketAddr,
    partitions: f64,
) {
    assert_published(db, ids).await;
    let what = format!("{partitions} partitions");
    eventually(&what, Duration::from_secs(20), || async {
        scrape(addr)
            .await
            .value("outbox_relay_outbox_partitions", &[TABLE])
            .filter(|p| *p == partitions)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_then_delete_is_published_leaves_dead_tuples_and_alerts() {
    let db = TestDb::new("hyg_del").await;
    let hook = WebhookReceiver::start().await;
    let cfg = config(
        &db,
        &format!(
            "[alerts]\noutbox_dead_tuples_warning = 20\noutbox_dead_tuples_critical = 0\n\n\
             [alerts.webhook]\nurl = \"{}\"\nrepeat_interval_secs = 0\n",
            hook.url
        ),
    );
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let addr = relay_addr(&relay).await;
    let ids = insert_then_delete(&db, 30).await;
    assert_published(&db, &ids).await;

    let fired = eventually(
        "the outbox_dead_tuples alert",
        Duration::from_secs(30),
        || async {
            hook.bodies()
                .into_iter()
                .find(|b| b["alert"] == "outbox_dead_tuples" && b["status"] == "firing")
        },
    )
    .await;
    let summary = fired["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("outbox table public.outbox holds "),
        "{summary}"
    );
    let m = scrape(addr).await;
    let dead = m
        .value("outbox_relay_outbox_dead_tuples", &[TABLE])
        .unwrap();
    assert!(dead >= 20.0, "{dead} dead tuples after 30 deleted rows");
    assert_eq!(
        m.value("outbox_relay_outbox_live_tuples", &[TABLE]),
        Some(0.0)
    );
    assert!(m.value("outbox_relay_outbox_size_bytes", &[TABLE]).unwrap() > 0.0);
    assert_eq!(
        m.value("outbox_relay_outbox_partitions", &[TABLE]),
        Some(1.0)
    );
    assert_eq!(
        m.value("outbox_relay_outbox_oldest_row_age_seconds", &[TABLE]),
        Some(0.0),
        "the table is empty"
    );
    let s = status(&relay);
    let line = s
        .lines()
        .find(|l| l.starts_with("  outbox table     public.outbox: "))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(line.contains(" dead tuples, "), "{line}");
    assert!(
        s.contains("WARNING outbox_dead_tuples: outbox table public.outbox holds"),
        "{s}"
    );

    // A row that stays: the oldest row ages; a vacuum removes the dead tuples.
    writer::insert_event(&db.client, "order", "kept", 0)
        .await
        .unwrap();
    let t0 = Instant::now();
    eventually("the oldest row to age", Duration::from_secs(20), || async {
        scrape(addr)
            .await
            .value("outbox_relay_outbox_oldest_row_age_seconds", &[TABLE])
            .filter(|a| *a >= 1.0 && *a <= t0.elapsed().as_secs_f64() + 1.0)
    })
    .await;
    db.client.batch_execute("VACUUM outbox").await.unwrap();
    eventually(
        "outbox_dead_tuples to resolve",
        Duration::from_secs(30),
        || async {
            hook.bodies()
                .into_iter()
                .find(|b| b["alert"] == "outbox_dead_tuples" && b["status"] == "resolved")
        },
    )
    .await;
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_partitioned_outbox_is_retired_by_dropping_partitions() {
    let db = TestDb::new("hyg_part").await;
    db.partitioned_outbox(
        "CREATE TABLE outbox_2020 PARTITION OF outbox
             FOR VALUES FROM ('2020-01-01') TO ('2021-01-01');
         CREATE TABLE outbox_now PARTITION OF outbox
             FOR VALUES FROM ('2021-01-01') TO (MAXVALUE);",
    )
    .await;
    let mut relay = Relay::streaming(&db.name, &config(&db, "")).await;
    let addr = relay_addr(&relay).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = uuid::Uuid::new_v4().to_string();
        db.client
            .execute(
                "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload, created_at) \
                 VALUES ($1::text::uuid, 'order', $2, 'Event', '{}', '2020-06-01')",
                &[&id, &format!("old-{i}")],
            )
            .await
            .unwrap();
        ids.push(id);
        ids.push(
            writer::insert_event(&db.client, "order", "new", 0)
                .await
                .unwrap()
                .id,
        );
    }
    assert_published_with_partitions(&db, &ids, addr, 2.0).await;

    // Every row of 2020 is published: the partition goes, with no dead tuple left behind.
    db.client
        .batch_execute("ALTER TABLE outbox DETACH PARTITION outbox_2020; DROP TABLE outbox_2020")
        .await
        .unwrap();
    let new = writer::insert_orders(&db.client, 3, |_| "new".into()).await;
    ids.extend(new.into_iter().map(|w| w.id));
    assert_published_with_partitions(&db, &ids, addr, 1.0).await;
    assert!(relay.is_running(), "{}", relay.log_text());
    assert!(!relay.log_text().contains(events::PUBLICATION_DRIFT));
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_table_autovacuum_settings_keep_the_dead_tuples_down() {
    let cluster = PgCluster::start(AUTOVACUUM_PG_PORT, "-c autovacuum_naptime=1");
    let db = TestDb::new_on(&cluster.base(), cluster.port, "hyg_vac").await;
    db.client
        .batch_execute(
            "ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, \
             autovacuum_vacuum_threshold = 20, autovacuum_analyze_scale_factor = 0, \
             autovacuum_analyze_threshold = 20)",
        )
        .await
        .unwrap();
    let mut relay = Relay::streaming(&db.name, &config(&db, "")).await;
    let addr = relay_addr(&relay).await;
    let m = scrape(addr).await;
    for (metric, what) in [
        (VACUUMED, "never vacuumed yet"),
        (ANALYZED, "never analyzed yet"),
    ] {
        assert_eq!(m.value(metric, &[TABLE]), Some(0.0), "{what}");
    }
    let ids = insert_then_delete(&db, 60).await;
    assert_published(&db, &ids).await;
    // 120 inserted and deleted rows pass both thresholds: one autovacuum worker pass vacuums
    // and analyzes the table.
    let (vacuumed, analyzed) = eventually(
        "an autovacuum and an autoanalyze of the outbox",
        Duration::from_secs(60),
        || async {
            let m = scrape(addr).await;
            let vacuumed = m.value(VACUUMED, &[TABLE])?;
            let analyzed = m.value(ANALYZED, &[TABLE])?;
            let dead = m.value("outbox_relay_outbox_dead_tuples", &[TABLE])?;
            (vacuumed > 0.0 && analyzed > 0.0 && dead < 20.0).then_some((vacuumed, analyzed))
        },
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for (what, at) in [("autovacuum", vacuumed), ("autoanalyze", analyzed)] {
        assert!((now - at).abs() < 120.0, "{what} at {at}, now {now}");
    }
    assert!(status(&relay).contains("vacuumed "));
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_less_mode_has_no_table_to_watch() {
    let db = TestDb::new("hyg_msg").await;
    let cfg = db.relay_config(&format!(
        "[[message]]\nprefix = \"outbox\"\ntopic = \"{}.{{aggregatetype}}\"\n\n[http]\n\
         listen = \"127.0.0.1:0\"\n\n[monitor]\npoll_interval_ms = 250\n\
         outbox_stats_interval_ms = 300\n",
        db.name
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let addr = relay_addr(&relay).await;
    let w = writer::emit_event(&db.client, "order", "m", 0)
        .await
        .unwrap();
    assert_published(&db, &[w.id]).await;
    let m = scrape(addr).await;
    assert_eq!(m.value("outbox_relay_outbox_tables", &[]), Some(0.0));
    assert_eq!(m.value("outbox_relay_outbox_dead_tuples", &[TABLE]), None);
    let s = status(&relay);
    assert!(s.contains("publishes        no outbox table"), "{s}");
    assert!(!s.contains("outbox table     "), "{s}");
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
