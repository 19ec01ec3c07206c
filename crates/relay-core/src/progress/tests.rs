//! The progress rule under random interleavings of begin / record / commit / keepalive / ack /
//! Kafka commit / failed delivery, checked against a model of what Kafka holds.

use proptest::prelude::*;

use super::*;

const LIMITS: Limits = Limits {
    records: 1_000,
    bytes: 1 << 30,
};

#[derive(Debug, Clone)]
enum Op {
    Begin,
    Record,
    Commit,
    Keepalive,
    /// Acknowledge the n-th outstanding record (any order: Kafka answers per partition).
    Ack(usize),
    /// Every record delivered, then the Kafka transaction committed.
    KafkaCommit,
    /// Every record of the open Kafka transaction delivered, and its commit sent; records
    /// handed from now on go to the next one (the commit runs meanwhile).
    KafkaCommitStart,
    /// The commit sent by `KafkaCommitStart` succeeded.
    KafkaCommitSettle,
    Fail,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Begin),
        5 => Just(Op::Record),
        3 => Just(Op::Commit),
        1 => Just(Op::Keepalive),
        5 => (0usize..8).prop_map(Op::Ack),
        1 => Just(Op::KafkaCommit),
        1 => Just(Op::KafkaCommitStart),
        1 => Just(Op::KafkaCommitSettle),
        1 => prop::bool::weighted(0.1).prop_map(|f| if f { Op::Fail } else { Op::Keepalive }),
    ]
}

/// What the model knows of one record.
#[derive(Debug, Clone, Copy)]
struct Rec {
    tx: TxId,
    txn: usize,
    acked: bool,
    /// In a committed Kafka transaction (always true without transactions once acked).
    committed: bool,
    /// The Kafka transaction it was handed to (with transactions).
    ktxn: usize,
}

#[derive(Debug, Default)]
struct Model {
    /// (commit_lsn, end_lsn once committed)
    txns: Vec<(Lsn, Option<Lsn>)>,
    recs: Vec<Rec>,
    lsn: u64,
    open: bool,
    failed: bool,
    /// The open Kafka transaction.
    ktxn: usize,
    /// The Kafka transaction whose commit runs.
    committing: Option<usize>,
}

impl Model {
    /// The highest LSN that is safe to confirm: below the commit LSN of the first transaction
    /// that is open or has a record Kafka does not durably hold.
    fn bound(&self, transactional: bool) -> Lsn {
        let unsafe_txn = self.txns.iter().enumerate().find(|(i, (_, end))| {
            end.is_none()
                || self
                    .recs
                    .iter()
                    .any(|r| r.txn == *i && !(r.acked && (!transactional || r.committed)))
        });
        unsafe_txn.map_or(Lsn(u64::MAX), |(_, (commit, _))| *commit)
    }
}

