//! The progress rule under random interleavings of begin / record / commit / keepalive / ack /
//! Kafka commit / failed delivery / skip progress / checkpoints, checked against a model of what
//! Kafka holds: in every mode (at-least-once with and without checkpoints, Kafka transactions,
//! exactly-once with its checkpoint cap and idle checkpoints).

use proptest::prelude::*;

use super::*;
use crate::skip::SkipStatus;

const LIMITS: Limits = Limits {
    records: 1_000,
    bytes: 1 << 30,
};

/// Every record of the model carries this many bytes.
const BYTES: u64 = 10;

/// `relay.checkpoint_bytes` in the model: three records exactly (as [`BY_BYTES`], so that `<`
/// and `<=` differ).
const VOLUME: u64 = 3 * BYTES;

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
    /// The skip after the start met the checkpoint's change (verified).
    SkipVerified,
    /// The skip is over (after it was verified).
    SkipDone,
    /// The loop's tick: an idle checkpoint-only Kafka transaction if the rule says one is due
    /// (exactly-once), committed at once.
    IdleTick,
    /// Without transactions: the checkpoint of the acknowledged prefix, if the rule allows one.
    AckCheckpoint,
    /// A record outside any transaction (a non-transactional message's dead-letter record).
    Alone,
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
        1 => Just(Op::SkipVerified),
        1 => Just(Op::SkipDone),
        1 => Just(Op::IdleTick),
        1 => Just(Op::AckCheckpoint),
        1 => Just(Op::Alone),
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
    /// Records handed to the open Kafka transaction.
    ktxn_records: u64,
    /// The covered LSN of the checkpoint in the transaction whose commit runs.
    committing_checkpoint: Option<Lsn>,
    /// The highest covered LSN of a committed checkpoint (or of the verified start).
    checkpoint_cover: Lsn,
    /// Without transactions: the last checkpoint written.
    last_written: Option<Lsn>,
    /// Payload bytes acknowledged since the last checkpoint written.
    acked_unwritten: u64,
    /// The highest LSN the stream reached (commit ends, keepalives).
    received: u64,
}

/// How the relay runs: Kafka transactions or not; checkpoints (and exactly-once) or not.
#[derive(Debug, Clone, Copy)]
struct Mode {
    transactional: bool,
    checkpoints: bool,
    exactly_once: bool,
    /// Small enough that the runs reach them (records in one mode, bytes in another).
    limits: Limits,
}

const AT_LEAST_ONCE: Mode = Mode {
    transactional: false,
    checkpoints: false,
    exactly_once: false,
    limits: Limits {
        records: 6,
        bytes: 1 << 30,
    },
};

/// Limits the runs reach by bytes: 5 records exactly (a limit between two records' bytes would
/// not tell `<` from `<=`, as a cargo-mutants run showed).
const BY_BYTES: Limits = Limits {
    records: LIMITS.records,
    bytes: 5 * BYTES,
};

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

