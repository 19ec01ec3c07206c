//! The applier's database connection cut (dropped, new ones refused) and then black-holed
//! (open, not a byte either way) while records arrive, then a SIGTERM restart in the middle
//! (issue 40: the applier's faults widened to the chaos test's). Every record is applied once:
//! nothing missing, nothing applied twice.

use std::time::Duration;

use outbox_apply::telemetry::events;

use crate::support::{
    TestDb,
    applier::{config, count, effect_schema, producer, send, setup},
    eventually, kafka,
    proxy::Proxy,
    relay::Relay,
};

/// Records sent, one every 20 ms over about ten seconds, then the rest at once.
const RECORDS: i64 = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applier_applies_every_record_once_through_a_cut_a_black_hole_and_a_sigterm() {
    let db = TestDb::new("ap_network").await;
    effect_schema(&db, 0.0).await;
    let topic = format!("{}.out", db.name);
    kafka::create_topic(&topic, 2).await;
    let cfg = config(&db, &format!("topics = [\"{topic}\"]"), "network", "");
    setup(&db, &cfg);
    let proxy = Proxy::start(0, db.port).await;
    let cfg = cfg.replace(
        &format!("port = {}", db.port),
        &format!("port = {}", proxy.port),
    );
    let name = format!("{}-run", db.name);
    let mut a = Relay::start_with(&name, &cfg, &["apply", "run"], &[]);
    let sending = {
        let topic = topic.clone();
        tokio::spawn(async move {
            let p = producer();
            for i in 0..RECORDS {
                send(&p, &topic, &format!("ev-{i}"), i).await;
                if i < 500 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };
    eventually("the first effects", Duration::from_secs(60), || async {
        (count(&db, "SELECT count(*) FROM effects").await > 0).then_some(())
    })
    .await;
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.freeze();
    tokio::time::sleep(Duration::from_secs(8)).await;
    proxy.thaw();
    sending.await.unwrap();
    // A SIGTERM restart while the backlog of the black hole is being applied.
    assert!(
        a.terminate(Duration::from_secs(60)).success(),
        "{}",
        a.log_text()
    );
    // The outages are told once each, not at every retry of every partition: one warning when
    // the database goes (then a reminder a minute, longer than these), one line when it is
    // back. Retrying every 100-800 ms, the 3 s cut alone used to log five warnings.
    let log = a.log_text();
    let said = |event: &str, level: &str| {
        log.lines()
            .filter(|l| l.contains(event) && l.contains(level))
            .count()
    };
    let (gone, back) = (
        said(events::APPLY_DATABASE_UNREACHABLE, "WARN"),
        said(events::APPLY_DATABASE_REACHABLE, "INFO"),
    );
    assert!(
        back >= 1 && gone <= back + 1,
        "{gone} unreachable warnings for {back} reachable lines:\n{log}"
    );
    let mut a = Relay::start_with(&name, &cfg, &["apply", "run"], &[]);
    eventually("every record applied", Duration::from_secs(120), || async {
        (count(&db, "SELECT count(*) FROM effects").await >= RECORDS).then_some(())
    })
    .await;
    // Anything applied twice would come right behind.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (all, distinct) = (
        count(&db, "SELECT count(*) FROM effects").await,
        count(&db, "SELECT count(DISTINCT event_id) FROM effects").await,
    );
    assert_eq!((all, distinct), (RECORDS, RECORDS), "{}", a.log_text());
    assert!(a.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
