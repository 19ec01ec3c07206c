//! Failover to a promoted standby, with real PostgreSQL servers (own clusters, own ports).
//!
//! The relay reaches PostgreSQL through a TCP proxy that plays the virtual IP: after the
//! primary crashes and the standby is promoted, the proxy is pointed at the standby. The
//! standby is a cold copy of the primary's data directory, so it holds the slot (PostgreSQL
//! 15 has no failover slots; its copy stays where it was at the copy).

use std::time::Duration;

use outbox_relay::telemetry::events;

use crate::support::{
    TestDb, check,
    cluster::PgCluster,
    connect, eventually, kafka,
    proxy::Proxy,
    relay::Relay,
    writer::{self, Written},
};

/// Writes `n` one-event transactions for aggregate `agg`.
pub(crate) async fn write(db: &TestDb, agg: &str, n: usize) -> Vec<Written> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            writer::insert_event(&db.client, "order", agg, 0)
                .await
                .unwrap(),
        );
    }
    out
}

struct Rehearsal {
    primary: PgCluster,
    standby: PgCluster,
    db: TestDb,
    proxy: Proxy,
    relay: Relay,
    cfg: String,
    written: Vec<Written>,
}

/// A primary with a relay streaming through the proxy, events `a` published and confirmed,
/// and a streaming standby cloned from the primary (slot included).
async fn rehearsal(primary_port: u16, standby_port: u16, relay_keys: &str) -> Rehearsal {
    rehearsal_with(primary_port, standby_port, "", relay_keys).await
}

/// [`rehearsal`] with extra `[kafka]` keys.
async fn rehearsal_with(
    primary_port: u16,
    standby_port: u16,
    kafka_keys: &str,
    relay_keys: &str,
) -> Rehearsal {
    let primary = PgCluster::start(primary_port, "");
    let mut db = TestDb::new_on(&primary.base(), primary_port, "failover").await;
    let proxy = Proxy::start(0, primary_port).await;
    let cfg = db
        .relay_config(&format!(
            "{kafka_keys}{}\n[relay]\nrestart_backoff_initial_ms = 100\nrestart_backoff_max_ms = 500\n{relay_keys}",
            db.outbox_section()
        ))
        .replace(
            &format!("port = {primary_port}"),
            &format!("port = {}", proxy.port),
        );
    let relay = Relay::streaming(&db.name, &cfg).await;
    let written = write(&db, "a", 5).await;
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(end, Duration::from_secs(30)).await;

    // The relay keeps running (and retrying) while the primary is down for the copy.
    primary.stop("fast");
    let standby = PgCluster::clone_standby(&primary, standby_port, "");
    primary.restart();
    db.client = connect(&db.conninfo()).await;
    eventually(
        "the relay streaming again",
        Duration::from_secs(30),
        || async { db.slot_active_pid().await },
    )
    .await;
    Rehearsal {
        primary,
        standby,
        db,
        proxy,
        relay,
        cfg,
        written,
    }
}

/// The same database on the promoted standby.
pub(crate) async fn on_standby(db: &TestDb, standby: &PgCluster) -> TestDb {
    let base = standby.base();
    TestDb {
        name: db.name.clone(),
        client: connect(&format!("{base} dbname={}", db.name)).await,
        base,
        port: standby.port,
    }
}

/// The standby stops receiving; the primary commits `b` (5 events) and the relay publishes
/// and confirms them.
async fn publish_while_the_standby_is_down(r: &Rehearsal) -> Vec<Written> {
    r.standby.stop("fast");
    let b = write(&r.db, "b", 5).await;
    let end = r.db.current_wal_lsn().await;
    r.db.wait_confirmed(end, Duration::from_secs(30)).await;
    b
}