fn run(ops: &[Op], mode: Mode) -> Result<(), TestCaseError> {
    let transactional = mode.transactional;
    let start = Lsn(1_000);
    let mut p = Progress::new(start, mode.limits, transactional);
    // The checkpoint found at the start covers the slot's start: the skip has nothing to skip
    // but must still be verified and over before anything is confirmed.
    let mut skip = if mode.checkpoints {
        p = p.with_checkpoints(mode.exactly_once);
        SkipStatus {
            verified: false,
            done: false,
            covered: start,
        }
    } else {
        SkipStatus {
            verified: true,
            done: true,
            covered: Lsn::ZERO,
        }
    };
    let mut m = Model {
        lsn: start.0,
        received: start.0,
        checkpoint_cover: start,
        ..Default::default()
    };
    let mut released = false;
    let mut last_confirmed = start;
    let mut confirmed_at_failure = None;
    for op in ops {
        match op {
            Op::Begin if !m.open => {
                m.lsn += 100;
                p.begin(Lsn(m.lsn), m.lsn as i64).unwrap();
                m.txns.push((Lsn(m.lsn), None));
                m.open = true;
            }
            Op::Record if m.open => record(&mut p, &mut m),
            Op::Commit if m.open => {
                let (commit, end) = m.txns.last_mut().unwrap();
                let e = Lsn(commit.0 + 10);
                p.commit(*commit, e).unwrap();
                *end = Some(e);
                m.lsn = e.0;
                m.received = e.0;
                m.open = false;
            }
            Op::Alone if !m.open => {
                m.lsn += 1;
                let lsn = Lsn(m.lsn);
                p.begin_alone(lsn, m.lsn as i64).unwrap();
                m.txns.push((lsn, None));
                record(&mut p, &mut m);
                p.end_alone(lsn).unwrap();
                m.txns.last_mut().unwrap().1 = Some(lsn);
                m.received = m.lsn;
            }
            Op::Keepalive if !m.open => {
                m.lsn += 1;
                p.keepalive(Lsn(m.lsn));
                m.received = m.lsn;
            }
            Op::Ack(n) => {
                if let Some(r) = m.recs.iter_mut().filter(|r| !r.acked).nth(*n) {
                    p.ack(r.tx, BYTES).unwrap();
                    m.acked_unwritten += BYTES;
                    r.acked = true;
                    r.committed = !transactional;
                }
            }
            Op::KafkaCommitStart if transactional && !m.failed && m.committing.is_none() => {
                let h = kafka_checkpoint(&p, skip, &m, mode)?;
                // The commit flushes the open transaction's records first.
                for r in m.recs.iter_mut().filter(|r| !r.acked && r.ktxn == m.ktxn) {
                    p.ack(r.tx, BYTES).unwrap();
                    m.acked_unwritten += BYTES;
                    r.acked = true;
                }
                if let Some(h) = h {
                    prop_assert!(p.checkpoint_position() >= h, "the flush acknowledged {h}");
                }
                p.kafka_commit_started();
                m.committing = Some(m.ktxn);
                m.committing_checkpoint = h;
                m.ktxn += 1;
                m.ktxn_records = 0;
            }
            Op::KafkaCommitSettle if !m.failed && m.committing.is_some() => {
                let k = m.committing.take();
                p.kafka_commit_settled();
                for r in m.recs.iter_mut().filter(|r| Some(r.ktxn) == k) {
                    r.committed = true;
                }
                if let Some(c) = m.committing_checkpoint.take() {
                    p.checkpoint_committed(c);
                    m.checkpoint_cover = m.checkpoint_cover.max(c);
                }
            }
            Op::KafkaCommit if !m.failed && m.committing.is_none() => {
                kafka_commit(&mut p, skip, &mut m, mode)?;
            }
            Op::IdleTick if !m.failed => {
                if !p.idle_checkpoint_due(skip) {
                    continue;
                }
                prop_assert!(mode.exactly_once && skip.verified);
                prop_assert!(
                    m.committing.is_none(),
                    "an idle checkpoint while a commit runs"
                );
                prop_assert!(
                    m.recs.iter().filter(|r| r.ktxn == m.ktxn).count() == 0,
                    "an idle checkpoint in a transaction that holds records"
                );
                let before = p.checkpoint_position();
                prop_assert!(before > m.checkpoint_cover, "due without progress");
                kafka_commit(&mut p, skip, &mut m, mode)?;
                prop_assert!(
                    m.checkpoint_cover >= before,
                    "the idle checkpoint covers the stream"
                );
            }
            Op::AckCheckpoint => {
                let Some(c) = p.checkpoint_to_write(skip, CheckpointAt::Acknowledged) else {
                    continue;
                };
                prop_assert!(skip.verified, "a checkpoint before the skip was verified");
                prop_assert!(
                    !transactional,
                    "an acknowledged checkpoint outside a commit"
                );
                prop_assert!(
                    m.last_written.is_none_or(|l| c > l),
                    "checkpoints move forward"
                );
                prop_assert!(
                    c <= m.bound(false),
                    "checkpoint {c} past what Kafka acknowledged ({})",
                    m.bound(false)
                );
                p.checkpoint_written(c);
                m.last_written = Some(c);
                m.acked_unwritten = 0;
            }
            Op::SkipVerified => skip.verified = true,
            Op::SkipDone if skip.verified => skip.done = true,
            Op::Fail => {
                p.fail();
                m.failed = true;
                confirmed_at_failure.get_or_insert(p.confirmable());
            }
            _ => continue,
        }
        // What the loop does after every event: release the skip, confirm.
        if let Some(covered) = p.release_skip(skip) {
            prop_assert!(!released && skip.done, "released twice or early");
            prop_assert_eq!(covered, skip.covered);
            released = true;
        }
        if let Some(c) = p.take_confirmation() {
            prop_assert!(c > last_confirmed, "confirmations only move forward");
            last_confirmed = c;
        }
        let c = p.confirmable();
        prop_assert_eq!(
            p.confirmed(),
            c.max(last_confirmed),
            "took what is confirmable"
        );
        prop_assert_eq!(p.confirmed(), last_confirmed);
        check_exact(&p, &m, skip, mode)?;
        let bound = m.bound(transactional);
        prop_assert!(
            c <= bound,
            "confirmable {c} past what Kafka durably holds ({bound}) after {op:?}"
        );
        // Before the skip is over nothing is confirmed, except, in exactly-once mode, what a
        // checkpoint committed on this connection covers: an idle checkpoint may be written
        // once the skip is verified (the stream met the checkpoint's change), and it covers
        // only what Kafka holds.
        if mode.checkpoints && !mode.exactly_once && !released {
            prop_assert!(c <= start, "confirmable {c} before the skip was over");
        }
        if mode.exactly_once {
            prop_assert!(
                c <= m.checkpoint_cover,
                "confirmable {c} past the last committed checkpoint ({})",
                m.checkpoint_cover
            );
        }
        if !skip.verified {
            prop_assert_eq!(
                p.checkpoint_to_write(skip, CheckpointAt::Acknowledged),
                None
            );
            prop_assert_eq!(p.checkpoint_to_write(skip, CheckpointAt::KafkaCommit), None);
        }
        prop_assert_eq!(
            p.kafka_transaction_full(3),
            transactional && m.ktxn_records >= 3
        );
        if let Some(at) = confirmed_at_failure {
            prop_assert!(c <= at, "moved after a failed delivery");
        }
    }
    // Liveness: once everything is acknowledged and committed, the last committed transaction
    // is confirmable (unless a delivery failed); in exactly-once mode once the skip is over and
    // a checkpoint ends the last Kafka transaction.
    if !m.failed && !m.open {
        for r in m.recs.iter_mut().filter(|r| !r.acked) {
            p.ack(r.tx, BYTES).unwrap();
            r.acked = true;
        }
        if m.committing.is_some() {
            p.kafka_commit_settled();
            if let Some(c) = m.committing_checkpoint.take() {
                p.checkpoint_committed(c);
            }
        }
        skip.verified = true;
        skip.done = true;
        p.release_skip(skip);
        m.committing = None;
        if transactional {
            kafka_commit(&mut p, skip, &mut m, mode)?;
        } else {
            p.kafka_committed();
        }
        if let Some((_, Some(end))) = m.txns.last() {
            prop_assert!(p.confirmable() >= *end, "{} < {end}", p.confirmable());
        }
        if mode.exactly_once && p.idle_checkpoint_due(skip) {
            kafka_commit(&mut p, skip, &mut m, mode)?;
        }
        prop_assert!(
            !p.idle_checkpoint_due(skip),
            "still due after an idle checkpoint"
        );
        prop_assert_eq!(p.confirmable(), Lsn(m.received), "everything confirmable");
        p.take_confirmation();
        prop_assert_eq!(p.confirmed(), Lsn(m.received));
    }
    Ok(())
}

