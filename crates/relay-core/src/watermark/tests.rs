//! The acknowledgement tracker: confirmation order, memory behind a stuck record, framing.

use proptest::prelude::*;

use super::*;

#[test]
fn a_transaction_is_confirmable_only_when_all_its_records_are_acked() {
    let mut t = AckTracker::new(Lsn(100));
    let a = t.begin(Lsn(200), 0).unwrap();
    t.add_record().unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(200), Lsn(210)).unwrap();
    assert_eq!(t.watermark(), Lsn(100));
    t.ack(a).unwrap();
    assert_eq!(t.watermark(), Lsn(100));
    t.ack(a).unwrap();
    assert_eq!(t.watermark(), Lsn(210));
    assert_eq!(t.pending_txns(), 0);
}

#[test]
fn transactions_without_records_behind_a_stuck_one_take_no_memory() {
    let mut t = AckTracker::new(Lsn(0));
    let stuck = t.begin(Lsn(10), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    // 100k transactions of other tables, and a few with records, behind the stuck head.
    let mut with_records = Vec::new();
    for i in 0..100_000u64 {
        let lsn = Lsn(100 + i * 10);
        let id = t.begin(lsn, 0).unwrap();
        if i % 10_000 == 0 {
            t.add_record().unwrap();
            with_records.push(id);
        }
        t.commit(lsn, Lsn(lsn.0 + 1)).unwrap();
    }
    assert!(
        t.entries() <= 1 + 2 * with_records.len() + 1,
        "{}",
        t.entries()
    );
    assert_eq!(t.pending_txns(), 1 + with_records.len());
    assert_eq!(t.watermark(), Lsn(0));
    for id in with_records {
        t.ack(id).unwrap();
    }
    assert_eq!(
        t.watermark(),
        Lsn(0),
        "the stuck head still holds everything"
    );
    t.ack(stuck).unwrap();
    assert_eq!(t.watermark(), Lsn(100 + 99_999 * 10 + 1));
    assert_eq!(t.entries(), 0);
}

/// Exactly: behind one stuck record, any number of empty transactions and keepalives take
/// one mark (a cargo-mutants run found the looser bound above blind to an unfolded first
/// empty transaction and to keepalives that each pushed a mark).
#[test]
fn behind_a_stuck_record_empty_transactions_and_keepalives_fold_into_one_mark() {
    let mut t = AckTracker::new(Lsn(0));
    let stuck = t.begin(Lsn(10), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    assert_eq!(t.entries(), 1);
    for i in 0..1_000u64 {
        let lsn = Lsn(100 + i * 10);
        t.begin(lsn, 0).unwrap();
        t.commit(lsn, Lsn(lsn.0 + 1)).unwrap();
        assert_eq!(t.entries(), 2, "after empty transaction {i}");
    }
    for i in 0..1_000u64 {
        t.keepalive(Lsn(20_000 + i));
        assert_eq!(t.entries(), 2, "after keepalive {i}");
    }
    t.ack(stuck).unwrap();
    assert_eq!(t.watermark(), Lsn(20_999));
    assert_eq!(t.entries(), 0);
}

/// An acknowledgement for an id the tracker never gave out (one past its newest entry, or
/// of a transaction already confirmed) is a framing error, not a panic or a silent ack.
#[test]
fn an_ack_of_an_unknown_transaction_is_refused() {
    let mut t = AckTracker::new(Lsn(0));
    let a = t.begin(Lsn(10), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    assert_eq!(t.ack(TxId(a.0 + 1)), Err(FramingError::UnexpectedAck));
    t.ack(a).unwrap();
    assert_eq!(
        t.ack(a),
        Err(FramingError::UnexpectedAck),
        "already confirmed"
    );
    assert_eq!(t.watermark(), Lsn(11));
}

#[test]
fn out_of_order_acks_wait_for_the_head() {
    let mut t = AckTracker::new(Lsn(0));
    let a = t.begin(Lsn(10), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    let b = t.begin(Lsn(20), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(20), Lsn(21)).unwrap();
    t.ack(b).unwrap(); // another partition answers first
    assert_eq!(t.watermark(), Lsn(0));
    t.ack(a).unwrap();
    assert_eq!(t.watermark(), Lsn(21));
}

#[test]
fn keepalives_advance_when_idle_wait_behind_unacked_data_and_are_ignored_mid_transaction() {
    let mut t = AckTracker::new(Lsn(50));
    t.keepalive(Lsn(60));
    assert_eq!(
        t.watermark(),
        Lsn(60),
        "idle: keepalive confirmable at once"
    );
    t.keepalive(Lsn(40));
    assert_eq!(
        t.watermark(),
        Lsn(60),
        "catch-up keepalive below the watermark ignored"
    );

    let a = t.begin(Lsn(70), 0).unwrap();
    t.add_record().unwrap();
    t.keepalive(Lsn(1_000)); // inside the transaction: ignored
    t.commit(Lsn(70), Lsn(80)).unwrap();
    t.keepalive(Lsn(90)); // behind an unacked transaction: waits
    assert_eq!(t.watermark(), Lsn(60));
    t.ack(a).unwrap();
    assert_eq!(t.watermark(), Lsn(90));
}

#[test]
fn a_transaction_without_outbox_rows_completes_at_its_turn() {
    let mut t = AckTracker::new(Lsn(0));
    let a = t.begin(Lsn(10), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    t.begin(Lsn(20), 0).unwrap();
    t.commit(Lsn(20), Lsn(21)).unwrap();
    assert_eq!(t.watermark(), Lsn(0));
    t.ack(a).unwrap();
    assert_eq!(t.watermark(), Lsn(21));
}

#[test]
fn a_failure_freezes_progress() {
    let mut t = AckTracker::new(Lsn(0));
    let a = t.begin(Lsn(10), 0).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    t.fail();
    t.ack(a).unwrap();
    t.keepalive(Lsn(50));
    assert_eq!(t.watermark(), Lsn(0));
    assert!(t.is_failed());
}

#[test]
fn framing_violations_are_errors() {
    let mut t = AckTracker::new(Lsn(0));
    assert_eq!(t.add_record(), Err(FramingError::NoOpenTransaction));
    assert_eq!(
        t.commit(Lsn(1), Lsn(2)),
        Err(FramingError::NoOpenTransaction)
    );
    let a = t.begin(Lsn(10), 0).unwrap();
    assert_eq!(
        t.begin(Lsn(20), 0),
        Err(FramingError::NestedBegin { open: Lsn(10) })
    );
    assert_eq!(
        t.commit(Lsn(11), Lsn(12)),
        Err(FramingError::CommitMismatch {
            begin: Lsn(10),
            commit: Lsn(11)
        })
    );
    assert_eq!(t.ack(a), Err(FramingError::UnexpectedAck));
}

#[test]
fn oldest_pending_commit_time_is_the_head_transaction() {
    let mut t = AckTracker::new(Lsn(0));
    assert_eq!(t.oldest_pending_commit_time(), None);
    let a = t.begin(Lsn(10), 111).unwrap();
    t.add_record().unwrap();
    t.commit(Lsn(10), Lsn(11)).unwrap();
    t.begin(Lsn(20), 222).unwrap();
    assert_eq!(t.oldest_pending_commit_time(), Some(111));
    t.ack(a).unwrap();
    assert_eq!(t.oldest_pending_commit_time(), Some(222));
}

/// A step of a generated stream.
#[derive(Debug, Clone)]
enum Step {
    /// A transaction with this many outbox records and a keepalive of this size inside it.
    Txn { records: u8, mid_keepalive: bool },
    /// A keepalive between transactions.
    Keepalive,
    /// Acknowledge the n-th (modulo) outstanding record, if any.
    Ack(u16),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..4, any::<bool>()).prop_map(|(records, mid_keepalive)| Step::Txn { records, mid_keepalive }),
        1 => Just(Step::Keepalive),
        4 => any::<u16>().prop_map(Step::Ack),
    ]
}

proptest! {
    /// Safety: the watermark never passes the commit LSN of a transaction with an
    /// unacknowledged record, never decreases, and liveness: once every record is acked it
    /// reaches the end of the last transaction (or a later keepalive).
    #[test]
    fn watermark_is_the_longest_acked_prefix(steps in proptest::collection::vec(step(), 1..80)) {
        let start = Lsn(1_000);
        let mut t = AckTracker::new(start);
        let mut lsn = 1_000u64;
        // (tx id, commit_lsn, end_lsn, records left) of every transaction, in commit order.
        let mut txns: Vec<(TxId, Lsn, Lsn, u32)> = Vec::new();
        // Outstanding acks as (index into txns).
        let mut pending: Vec<usize> = Vec::new();
        let mut last_keepalive = start;
        let mut previous = t.watermark();
        for s in steps {
            match s {
                Step::Txn { records, mid_keepalive } => {
                    lsn += 10;
                    let commit = Lsn(lsn);
                    let id = t.begin(commit, 0).unwrap();
                    for _ in 0..records {
                        prop_assert_eq!(t.add_record().unwrap(), id);
                        pending.push(txns.len());
                    }
                    if mid_keepalive {
                        t.keepalive(Lsn(u64::MAX / 2)); // must be ignored
                    }
                    lsn += 5;
                    t.commit(commit, Lsn(lsn)).unwrap();
                    txns.push((id, commit, Lsn(lsn), u32::from(records)));
                }
                Step::Keepalive => {
                    lsn += 3;
                    last_keepalive = Lsn(lsn);
                    t.keepalive(Lsn(lsn));
                }
                Step::Ack(n) => {
                    if !pending.is_empty() {
                        let i = pending.swap_remove(usize::from(n) % pending.len());
                        txns[i].3 -= 1;
                        t.ack(txns[i].0).unwrap();
                    }
                }
            }
            let w = t.watermark();
            prop_assert!(w >= previous, "watermark went back from {} to {}", previous, w);
            previous = w;
            for (_, commit, _, left) in &txns {
                if *left > 0 {
                    prop_assert!(w <= *commit, "watermark {} passed unacked commit {}", w, commit);
                }
            }
            prop_assert_eq!(t.outstanding_records(), pending.len() as u64);
        }
        // Ack everything left: the watermark must reach the last position received.
        for i in pending.drain(..) {
            txns[i].3 -= 1;
            t.ack(txns[i].0).unwrap();
        }
        let last_txn_end = txns.last().map_or(start, |x| x.2);
        prop_assert_eq!(t.watermark(), last_txn_end.max(last_keepalive));
        prop_assert_eq!(t.pending_txns(), 0);
    }
}
