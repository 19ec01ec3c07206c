//! `apply redrive` run twice at the same time (docs/inbox.md, "The one-shot commands beside
//! running instances"): each dead-lettered record is applied once, not once per re-drive.

use std::time::Duration;

use crate::support::{
    TestDb,
    applier::{config, count, effect_schema, setup},
    check,
    relay::Relay,
};

const RECORDS: i64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redrives_at_the_same_time_apply_each_dead_letter_once() {
    let db = TestDb::new("ap_redrive2").await;
    // 50 ms per handler: the two re-drives overlap for the whole run.
    effect_schema(&db, 0.05).await;
    let cfg = config(&db, "topics = [\"t\"]", "redrive", "");
    setup(&db, &cfg);
    db.client
        .execute(
            "INSERT INTO outbox_apply_dead_letter (consumer, topic, partition, \"offset\", \
             event_id, event_type, value, headers, \"timestamp\", error) \
             SELECT 'edges', 't', 0, o, 'e' || o, 'Add', convert_to('{\"n\": 1}', 'UTF8'), '{}', \
             now(), 'refused once' FROM generate_series(0, $1::bigint - 1) o",
            &[&RECORDS],
        )
        .await
        .unwrap();
    let mut runs: Vec<Relay> = (0..2)
        .map(|i| {
            Relay::start_with(
                &format!("{}-redrive-{i}", db.name),
                &cfg,
                &["apply", "redrive"],
                &[],
            )
        })
        .collect();
    for r in &mut runs {
        let status = r.wait(Duration::from_secs(60)).expect("redrive finished");
        assert!(status.success(), "redrive: {}", r.log_text());
    }
    let (effects, distinct, left) = (
        count(&db, "SELECT count(*) FROM effects").await,
        count(&db, "SELECT count(DISTINCT event_id) FROM effects").await,
        count(&db, "SELECT count(*) FROM outbox_apply_dead_letter").await,
    );
    check::note(&format!(
        "applier_redrive: two re-drives at once over {RECORDS} dead letters: {effects} effects \
         ({distinct} events), {left} left"
    ));
    assert_eq!((effects, distinct, left), (RECORDS, RECORDS, 0));
    db.cleanup().await;
}