/// What the rule reports and decides, exactly as the model says it must (safety is checked
/// above; these also fail a rule that is safe by doing nothing).
fn check_exact(p: &Progress, m: &Model, skip: SkipStatus, mode: Mode) -> Result<(), TestCaseError> {
    let transactional = mode.transactional;
    prop_assert_eq!(p.received(), Lsn(m.received));
    // A checkpoint is due by volume once VOLUME bytes were acknowledged since the last one
    // written, only where checkpoints follow acknowledgements; never with a bound of 0.
    prop_assert_eq!(
        p.checkpoint_volume_due(VOLUME),
        mode.checkpoints && !transactional && m.acked_unwritten >= VOLUME
    );
    prop_assert!(
        !p.checkpoint_volume_due(0),
        "due with relay.checkpoint_bytes = 0"
    );
    prop_assert_eq!(p.kafka_committing(), m.committing.is_some());
    prop_assert_eq!(
        p.kafka_commit_pending(),
        transactional && m.ktxn_records > 0
    );
    prop_assert_eq!(
        p.kafka_transaction_full(3),
        transactional && m.ktxn_records >= 3
    );
    prop_assert_eq!(
        p.checkpoint_to_write(skip, CheckpointAt::KafkaCommit)
            .is_some(),
        transactional && mode.checkpoints && skip.verified
    );
    let position = p.checkpoint_position();
    let last_written = m.last_written.unwrap_or(Lsn(1_000));
    prop_assert_eq!(
        p.checkpoint_to_write(skip, CheckpointAt::Acknowledged),
        (mode.checkpoints && skip.verified && !transactional && position > last_written)
            .then_some(position)
    );
    if m.failed {
        return Ok(());
    }
    prop_assert_eq!(
        p.idle_checkpoint_due(skip),
        mode.exactly_once
            && skip.verified
            && m.ktxn_records == 0
            && m.committing.is_none()
            && position > m.checkpoint_cover
    );
    let unacked = m.recs.iter().filter(|r| !r.acked).count() as u64;
    prop_assert_eq!(p.outstanding_records(), unacked);
    prop_assert_eq!(
        p.can_read(),
        unacked < mode.limits.records && unacked * BYTES < mode.limits.bytes
    );
    // The transactions waiting: open, or with a record Kafka has not acknowledged; the oldest
    // of them is the oldest pending one.
    let waiting = |i: usize| m.txns[i].1.is_none() || m.recs.iter().any(|r| r.txn == i && !r.acked);
    let first = (0..m.txns.len()).find(|i| waiting(*i));
    // Between the waiting ones and every one from the first waiting on (which of the others
    // are folded depends on the order of acknowledgements).
    let pending = p.pending_txns();
    let waiting_count = (0..m.txns.len()).filter(|i| waiting(*i)).count();
    let from_first = first.map_or(0, |f| m.txns.len() - f);
    prop_assert!(
        waiting_count <= pending && pending <= from_first,
        "pending_txns {pending}: waiting {waiting_count}, from the first {from_first}"
    );
    prop_assert_eq!(
        p.oldest_pending_commit_time(),
        first.map(|f| m.txns[f].0.0 as i64)
    );
    Ok(())
}