/// The primary crashes; the standby, which never saw what was written while it was down, is
/// promoted, takes writes (`c`, 5 events) and gets the address. Returns the database there, its
/// copy of the slot's confirmed position, and `c`.
async fn promote_the_stale_standby(r: &Rehearsal) -> (TestDb, relay_core::Lsn, Vec<Written>) {
    r.primary.stop("immediate");
    r.standby.restart();
    r.standby.promote();
    let sdb = on_standby(&r.db, &r.standby).await;
    let slot_before = sdb.confirmed_flush().await.expect("the slot was copied");
    let c = write(&sdb, "c", 5).await;
    r.proxy.retarget(r.standby.port);
    (sdb, slot_before, c)
}

fn ids(w: &[Written]) -> Vec<&str> {
    w.iter().map(|w| w.id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_that_has_every_published_event_is_followed_and_the_old_primary_is_refused()
 {
    let mut r = rehearsal(25450, 25451, "").await;
    let b = write(&r.db, "b", 5).await;
    // The standby has replayed everything, then the primary crashes.
    let end = r.db.current_wal_lsn().await;
    let standby_client = connect(&format!("{} dbname=postgres", r.standby.base())).await;
    eventually(
        "the standby replaying the primary's WAL",
        Duration::from_secs(30),
        || async {
            let s: String = standby_client
                .query_one(
                    "SELECT coalesce(pg_last_wal_replay_lsn(), '0/0')::text",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            (s.parse::<relay_core::Lsn>().unwrap() >= end).then_some(())
        },
    )
    .await;
    r.db.wait_confirmed(end, Duration::from_secs(30)).await;
    r.primary.stop("immediate");
    r.standby.promote();
    r.proxy.retarget(r.standby.port);

    r.relay
        .wait_log(events::TIMELINE_CHANGED, Duration::from_secs(60))
        .await;
    let sdb = on_standby(&r.db, &r.standby).await;
    let c = write(&sdb, "c", 5).await;
    r.written.extend(b);
    r.written.extend(c);
    let f =
        r.db.check_order_topic("failover_followed", &r.written, Duration::from_secs(60))
            .await;
    f.assert_nothing_lost_or_reordered(&r.relay.log_text());
    // Sent again, nothing else: PostgreSQL 15 writes a slot's confirmed position to disk only
    // when the slot is otherwise dirty, so the primary's restart and the copy both rewound it
    // to where it was created (`a` twice), and the copy never saw `b` confirmed (`b` once).
    assert!(f.duplicated <= 2 * 5 + 5, "{f:?}\n{}", r.relay.log_text());
    let end = sdb.current_wal_lsn().await;
    sdb.wait_confirmed(end, Duration::from_secs(30)).await;

    // Split brain: the old primary comes back (still timeline 1, with its own slot) and the
    // address points at it again. The relay streamed timeline 2 and must not go back.
    r.primary.restart();
    r.proxy.retarget(r.primary.port);
    let (status, log) = r.relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("history_diverged")
            && log
                .contains("the server is on timeline 1, whose history does not contain timeline 2"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_refuses_a_stale_standby_from_the_checkpoint_alone() {
    // No relay.state_file, and the relay that published `b` is killed: only the checkpoint in
    // Kafka knows how far the old timeline was published.
    let mut r = rehearsal_with(
        25477,
        25478,
        "transactional_id = \"failover-eos\"\n",
        "delivery = \"exactly-once\"\n",
    )
    .await;
    let b = publish_while_the_standby_is_down(&r).await;
    r.relay.kill9();
    let promoted = promote_the_stale_standby(&r).await;
    let mut relay = Relay::start(&r.db.name, &r.cfg);
    let f = assert_refused(
        &r.db,
        &r.written,
        &mut relay,
        b,
        promoted,
        "failover_refused_eos",
    )
    .await;
    assert_eq!(f.duplicated, 0, "{f:?}");
}

/// `relay` exits 1 refusing the stale standby: nothing of the new history (`c`) published,
/// the standby's slot not confirmed, everything published before (`a`, `b`) in Kafka.
async fn assert_refused(
    db: &TestDb,
    written: &[Written],
    relay: &mut Relay,
    b: Vec<Written>,
    (sdb, slot_before, c): (TestDb, relay_core::Lsn, Vec<Written>),
    test: &str,
) -> check::Figures {
    let (status, log) = relay.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("history_diverged"), "{log}");
    assert!(log.contains("lost in the failover"), "{log}");
    assert_eq!(sdb.confirmed_flush().await, Some(slot_before));
    let mut expected = written.to_vec();
    expected.extend(b);
    let got = kafka::consume(
        vec![db.topic("order")],
        Duration::from_secs(5),
        expected.len() + c.len(),
    )
    .await;
    let c_ids = ids(&c);
    assert!(
        got.iter().all(|rec| !c_ids.contains(&rec.header("id"))),
        "an event of the new timeline was published"
    );
    let f = check::check(test, |t| db.topic(t), &expected, &got);
    f.assert_nothing_lost_or_reordered("");
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_that_lost_published_events_is_refused() {
    let mut r = rehearsal(25452, 25453, "").await;
    let b = publish_while_the_standby_is_down(&r).await;
    // The primary crashes; the standby, which never saw `b`, is promoted and takes writes.
    let promoted = promote_the_stale_standby(&r).await;
    assert_refused(
        &r.db,
        &r.written,
        &mut r.relay,
        b,
        promoted,
        "failover_refused",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passive_or_restarted_relay_refuses_the_failover_with_the_shared_state_file() {
    let dir = crate::support::repo_root().join("target/e2e/failover-state");
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join(format!("state-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let mut r = rehearsal(
        25454,
        25455,
        &format!("state_file = \"{}\"\n", state.display()),
    )
    .await;
    // A passive instance sharing the state file (a shared volume) waits for the slot.
    let mut passive = Relay::start(&r.db.name, &r.cfg);
    passive.wait_log("slot_busy", Duration::from_secs(30)).await;
    let saved_published = || {
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        saved["published"]
            .as_str()
            .unwrap()
            .parse::<relay_core::Lsn>()
            .unwrap()
    };
    let before_b = saved_published();
    let b = publish_while_the_standby_is_down(&r).await;
    eventually(
        "the active instance recording `b` in the state file",
        Duration::from_secs(10),
        || async { (saved_published() > before_b).then_some(()) },
    )
    .await;
    // The active relay dies with the primary; the passive one finds the promoted standby, and
    // so does a new process.
    r.relay.kill9();
    let (sdb, slot_before, c) = promote_the_stale_standby(&r).await;
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["timeline"], 1, "{saved}");

    // The passive instance started before `b` was published; it refuses with what the active
    // one wrote since.
    let (status, log) = passive.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("history_diverged"), "{log}");
    let (status, log) = Relay::once(&r.db.name, &r.cfg, &["run"], &[]);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(events::STATE_LOADED) && log.contains("history_diverged"),
        "{log}"
    );
    assert_eq!(sdb.confirmed_flush().await, Some(slot_before));
    let got = kafka::consume(
        vec![r.db.topic("order")],
        Duration::from_secs(5),
        r.written.len() + b.len() + c.len(),
    )
    .await;
    let c_ids = ids(&c);
    assert!(
        got.iter().all(|rec| !c_ids.contains(&rec.header("id"))),
        "an event of the new timeline was published"
    );
    // The operator reconciles, deletes the file, and the relay follows the new primary.
    std::fs::remove_file(&state).unwrap();
    let mut relay = Relay::streaming(&r.db.name, &r.cfg).await;
    let got = kafka::consume(
        vec![r.db.topic("order")],
        Duration::from_secs(60),
        r.written.len() + b.len() + c.len(),
    )
    .await;
    assert!(
        c_ids
            .iter()
            .all(|id| got.iter().any(|rec| rec.header("id") == *id)),
        "the new primary's events after the state file was deleted"
    );
    relay.terminate(Duration::from_secs(30));
}
