//! The confirmed position: it advances on an idle database, and never passes what Kafka holds,
//! even when Kafka is down for longer than `wal_sender_timeout`.

use std::{process::Command, time::Duration};

use relay_core::Lsn;

use crate::support::{TestDb, check, connect, kafka, relay::Relay, repo_root, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_outbox_with_writes_to_other_tables_keeps_confirming() {
    let db = TestDb::new("idle").await;
    let mut relay = Relay::streaming(&db.name, &db.relay_config(&db.outbox_section())).await;
    let start = db.confirmed_flush().await.unwrap();

    // 500 transactions on a table outside the publication: PostgreSQL 15 sends nothing for them.
    let c = connect(&db.conninfo()).await;
    for i in 0..500 {
        c.execute(
            "INSERT INTO business(note) VALUES ($1)",
            &[&format!("n{i}")],
        )
        .await
        .unwrap();
    }
    let end = db.current_wal_lsn().await;
    let confirmed = db.wait_confirmed(end, Duration::from_secs(30)).await;
    // Confirmed passed the end of this test's WAL; the slot also releases WAL (restart_lsn
    // moves past where it started), so retained WAL stays bounded. Other tests share the
    // cluster, so "now minus confirmed" is not a stable measure here; these two are.
    let released =
        crate::support::eventually("restart_lsn to move", Duration::from_secs(45), || async {
            let r: String = c
                .query_one(
                    "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                    &[&db.name],
                )
                .await
                .unwrap()
                .get(0);
            let r: Lsn = r.parse().unwrap();
            (r > start).then_some(r)
        })
        .await;
    check::note(&format!(
        "idle_other_tables: {} bytes of WAL in 500 unpublished transactions; slot confirmed \
         {start} -> {confirmed} (end of that WAL {end}); restart_lsn -> {released}",
        end.0 - start.0
    ));
    assert!(end.0 - start.0 > 50_000, "the workload must write WAL");
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}

/// Resident set size of a process, from /proc.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// A broker of its own, so stopping it does not disturb other tests.
struct OwnKafka {
    port: u16,
}

impl OwnKafka {
    fn script(&self, name: &str, args: &[&str]) {
        let status = Command::new(repo_root().join("infra/kafka").join(name))
            .args(args)
            .env("KAFKA_PORT", self.port.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "infra/kafka/{name} failed");
    }
    fn start(&self) {
        self.script("start.sh", &[]);
    }
    fn stop(&self) {
        self.script("stop.sh", &[]);
    }
    fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnKafka {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("infra/kafka/stop.sh"))
            .arg("--destroy")
            .env("KAFKA_PORT", self.port.to_string())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_longer_than_wal_sender_timeout_confirms_nothing_unacked_then_resumes_in_order()
{
    let kafka_node = OwnKafka { port: 26492 };
    kafka_node.start();
    let db = TestDb::new("kdown").await;
    let cfg = db
        .relay_config(&format!(
            "{}\n[relay]\nmax_in_flight_records = 1000\n",
            db.outbox_section()
        ))
        .replace(&crate::support::kafka_brokers(), &kafka_node.brokers());
    let mut relay = Relay::streaming(&db.name, &cfg).await;

    let topics = vec![db.topic("order")];
    let conninfo = db.conninfo();
    let mut written = writer::run_writers(&conninfo, 2, 10, 5).await.written;
    let n = written.len();
    let t = topics.clone();
    let b = kafka_node.brokers();
    tokio::task::spawn_blocking(move || {
        kafka::consume_until_from(&b, &t, Duration::from_secs(60), |r| r.len() >= n)
    })
    .await
    .unwrap();
    let before = db
        .wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;

    // Kafka goes away for longer than wal_sender_timeout (10 s on the test cluster).
    kafka_node.stop();
    let rss_before = rss_kib(relay.pid());
    let mut during = writer::run_writers(&conninfo, 2, 25, 5).await.written;
    // ~60 MB of outbox payloads while Kafka is down: the relay must not buffer them.
    let c = connect(&conninfo).await;
    writer::bulk_insert(&c, "bulk-", 30_000, 2_000).await;
    during.extend(writer::written_rows(&c, "bulk-").await);
    assert!(!during.is_empty());
    let mut max_confirmed_during = Lsn::ZERO;
    let mut rss_max = rss_before;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        max_confirmed_during = max_confirmed_during.max(db.confirmed_flush().await.unwrap());
        rss_max = rss_max.max(rss_kib(relay.pid()));
    }
    check::note(&format!(
        "kafka_down_memory: relay RSS {} MiB before the outage, at most {} MiB during it, with \
         {} events (~60 MB of payload) written meanwhile and max_in_flight_records = 1000",
        rss_before / 1024,
        rss_max / 1024,
        during.len()
    ));
    assert!(
        rss_max < rss_before + 40 * 1024,
        "relay memory grew from {rss_before} KiB to {rss_max} KiB while Kafka was down"
    );
    assert!(
        relay.is_running(),
        "the relay must wait for Kafka, not die:\n{}",
        relay.log_text()
    );
    assert!(
        db.slot_active_pid().await.is_some(),
        "the replication connection must survive wal_sender_timeout while Kafka is down"
    );

    kafka_node.start();
    written.extend(during.iter().cloned());
    let b = kafka_node.brokers();
    let n = written.len();
    let got = tokio::task::spawn_blocking(move || {
        kafka::consume_until_from(&b, &topics, Duration::from_secs(120), |r| r.len() >= n)
    })
    .await
    .unwrap();
    let f = check::check("kafka_down_then_up", |t| db.topic(t), &written, &got);
    f.assert_nothing_lost_or_reordered("");

    // Nothing written during the outage may have been confirmed during the outage.
    let during_ids: std::collections::HashSet<&str> =
        during.iter().map(|w| w.id.as_str()).collect();
    let first_outage_commit = got
        .iter()
        .filter(|r| during_ids.contains(r.header("id")))
        .map(|r| r.header("outbox-relay.commit-lsn").parse::<Lsn>().unwrap())
        .min()
        .unwrap();
    check::note(&format!(
        "kafka_down_then_up: confirmed {before} before the outage, at most {max_confirmed_during} \
         during it (15 s > wal_sender_timeout), first commit written during it {first_outage_commit}"
    ));
    assert!(
        max_confirmed_during <= first_outage_commit,
        "confirmed {max_confirmed_during} while Kafka was down, past the first unacked commit {first_outage_commit}"
    );
    db.wait_confirmed(db.current_wal_lsn().await, Duration::from_secs(30))
        .await;
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
