//! The partition task's loop against a model database (no PostgreSQL, no Kafka), on tokio's
//! paused clock: retries, failure policies, COMMIT of unknown outcome, redeliveries.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use tokio::sync::{mpsc, watch};

use super::*;
use outbox_service::http::Readiness;

use crate::postgres::txn::Applied;

/// A model of the consumer's database: what was applied (offsets, in order), dead-lettered and
/// stored, with scripted failures.
#[derive(Default)]
struct Model {
    applied: Vec<i64>,
    dead: Vec<i64>,
    stored: Option<i64>,
    /// Handlers that raise.
    failing: HashSet<i64>,
    /// The next this many transactions roll back for a transient reason.
    transient: usize,
    /// The next this many transactions roll back on a deadlock.
    conflicts: usize,
    /// The number of records of each transaction tried.
    widths: Vec<usize>,
    /// The next transaction commits but the connection breaks during COMMIT.
    unknown_commit: bool,
    transactions: usize,
}

#[derive(Default)]
struct FakeStore(Mutex<Model>);

impl FakeStore {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.0.lock().unwrap()
    }
}

impl Store for FakeStore {
    async fn apply(&self, records: &[Record]) -> Result<Applied, Broke> {
        let mut m = self.model();
        m.transactions += 1;
        m.widths.push(records.len());
        if m.transient > 0 {
            m.transient -= 1;
            return Err(Broke::Transient(
                "the database system is shutting down".into(),
            ));
        }
        if m.conflicts > 0 {
            m.conflicts -= 1;
            return Err(Broke::Conflict("deadlock detected (SQLSTATE 40P01)".into()));
        }
        let mut done = Applied::default();
        let mut now = Vec::new();
        for (i, r) in records.iter().enumerate() {
            if m.stored.is_some_and(|s| r.offset < s) {
                done.behind += 1;
                continue;
            }
            if m.failing.contains(&r.offset) {
                return Err(Broke::Definite {
                    index: i,
                    error: format!("handler raised on {}", r.offset),
                    sqlstate: Some("P0001".into()),
                });
            }
            now.push(r.offset);
        }
        done.applied = now.len() as u64;
        m.applied.extend(now);
        let next = records.last().unwrap().offset + 1;
        m.stored = Some(m.stored.map_or(next, |s| s.max(next)));
        done.next = m.stored.unwrap();
        if std::mem::take(&mut m.unknown_commit) {
            return Err(Broke::CommitUnknown("connection closed".into()));
        }
        Ok(done)
    }

    async fn dead_letter(
        &self,
        r: &Record,
        _: &str,
        _: Option<&str>,
    ) -> Result<(i64, bool), Broke> {
        let mut m = self.model();
        m.dead.push(r.offset);
        m.stored = Some(m.stored.map_or(r.offset + 1, |s| s.max(r.offset + 1)));
        Ok((r.offset + 1, true))
    }

    async fn position(&self, _: &str, _: i32) -> Result<Option<i64>, ()> {
        Ok(self.model().stored)
    }
}

fn config(extra: &str) -> Arc<ApplyConfig> {
    let toml = format!(
        "[kafka]\ngroup_id = \"g\"\ntopics = [\"t\"]\n[apply]\nconsumer = \"c\"\n\
         ignore_types = [\"x\"]\nbatch_records = 3\nretry_backoff_initial_ms = 100\n{extra}"
    );
    Arc::new(ApplyConfig::from_test_toml(&toml).unwrap())
}

fn record(offset: i64) -> Record {
    Record {
        topic: "t".into(),
        partition: 0,
        offset,
        key: Some(b"k".to_vec()),
        value: Some(b"{}".to_vec()),
        headers: Vec::new(),
        timestamp_ms: None,
        event_id: Some(format!("e{offset}")),
        event_type: Some("x".into()),
    }
}