fn run(ops: &[Op], transactional: bool) -> Result<(), TestCaseError> {
    let start = Lsn(1_000);
    let mut p = Progress::new(start, LIMITS, transactional);
    let mut m = Model {
        lsn: start.0,
        ..Default::default()
    };
    let mut last_confirmed = start;
    let mut confirmed_at_failure = None;
    for op in ops {
        match op {
            Op::Begin if !m.open => {
                m.lsn += 100;
                p.begin(Lsn(m.lsn), 0).unwrap();
                m.txns.push((Lsn(m.lsn), None));
                m.open = true;
            }
            Op::Record if m.open => {
                let tx = p.record().unwrap();
                p.handed(10);
                m.recs.push(Rec {
                    tx,
                    txn: m.txns.len() - 1,
                    acked: false,
                    committed: false,
                    ktxn: m.ktxn,
                });
            }
            Op::Commit if m.open => {
                let (commit, end) = m.txns.last_mut().unwrap();
                let e = Lsn(commit.0 + 10);
                p.commit(*commit, e).unwrap();
                *end = Some(e);
                m.lsn = e.0;
                m.open = false;
            }
            Op::Keepalive if !m.open => {
                m.lsn += 1;
                p.keepalive(Lsn(m.lsn));
            }
            Op::Ack(n) => {
                if let Some(r) = m.recs.iter_mut().filter(|r| !r.acked).nth(*n) {
                    p.ack(r.tx, 10).unwrap();
                    r.acked = true;
                    r.committed = !transactional;
                }
            }
            Op::KafkaCommitStart if transactional && !m.failed && m.committing.is_none() => {
                let h = p.checkpoint_position_handed();
                if let Some((commit, None)) = m.txns.last() {
                    prop_assert!(h < *commit, "covers the open transaction {commit}: {h}");
                }
                // The commit flushes the open transaction's records first.
                for r in m.recs.iter_mut().filter(|r| !r.acked && r.ktxn == m.ktxn) {
                    p.ack(r.tx, 10).unwrap();
                    r.acked = true;
                }
                prop_assert!(p.checkpoint_position() >= h, "the flush acknowledged {h}");
                p.kafka_commit_started();
                m.committing = Some(m.ktxn);
                m.ktxn += 1;
            }
            Op::KafkaCommitSettle if !m.failed && m.committing.is_some() => {
                let k = m.committing.take();
                p.kafka_commit_settled();
                for r in m.recs.iter_mut().filter(|r| Some(r.ktxn) == k) {
                    r.committed = true;
                }
            }
            Op::KafkaCommit if !m.failed && m.committing.is_none() => {
                // The checkpoint ending the transaction is written before its acks: it covers
                // every closed source transaction, never an open one, and exactly what the acks
                // then make the acknowledged prefix.
                let handed = transactional.then(|| p.checkpoint_position_handed());
                if let (Some(h), Some((commit, None))) = (handed, m.txns.last()) {
                    prop_assert!(h < *commit, "covers the open transaction {commit}: {h}");
                }
                for r in m.recs.iter_mut().filter(|r| !r.acked) {
                    p.ack(r.tx, 10).unwrap();
                    r.acked = true;
                }
                if let Some(h) = handed {
                    prop_assert_eq!(p.checkpoint_position(), h);
                }
                p.kafka_committed();
                for r in &mut m.recs {
                    r.committed = true;
                }
                m.ktxn += 1;
            }
            Op::Fail => {
                p.fail();
                m.failed = true;
                confirmed_at_failure.get_or_insert(p.confirmable());
            }
            _ => continue,
        }
        if let Some(c) = p.take_confirmation() {
            prop_assert!(c > last_confirmed, "confirmations only move forward");
            last_confirmed = c;
        }
        let c = p.confirmable();
        prop_assert!(
            c <= m.bound(transactional),
            "confirmable {c} past what Kafka durably holds ({}) after {op:?}",
            m.bound(transactional)
        );
        if let Some(at) = confirmed_at_failure {
            prop_assert!(c <= at, "moved after a failed delivery");
        }
        prop_assert!(p.can_read() == (p.outstanding_records() < LIMITS.records));
    }
    // Liveness: once everything is acknowledged and committed, the last committed transaction
    // is confirmable (unless a delivery failed).
    if !m.failed && !m.open {
        for r in m.recs.iter_mut().filter(|r| !r.acked) {
            p.ack(r.tx, 10).unwrap();
        }
        if m.committing.is_some() {
            p.kafka_commit_settled();
        }
        p.kafka_committed();
        if let Some((_, Some(end))) = m.txns.last() {
            prop_assert!(p.confirmable() >= *end);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_confirms_what_kafka_does_not_hold(ops in prop::collection::vec(op(), 0..120)) {
        run(&ops, false)?;
    }

    #[test]
    fn with_kafka_transactions_never_confirms_an_uncommitted_record(
        ops in prop::collection::vec(op(), 0..120)
    ) {
        run(&ops, true)?;
    }
}

#[test]
fn the_in_flight_limits_stop_reading_and_acks_resume_it() {
    let mut p = Progress::new(
        Lsn(0),
        Limits {
            records: 2,
            bytes: 100,
        },
        false,
    );
    p.begin(Lsn(10), 0).unwrap();
    let a = p.record().unwrap();
    p.handed(10);
    assert!(p.can_read());
    let b = p.record().unwrap();
    p.handed(10);
    assert!(!p.can_read(), "two records in flight: the limit");
    p.ack(a, 10).unwrap();
    assert!(p.can_read());
    let c = p.record().unwrap();
    p.handed(200);
    assert!(!p.can_read(), "bytes over the limit");
    p.ack(b, 10).unwrap();
    p.ack(c, 200).unwrap();
    assert!(p.can_read());
    assert_eq!(p.acked(), 3);
}
