//! What "streaming" means before the tests' writers start (issue 40, the red CI of 750b8b1,
//! `sources::network`: 80 events of source `cut` committed before its slot existed counted as
//! lost). A logical slot being created is listed as active (its creator holds it) while it
//! waits for the cluster's running transactions, with no `confirmed_flush_lsn` yet; an event
//! committed then is before the slot's consistent point, so it is in no stream, and no relay's
//! to send. `TestDb::slot_streaming_pid` answers only once the slot is complete.

use std::time::Duration;

use tokio_postgres::NoTls;

use crate::support::{TestDb, eventually, kafka, relay::Relay, writer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_while_the_slot_is_created_is_in_no_stream() {
    let db = TestDb::new("slotcreation").await;
    // A transaction with an xid, held open: creating a logical slot waits for it.
    let (blocker, conn) = tokio_postgres::connect(&db.conninfo(), NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    blocker
        .batch_execute("BEGIN; SELECT pg_current_xact_id();")
        .await
        .unwrap();
    let cfg = db.relay_config(&db.outbox_section());
    let mut relay = Relay::start("sources_creation", &cfg);
    eventually(
        "the slot to be created",
        Duration::from_secs(60),
        || async { db.slot_active_pid().await },
    )
    .await;
    assert_eq!(
        db.slot_streaming_pid().await,
        None,
        "listed active while it is created"
    );
    let before = writer::insert_event(&db.client, "order", "early", 0)
        .await
        .unwrap();
    blocker.batch_execute("COMMIT").await.unwrap();
    eventually(
        "the slot to be complete",
        Duration::from_secs(60),
        || async { db.slot_streaming_pid().await },
    )
    .await;
    let after = writer::insert_event(&db.client, "order", "late", 0)
        .await
        .unwrap();
    let got = kafka::consume(vec![db.topic("order")], Duration::from_secs(20), 2).await;
    let ids: Vec<&str> = got.iter().map(|r| r.header("id")).collect();
    assert_eq!(
        ids,
        vec![after.id.as_str()],
        "only the event after the slot"
    );
    crate::support::check::note(&format!(
        "slot creation: an event committed while the slot was listed active but not complete \
         ({}) is in no stream; the one after it arrived",
        before.id
    ));
    relay.terminate(Duration::from_secs(30));
    db.cleanup().await;
}
