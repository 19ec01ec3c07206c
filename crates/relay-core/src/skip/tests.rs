//! The skip alone, and the exactly-once rule end to end in the pure core: a relay made of
//! [`Progress`] (exactly-once mode), [`Skip`] and checkpoints, crashed at random points, with
//! PostgreSQL rewinding the slot to any position it confirmed earlier. Kafka's log must then
//! hold every routed change exactly once, in order; a changed history must never lose a change
//! silently.

use proptest::prelude::*;

use super::*;
use crate::{
    checkpoint::VERSION,
    progress::{Limits, Progress},
};

const TABLE: &str = "public.outbox";

#[derive(Debug, Clone)]
struct Ch {
    routed: bool,
    fp: String,
}

#[derive(Debug, Clone)]
struct Tx {
    commit: Lsn,
    end: Lsn,
    changes: Vec<Ch>,
}

/// A history of transactions; `tag` makes its fingerprints its own, `offset` shifts its LSNs.
fn history(shape: &[Vec<bool>], tag: &str, first: usize, offset: u64) -> Vec<Tx> {
    shape
        .iter()
        .enumerate()
        .map(|(k, routed)| {
            let k = k + first;
            let commit = Lsn(100 * (k as u64 + 1) + offset);
            Tx {
                commit,
                end: Lsn(commit.0 + 10),
                changes: routed
                    .iter()
                    .enumerate()
                    .map(|(i, &routed)| Ch {
                        routed,
                        fp: format!("id:{tag}-{k}-{i}"),
                    })
                    .collect(),
            }
        })
        .collect()
}

fn checkpoint(covered: Lsn, last: Option<ChangeRef>) -> Checkpoint {
    Checkpoint {
        version: VERSION,
        system_id: "1".into(),
        database: "db".into(),
        slot: "s".into(),
        timeline: 1,
        covered_lsn: covered,
        last,
        tables: vec![TABLE.into()],
        standby: None,
    }
}

/// What survives a crash: Kafka's committed log, its newest checkpoint, and every LSN the slot
/// was ever confirmed at (PostgreSQL may come back at any of them).
#[derive(Debug, Default)]
struct World {
    kafka: Vec<(Lsn, u64, String)>,
    latest: Option<Checkpoint>,
    confirmed: Vec<Lsn>,
}

enum End {
    Crashed,
    Finished,
}

/// One relay session from `start`. `decide` answers 0..10 at every step: 0-1 commit the Kafka
/// transaction now (a split, or a commit between source transactions), 9 crash (if `may_crash`).
fn session(
    hist: &[Tx],
    start: Lsn,
    world: &mut World,
    decide: &mut impl FnMut() -> u8,
    may_crash: bool,
) -> Result<End, HistoryChanged> {
    let limits = Limits {
        records: u64::MAX,
        bytes: u64::MAX,
    };
    let mut progress = Progress::new(start, limits, true).with_checkpoints(true);
    let mut skip = Skip::new(world.latest.as_ref(), start);
    let mut lifted = false;
    let mut open: Vec<(Lsn, u64, String)> = Vec::new();
    let mut last = world.latest.as_ref().and_then(|c| c.last.clone());
    let mut step = |progress: &mut Progress,
                    skip: &Skip,
                    open: &mut Vec<(Lsn, u64, String)>,
                    last: &Option<ChangeRef>,
                    world: &mut World,
                    lifted: &mut bool|
     -> bool {
        if skip.is_done() && !*lifted {
            progress.skip_done(skip.covered());
            *lifted = true;
        }
        let d = decide();
        if d == 9 && may_crash {
            return true;
        }
        if d < 2 && skip.is_done() {
            let covered = progress.checkpoint_position();
            world.kafka.append(open);
            world.latest = Some(checkpoint(covered, last.clone()));
            progress.kafka_committed();
            progress.checkpoint_committed(covered);
        }
        if let Some(c) = progress.take_confirmation() {
            let covered = world.latest.as_ref().map_or(start, |k| k.covered_lsn);
            assert!(
                c <= covered.max(start),
                "confirmed {c} beyond checkpoint {covered}"
            );
            world.confirmed.push(c);
        }
        false
    };
    for tx in hist.iter().filter(|t| t.commit >= start) {
        skip.begin(tx.commit)?;
        progress.begin(tx.commit, 0).unwrap();
        for (i, ch) in tx.changes.iter().enumerate() {
            let routed = ch.routed.then_some(TABLE);
            let verdict = skip.change(i as u64, routed, || ch.fp.clone())?;
            if verdict == Verdict::Publish && ch.routed {
                let id = progress.record().unwrap();
                progress.handed(1);
                progress.ack(id, 1).unwrap();
                open.push((tx.commit, i as u64, ch.fp.clone()));
                last = Some(ChangeRef {
                    commit_lsn: tx.commit,
                    index: i as u64,
                    fingerprint: ch.fp.clone(),
                });
            }
            if step(&mut progress, &skip, &mut open, &last, world, &mut lifted) {
                return Ok(End::Crashed);
            }
        }
        skip.commit()?;
        progress.commit(tx.commit, tx.end).unwrap();
        if step(&mut progress, &skip, &mut open, &last, world, &mut lifted) {
            return Ok(End::Crashed);
        }
    }
    // The stream goes on: a heartbeat transaction far ahead, then a keepalive and a last
    // commit.
    let heartbeat = Lsn(1_000_000);
    skip.begin(heartbeat)?;
    progress.begin(heartbeat, 0).unwrap();
    skip.commit()?;
    progress.commit(heartbeat, Lsn(heartbeat.0 + 10)).unwrap();
    let idle = Lsn(heartbeat.0 + 20);
    skip.keepalive(idle);
    progress.keepalive(idle);
    if skip.is_done() {
        if !lifted {
            progress.skip_done(skip.covered());
        }
        let covered = progress.checkpoint_position();
        world.kafka.append(&mut open);
        world.latest = Some(checkpoint(covered, last));
        progress.kafka_committed();
        progress.checkpoint_committed(covered);
        if let Some(c) = progress.take_confirmation() {
            world.confirmed.push(c);
        }
    }
    Ok(End::Finished)
}

