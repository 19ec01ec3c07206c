//! SIGTERM ends the relay within `relay.shutdown_timeout_ms` from every wait on a server: a
//! PostgreSQL that accepts the connection and never answers, a Kafka that takes no records
//! while the producer's queue is full, and a PostgreSQL that stops answering mid-stream.

use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use crate::support::{TestDb, broker, check, connect, eventually, relay::Relay, writer};

/// A TCP server that accepts every connection and never sends a byte.
async fn black_hole(port: u16) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    })
}

/// SIGTERM, then the time until the process exited (panics after `limit`).
fn stop_within(relay: &mut Relay, limit: Duration) -> Duration {
    let t = Instant::now();
    relay.signal("-TERM");
    let status = relay.wait(limit).unwrap_or_else(|| {
        panic!(
            "still running {limit:?} after SIGTERM:\n{}",
            relay.log_text()
        )
    });
    assert!(status.success(), "{status:?}\n{}", relay.log_text());
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_relay_whose_postgres_never_answers() {
    let hole = black_hole(25459).await;
    let cfg = "[postgres]\nhost = \"127.0.0.1\"\nport = 25459\nconnect_timeout_ms = 120000\n\
               [relay]\nshutdown_timeout_ms = 5000\n[http]\nlisten = \"127.0.0.1:0\"\n";
    let mut relay = Relay::start("t_stop_blackhole", cfg);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let took = stop_within(&mut relay, Duration::from_secs(8));
    check::note(&format!(
        "stop_postgres_never_answers: exited {} ms after SIGTERM",
        took.as_millis()
    ));
    hole.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_relay_waiting_on_a_full_producer_queue_and_on_a_silent_postgres() {
    let (_broker, kafka) = broker::behind_proxy(26792, 26892).await;
    let db = TestDb::new("stopq").await;
    let pg = crate::support::proxy::Proxy::start(0, db.port).await;
    // The producer's queue holds 5 records; Kafka never times them out (message_timeout_ms 0).
    let cfg = db
        .relay_config(&format!(
            "{}\n[relay]\nshutdown_timeout_ms = 5000\n\n[kafka.properties]\n\
             \"queue.buffering.max.messages\" = \"5\"\n",
            db.outbox_section()
        ))
        .replace(
            &format!("brokers = \"{}\"", crate::support::kafka_brokers()),
            "brokers = \"127.0.0.1:26892\"",
        )
        .replace(
            &format!("port = {}", db.port),
            &format!("port = {}", pg.port),
        );
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    let c = connect(&db.conninfo()).await;
    writer::insert_event(&c, "order", "k", 0).await.unwrap();
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;

    // 1. Kafka takes nothing: the relay waits on the full queue.
    kafka.freeze();
    for _ in 0..50 {
        writer::insert_event(&c, "order", "k", 0).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let took = stop_within(&mut relay, Duration::from_secs(12));
    check::note(&format!(
        "stop_full_producer_queue: exited {} ms after SIGTERM (shutdown_timeout_ms 5000)",
        took.as_millis()
    ));
    kafka.thaw();

    // 2. PostgreSQL stops answering mid-stream (a silent partition).
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    pg.freeze();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let took = stop_within(&mut relay, Duration::from_secs(12));
    check::note(&format!(
        "stop_silent_postgres: exited {} ms after SIGTERM",
        took.as_millis()
    ));
    pg.thaw();
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_relay_whose_preflight_waits_for_a_lock() {
    let db = TestDb::new("stoplock").await;
    // Another session holds the outbox table: the relay's CREATE PUBLICATION ... FOR TABLE
    // outbox waits for the lock, for as long as that session keeps it.
    let holder = connect(&db.conninfo()).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;")
        .await
        .unwrap();
    let cfg = db.relay_config(&format!(
        "{}\n[relay]\nshutdown_timeout_ms = 5000\n[http]\nlisten = \"127.0.0.1:0\"\n",
        db.outbox_section()
    ));
    let mut relay = Relay::start(&db.name, &cfg);
    // The slot monitor reads the outbox table's size too (ACCESS SHARE): it must give up on the
    // lock after its lock_timeout and go on, not wait with the preflight (a migration's lock
    // froze slot-lag alerting before: CI saw two sessions waiting here).
    relay
        .wait_log(
            outbox_relay::telemetry::events::OUTBOX_STATS_FAILED,
            Duration::from_secs(15),
        )
        .await;
    assert!(
        relay.log_text().contains("lock timeout"),
        "the monitor's reading failed on the lock:\n{}",
        relay.log_text()
    );
    // Once the preflight got as far as the lock, it is the only session waiting for it.
    let waiting: Vec<String> = eventually(
        "the relay's preflight to wait for the lock",
        Duration::from_secs(15),
        || async {
            let q: Vec<String> = db
                .client
                .query(
                    "SELECT query FROM pg_stat_activity \
                      WHERE datname = $1 AND wait_event_type = 'Lock'",
                    &[&db.name],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            q.iter().any(|q| q.contains("PUBLICATION")).then_some(q)
        },
    )
    .await;
    assert!(
        waiting.len() == 1 && waiting[0].contains("PUBLICATION"),
        "the relay's preflight, and only it, waits for the lock: {waiting:?}"
    );
    let took = stop_within(&mut relay, Duration::from_secs(8));
    check::note(&format!(
        "stop_preflight_waiting_for_a_lock: exited {} ms after SIGTERM",
        took.as_millis()
    ));
    holder.batch_execute("ROLLBACK").await.unwrap();
    db.cleanup().await;
}