/// Runs a task over `offsets` (then the channel closes) and returns how it ended.
async fn run(
    cfg: Arc<ApplyConfig>,
    store: Arc<FakeStore>,
    offsets: &[i64],
) -> (Exit, Arc<Assignment>) {
    let (tx, rx) = mpsc::channel(64);
    for &o in offsets {
        tx.send(record(o)).await.unwrap();
    }
    drop(tx);
    let (_stop_tx, stop) = watch::channel(false);
    let assignment = Arc::new(Assignment::default());
    let tp = ("t".to_string(), 0);
    assignment.assigned(&tp, None, None);
    let task = PartitionTask {
        tp,
        records: rx,
        cursor: Cursor::default(),
        cfg,
        store,
        assignment: assignment.clone(),
        stop,
    };
    (task.run().await, assignment)
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_retries_the_same_records_after_the_backoff_and_skips_nothing() {
    let store = Arc::new(FakeStore::default());
    store.model().transient = 2;
    let started = tokio::time::Instant::now();
    let (exit, _) = run(config(""), store.clone(), &[0, 1, 2, 3, 4]).await;
    assert!(matches!(exit, Exit::Stopped), "{exit:?}");
    let m = store.model();
    assert_eq!(m.applied, [0, 1, 2, 3, 4]);
    // 100 ms, then 200 ms (doubled), before the first batch went through.
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(m.stored, Some(5));
}

#[tokio::test(start_paused = true)]
async fn a_conflict_is_retried_at_once_with_one_record_then_growing_transactions() {
    let store = Arc::new(FakeStore::default());
    store.model().conflicts = 2;
    let started = tokio::time::Instant::now();
    let cfg = Arc::new(
        ApplyConfig::from_test_toml(
            "[kafka]\ngroup_id = \"g\"\ntopics = [\"t\"]\n[apply]\nconsumer = \"c\"\n\
             ignore_types = [\"x\"]\nbatch_records = 8\n",
        )
        .unwrap(),
    );
    let offsets: Vec<i64> = (0..20).collect();
    let (exit, _) = run(cfg, store.clone(), &offsets).await;
    assert!(matches!(exit, Exit::Stopped), "{exit:?}");
    let m = store.model();
    assert_eq!(m.applied, offsets, "each record once, in order");
    // 8 (deadlock), 1 (deadlock), then 1, 2, 4 and 1 (the first batch's end); 8, 4 (the rest).
    assert_eq!(m.widths, [8, 1, 1, 2, 4, 1, 8, 4]);
    // No 100 ms backoff: two waits of at most 5 and 10 ms.
    assert!(
        started.elapsed() <= Duration::from_millis(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_record_is_dead_lettered_alone_and_its_neighbours_applied_in_order() {
    let store = Arc::new(FakeStore::default());
    store.model().failing.insert(1);
    let cfg = config("on_failure = \"dead-letter\"\n");
    let (exit, assignment) = run(cfg, store.clone(), &[0, 1, 2, 3, 4]).await;
    assert!(matches!(exit, Exit::Stopped), "{exit:?}");
    let m = store.model();
    assert_eq!(
        (m.applied.as_slice(), m.dead.as_slice()),
        (&[0, 2, 3, 4][..], &[1][..])
    );
    assert_eq!(m.stored, Some(5));
    assert_eq!(assignment.lock()[&("t".to_string(), 0)].next, Some(5));
}

#[tokio::test(start_paused = true)]
async fn halt_applies_everything_before_the_failing_record_and_nothing_after() {
    let store = Arc::new(FakeStore::default());
    store.model().failing.insert(3);
    let (exit, assignment) = run(config(""), store.clone(), &[0, 1, 2, 3, 4, 5]).await;
    let Exit::Halted(why) = exit else {
        panic!("not halted: {exit:?}")
    };
    assert!(why.contains("handler raised on 3"), "{why}");
    let m = store.model();
    assert_eq!((m.applied.as_slice(), m.stored), (&[0, 1, 2][..], Some(3)));
    assert!(m.dead.is_empty());
    assert!(assignment.readiness(false).unwrap_err()[0].contains("t[0] halted"));
}

#[tokio::test(start_paused = true)]
async fn a_commit_of_unknown_outcome_is_settled_by_the_stored_position_and_not_applied_again() {
    let store = Arc::new(FakeStore::default());
    store.model().unknown_commit = true;
    let (exit, _) = run(config(""), store.clone(), &[0, 1, 2, 3]).await;
    assert!(matches!(exit, Exit::Stopped), "{exit:?}");
    let m = store.model();
    assert_eq!(m.applied, [0, 1, 2, 3], "each record once");
    assert_eq!(m.transactions, 2, "[0..3) committed, found so, then [3..4)");
}

#[tokio::test(start_paused = true)]
async fn records_delivered_again_below_the_cursor_never_reach_a_transaction() {
    let store = Arc::new(FakeStore::default());
    let (exit, _) = run(config(""), store.clone(), &[0, 1, 2, 1, 2, 3, 7]).await;
    assert!(matches!(exit, Exit::Stopped), "{exit:?}");
    assert_eq!(store.model().applied, [0, 1, 2, 3, 7]);
}