fn shape() -> impl Strategy<Value = Vec<Vec<bool>>> {
    prop::collection::vec(
        prop::collection::vec(prop::bool::weighted(0.7), 0..6),
        1..25,
    )
}

fn decider(seq: Vec<u8>) -> impl FnMut() -> u8 {
    let mut i = 0;
    move || {
        i += 1;
        seq[i % seq.len()] % 10
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn each_change_is_in_kafka_exactly_once_through_crashes_and_rewinds(
        shape in shape(),
        decisions in prop::collection::vec(any::<u8>(), 1..64),
        rewinds in prop::collection::vec(any::<prop::sample::Index>(), 8),
    ) {
        let hist = history(&shape, "a", 0, 0);
        let mut world = World { confirmed: vec![Lsn(1)], ..World::default() };
        let mut decide = decider(decisions);
        for rewind in rewinds.iter().map(Some).chain([None]) {
            // PostgreSQL comes back at any position it confirmed so far.
            let start = world.confirmed[rewind.map_or(world.confirmed.len() - 1, |r| r.index(world.confirmed.len()))];
            let end = session(&hist, start, &mut world, &mut decide, rewind.is_some()).unwrap();
            if matches!(end, End::Finished) {
                break;
            }
        }
        let want: Vec<(Lsn, u64, String)> = hist
            .iter()
            .flat_map(|t| t.changes.iter().enumerate().filter(|(_, c)| c.routed).map(|(i, c)| (t.commit, i as u64, c.fp.clone())))
            .collect();
        prop_assert_eq!(&world.kafka, &want);
    }

    #[test]
    fn a_restored_history_is_refused_or_loses_nothing(
        shape in shape(),
        new_shape in shape(),
        diverge in any::<prop::sample::Index>(),
        offset in prop_oneof![Just(0u64), Just(5), Just(50)],
        decisions in prop::collection::vec(any::<u8>(), 1..64),
        snapshot in any::<prop::sample::Index>(),
    ) {
        // History A runs to its end; the database is then restored to a snapshot whose slot
        // stood at an earlier confirmed position, and history B continues from `diverge` with
        // other events at overlapping LSNs.
        let a = history(&shape, "a", 0, 0);
        let mut world = World { confirmed: vec![Lsn(1)], ..World::default() };
        let mut decide = decider(decisions);
        session(&a, Lsn(1), &mut world, &mut decide, false).unwrap();
        let m = diverge.index(a.len());
        let mut b: Vec<Tx> = a[..m].to_vec();
        b.extend(history(&new_shape, "b", m, offset));
        let before: Vec<Lsn> = world.confirmed.iter().copied().filter(|c| m == 0 || *c <= a[m - 1].end).collect();
        let start = before[snapshot.index(before.len())];
        let kafka_before = world.kafka.len();
        let confirmed_before = world.confirmed.len();
        let result = session(&b, start, &mut world, &mut decide, false);
        let held: std::collections::HashSet<String> = world.kafka.iter().map(|k| k.2.clone()).collect();
        let missing: Vec<&Tx> = b.iter().filter(|t| t.commit >= start && t.changes.iter().any(|c| c.routed && !held.contains(&c.fp))).collect();
        match result {
            Ok(_) => prop_assert!(missing.is_empty(), "silently skipped: {missing:?}"),
            Err(_) => {
                // Refused: nothing new was published, nothing confirmed past what B lacks.
                prop_assert_eq!(world.kafka.len(), kafka_before);
                for c in &world.confirmed[confirmed_before..] {
                    prop_assert!(missing.iter().all(|t| *c <= t.commit), "confirmed {c} past a missing change");
                }
            }
        }
    }
}

fn last(commit: u64, index: u64, fp: &str) -> Option<ChangeRef> {
    Some(ChangeRef {
        commit_lsn: Lsn(commit),
        index,
        fingerprint: fp.into(),
    })
}

#[test]
fn a_normal_restart_skips_nothing() {
    let c = checkpoint(Lsn(210), last(200, 1, "id:x"));
    let mut s = Skip::new(Some(&c), Lsn(210));
    assert!(s.is_done());
    s.begin(Lsn(300)).unwrap();
    assert_eq!(
        s.change(0, Some(TABLE), || unreachable!()),
        Ok(Verdict::Publish)
    );
    assert!(Skip::new(None, Lsn(5)).is_done());
}

#[test]
fn a_rewound_slot_skips_up_to_the_checkpoints_change_and_checks_it() {
    let c = checkpoint(Lsn(150), last(200, 1, "id:x"));
    let mut s = Skip::new(Some(&c), Lsn(100));
    s.begin(Lsn(120)).unwrap();
    assert_eq!(
        s.change(0, Some(TABLE), || "id:w".into()),
        Ok(Verdict::Skip)
    );
    s.commit().unwrap();
    s.begin(Lsn(200)).unwrap();
    assert_eq!(
        s.change(0, Some(TABLE), || unreachable!()),
        Ok(Verdict::Skip)
    );
    assert_eq!(
        s.change(1, Some(TABLE), || "id:x".into()),
        Ok(Verdict::Skip)
    );
    // The rest of a transaction split across Kafka transactions is published.
    assert_eq!(
        s.change(2, Some(TABLE), || unreachable!()),
        Ok(Verdict::Publish)
    );
    s.commit().unwrap();
    s.begin(Lsn(300)).unwrap();
    assert!(s.is_done());
}

#[test]
fn another_change_where_the_checkpoint_names_one_is_a_changed_history() {
    let c = checkpoint(Lsn(210), last(200, 1, "id:x"));
    let mut s = Skip::new(Some(&c), Lsn(100));
    s.begin(Lsn(200)).unwrap();
    s.change(0, None, || unreachable!()).unwrap();
    let e = s.change(1, Some(TABLE), || "id:other".into()).unwrap_err();
    assert!(e.to_string().contains("id:other"), "{e}");
    assert!(
        e.to_string()
            .contains("change #1 of the transaction committed at 0/C8"),
        "{e}"
    );

    // The transaction ends too early.
    let mut s = Skip::new(Some(&c), Lsn(100));
    s.begin(Lsn(200)).unwrap();
    s.change(0, None, || unreachable!()).unwrap();
    assert!(
        s.commit()
            .unwrap_err()
            .found
            .contains("ended after 1 changes")
    );

    // The stream goes past it.
    let mut s = Skip::new(Some(&c), Lsn(100));
    assert!(s.begin(Lsn(205)).unwrap_err().found.contains("0/CD"));
}

#[test]
fn an_outbox_row_below_the_covered_lsn_after_the_last_change_is_refused() {
    let c = checkpoint(Lsn(400), last(200, 0, "id:x"));
    let mut s = Skip::new(Some(&c), Lsn(250));
    s.begin(Lsn(300)).unwrap();
    // Other tables and newly configured outbox tables: skipped.
    assert_eq!(s.change(0, None, || unreachable!()), Ok(Verdict::Skip));
    assert_eq!(
        s.change(1, Some("public.new_outbox"), || unreachable!()),
        Ok(Verdict::Skip)
    );
    assert!(s.change(2, Some(TABLE), || unreachable!()).is_err());
}

#[test]
fn a_keepalive_past_the_covered_lsn_ends_the_skip() {
    let c = checkpoint(Lsn(400), None);
    let mut s = Skip::new(Some(&c), Lsn(250));
    s.keepalive(Lsn(399));
    assert!(!s.is_done());
    s.keepalive(Lsn(400));
    assert!(s.is_done());
}