/// One record of the model's last transaction, handed to Kafka.
fn record(p: &mut Progress, m: &mut Model) {
    let tx = p.record().unwrap();
    p.handed(BYTES);
    m.ktxn_records += 1;
    m.recs.push(Rec {
        tx,
        txn: m.txns.len() - 1,
        acked: false,
        committed: false,
        ktxn: m.ktxn,
    });
}

/// With transactions: the checkpoint the rule puts into the open Kafka transaction before its
/// commit, checked: it covers no open source transaction, and none before the skip is verified.
fn kafka_checkpoint(
    p: &Progress,
    skip: SkipStatus,
    m: &Model,
    mode: Mode,
) -> Result<Option<Lsn>, TestCaseError> {
    let h = p.checkpoint_to_write(skip, CheckpointAt::KafkaCommit);
    prop_assert_eq!(h.is_some(), mode.checkpoints && skip.verified);
    if let (Some(h), Some((commit, None))) = (h, m.txns.last()) {
        prop_assert!(h < *commit, "covers the open transaction {commit}: {h}");
    }
    // Without checkpoints the handed position is still never past an open transaction.
    let handed = p.checkpoint_position_handed();
    if let Some((commit, None)) = m.txns.last() {
        prop_assert!(
            handed < *commit,
            "covers the open transaction {commit}: {handed}"
        );
    }
    Ok(h)
}

/// A Kafka commit that waits for its answer: every record acknowledged, the checkpoint (if
/// any) committed with it.
fn kafka_commit(
    p: &mut Progress,
    skip: SkipStatus,
    m: &mut Model,
    mode: Mode,
) -> Result<(), TestCaseError> {
    // The checkpoint ending the transaction is written before its acks: it covers every closed
    // source transaction, never an open one, and exactly what the acks then make the
    // acknowledged prefix.
    let h = if mode.transactional {
        kafka_checkpoint(p, skip, m, mode)?
    } else {
        None
    };
    for r in m.recs.iter_mut().filter(|r| !r.acked) {
        p.ack(r.tx, BYTES).unwrap();
        m.acked_unwritten += BYTES;
        r.acked = true;
    }
    if let Some(h) = h {
        prop_assert_eq!(p.checkpoint_position(), h);
    }
    p.kafka_committed();
    for r in &mut m.recs {
        r.committed = true;
    }
    if let Some(c) = h {
        p.checkpoint_committed(c);
        m.checkpoint_cover = m.checkpoint_cover.max(c);
    }
    m.ktxn += 1;
    m.ktxn_records = 0;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_confirms_what_kafka_does_not_hold(ops in prop::collection::vec(op(), 0..120)) {
        run(&ops, AT_LEAST_ONCE)?;
    }

    #[test]
    fn with_kafka_transactions_never_confirms_an_uncommitted_record(
        ops in prop::collection::vec(op(), 0..120)
    ) {
        run(&ops, Mode { transactional: true, limits: BY_BYTES, ..AT_LEAST_ONCE })?;
    }

    #[test]
    fn at_least_once_checkpoints_follow_the_acknowledgements_after_a_verified_skip(
        ops in prop::collection::vec(op(), 0..120)
    ) {
        run(&ops, Mode { checkpoints: true, limits: BY_BYTES, ..AT_LEAST_ONCE })?;
    }

    #[test]
    fn exactly_once_confirms_only_what_a_committed_checkpoint_covers(
        ops in prop::collection::vec(op(), 0..120)
    ) {
        run(&ops, Mode { transactional: true, checkpoints: true, exactly_once: true, limits: LIMITS })?;
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
