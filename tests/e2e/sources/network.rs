//! Network faults on some sources of one process, then a SIGTERM restart of the process in the
//! middle of the writes (issue 40: the many-sources test's faults widened to the chaos test's).
//! `cut` reaches its database through a proxy that drops every connection and refuses new ones
//! for a while; `hole` through one that black-holes them (connections open, not a byte either
//! way, not even a close) for longer than the server's `wal_sender_timeout`; `s2` and `s3`
//! connect directly. Writers commit on every database throughout (directly, not through the
//! proxies). The direct sources keep confirming while the others are cut off; afterwards every
//! committed event of every source is in Kafka, in per-key order: at-least-once in the plain
//! pass (duplicates from the window not yet confirmed are allowed, nothing lost), exactly once
//! in the fenced pass (no duplicate either).

use std::time::Duration;

use super::{all_streaming, as_the_pass_runs, top_level};
use crate::support::{
    TestDb, check, eventually, kafka, pg_port, proxy::Proxy, relay::Relay, stored, writer,
};

/// A source whose connections go to `port` (a proxy, or the server itself).
fn source_at(name: &str, db: &TestDb, port: u16) -> String {
    format!(
        "[source.{name}]\npostgres = {{ database = \"{db}\", slot = \"{db}\", publication = \
         \"{db}\", port = {port} }}\n[[source.{name}.outbox]]\ntable = \"public.outbox\"\n\
         topic = \"{db}.{{aggregatetype}}\"\n\n",
        db = db.name
    )
}

/// Random writers on every database at once (one each, `txns` transactions of 1-3 aggregates);
/// what each committed, in the order of `conninfos`.
async fn write_all(conninfos: Vec<String>, round: usize, txns: usize) -> Vec<writer::WriteStats> {
    let handles: Vec<_> = conninfos
        .into_iter()
        .enumerate()
        .map(|(i, conninfo)| {
            tokio::spawn(async move {
                writer::random_writer(conninfo, round, txns, 5, (round * 10 + i) as u64).await
            })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_cut_off_or_black_holed_recover_alone_and_a_sigterm_restart_loses_nothing() {
    let dbs = vec![
        TestDb::new("net_cut").await,
        TestDb::new("net_hole").await,
        TestDb::new("net_s2").await,
        TestDb::new("net_s3").await,
    ];
    let cut = Proxy::start(0, pg_port()).await;
    let hole = Proxy::start(0, pg_port()).await;
    let names = ["cut", "hole", "s2", "s3"];
    let ports = [cut.port, hole.port, pg_port(), pg_port()];
    let mut cfg = top_level(&dbs[0], pg_port()).replace(
        "\n\n[http]",
        "\n\n[relay]\nrestart_backoff_max_ms = 2000\n\n[http]",
    );
    for ((name, db), port) in names.iter().zip(&dbs).zip(ports) {
        cfg.push_str(&source_at(name, db, port));
    }
    let cfg = as_the_pass_runs(cfg, &dbs[0]);
    let mut relay = Relay::start("sources_network", &cfg);
    let all: Vec<&TestDb> = dbs.iter().collect();
    all_streaming(&all, Duration::from_secs(90)).await;
    let hole_pid = dbs[1].slot_active_pid().await;

    // Round 1: writers on every database while `cut` is cut off and `hole` black-holed.
    let conninfos: Vec<String> = dbs.iter().map(TestDb::conninfo).collect();
    let round1 = tokio::spawn(write_all(conninfos.clone(), 1, 60));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cut.cut();
    hole.freeze();
    // The direct sources confirm what they are given meanwhile: the faults stay with their
    // sources.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for db in &dbs[2..] {
        let head = db.current_wal_lsn().await;
        db.wait_confirmed(head, Duration::from_secs(60)).await;
    }
    eventually(
        "source cut to restart on the cut",
        Duration::from_secs(60),
        || async {
            relay
                .log_text()
                .lines()
                .any(|l| l.contains("source=\"cut\"") && l.contains("pipeline_restart"))
                .then_some(())
        },
    )
    .await;
    // Past wal_sender_timeout (10 s on the test cluster): the server ends hole's walsender,
    // whose close the black hole holds back too.
    tokio::time::sleep(Duration::from_secs(12)).await;
    cut.heal();
    hole.thaw();
    let round1 = round1.await.unwrap();
    eventually(
        "source hole to stream on a new connection",
        Duration::from_secs(90),
        || async {
            dbs[1]
                .slot_active_pid()
                .await
                .filter(|pid| Some(*pid) != hole_pid)
        },
    )
    .await;

    // Round 2, with a SIGTERM restart of the whole process in the middle.
    let round2 = tokio::spawn(write_all(conninfos, 2, 60));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let exit = relay.terminate(Duration::from_secs(30));
    assert_eq!(exit.code(), Some(0), "{}", relay.log_text());
    // A cut or silent connection is a restart (a warning), not an error: no ERROR line. The
    // producer a restart drops with requests in flight used to log librdkafka's "Fatal error:
    // … Purged in flight" as one.
    let errors: Vec<String> = relay
        .log_text()
        .lines()
        .filter(|l| l.contains(" ERROR "))
        .map(String::from)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let mut relay = Relay::start("sources_network", &cfg);
    let round2 = round2.await.unwrap();
    for db in &dbs {
        let head = db.current_wal_lsn().await;
        db.wait_confirmed(head, Duration::from_secs(120)).await;
    }

    let mut totals = check::Figures::default();
    for (i, db) in dbs.iter().enumerate() {
        let mut written = round1[i].written.clone();
        written.extend(round2[i].written.iter().cloned());
        let got = kafka::consume(
            vec![db.topic("order")],
            Duration::from_secs(90),
            written.len(),
        )
        .await;
        let f = check::check(
            &format!("sources_network_{}", names[i]),
            |t| db.topic(t),
            &written,
            &got,
        );
        // On a failure: where each lost event lies, and what the broker stored (a gap in a
        // producer's sequence places a loss at a partition's head), to be read against the
        // relay logs this test keeps.
        let context = if f.lost + f.order_violations > 0 {
            format!(
                "source {}\n{}{}",
                names[i],
                check::explain_lost(&written, &got),
                stored::sequence_report(&db.topic("order"))
            )
        } else {
            format!("source {}", names[i])
        };
        if crate::support::fenced_pass() {
            f.assert_exactly_once(&context);
        } else {
            f.assert_nothing_lost_or_reordered(&context);
        }
        check::assert_absent(&round1[i].discarded, &got);
        totals.written += f.written;
        totals.delivered += f.delivered;
    }
    check::record("sources_network", &totals);
    let exit = relay.terminate(Duration::from_secs(30));
    assert_eq!(exit.code(), Some(0), "{}", relay.log_text());
    for db in dbs {
        db.cleanup().await;
    }
}
