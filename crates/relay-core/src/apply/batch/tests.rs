use proptest::prelude::*;

use super::*;

/// A model database: records whose handler always fails, and transient failures injected on
/// chosen attempts. Runs a plan to its end with the dead-letter policy (`halt_at_first` =
/// false) or the halt policy, and returns (committed in order, dead-lettered, halted at,
/// transactions run).
fn drive(
    len: usize,
    failing: &[usize],
    transient_attempts: &[usize],
    halt: bool,
) -> (Vec<usize>, Vec<usize>, Option<usize>, usize) {
    drive_with(len, failing, &[], transient_attempts, halt, None)
}

/// [`drive`] where the records of `at_commit` fail only at COMMIT (a deferred constraint: the
/// error names no record); with `width`, the transient failures are conflicts and attempts are
/// limited as the partition task limits them (`contention::Width` of that many records).
fn drive_with(
    len: usize,
    failing: &[usize],
    at_commit: &[usize],
    transient_attempts: &[usize],
    halt: bool,
    width: Option<usize>,
) -> (Vec<usize>, Vec<usize>, Option<usize>, usize) {
    let mut plan = Plan::new(len);
    let mut width = width.map(crate::apply::contention::Width::new);
    let (mut committed, mut dead) = (Vec::new(), Vec::new());
    let mut attempts = 0;
    loop {
        assert!(
            attempts < 10 * (len + 1) + transient_attempts.len() * 2,
            "no progress"
        );
        if let Some(w) = &width {
            plan.limit(w.get());
        }
        match plan.next() {
            Step::Done => return (committed, dead, None, attempts),
            Step::Fail(i) => {
                if halt {
                    return (committed, dead, Some(i), attempts);
                }
                dead.push(i);
                plan.handled();
            }
            Step::Apply(r) => {
                attempts += 1;
                assert!(!r.is_empty() && r.start == plan.done_before());
                if let Some(w) = &width {
                    assert!(r.len() <= w.get(), "{r:?} wider than {}", w.get());
                }
                if transient_attempts.contains(&attempts) {
                    if let Some(w) = &mut width {
                        w.conflicted();
                    }
                    plan.report(Outcome::Transient);
                } else if let Some(i) = r.clone().find(|i| failing.contains(i)) {
                    plan.report(Outcome::Failed(i));
                } else if r.clone().any(|i| at_commit.contains(&i)) {
                    plan.report(failed_at_commit(&r));
                } else {
                    committed.extend(r);
                    plan.report(Outcome::Committed);
                    if let Some(w) = &mut width {
                        w.committed();
                    }
                }
            }
        }
    }
}

#[test]
fn a_clean_batch_is_one_transaction() {
    assert_eq!(
        drive(5, &[], &[], false),
        (vec![0, 1, 2, 3, 4], vec![], None, 1)
    );
}

#[test]
fn a_failure_in_the_middle_commits_its_neighbours_without_it() {
    // [0..5) fails at 2; [0..2) commits; [2..5) fails at 2 (head): dead-letter; [3..5) commits.
    let (committed, dead, halted, attempts) = drive(5, &[2], &[], false);
    assert_eq!(
        (committed, dead, halted, attempts),
        (vec![0, 1, 3, 4], vec![2], None, 4)
    );
}

#[test]
fn halt_commits_everything_before_the_failure_and_nothing_after() {
    let (committed, dead, halted, _) = drive(5, &[2, 4], &[], true);
    assert_eq!((committed, dead, halted), (vec![0, 1], vec![], Some(2)));
}

#[test]
fn after_a_conflict_the_rest_goes_in_growing_transactions() {
    // Attempt 1 (all 20) conflicts: then 1, 2, 4, 8 records, and the last 5.
    let mut plan = Plan::new(20);
    let mut width = crate::apply::contention::Width::new(100);
    let mut attempts = Vec::new();
    let mut conflicted = false;
    loop {
        plan.limit(width.get());
        let Step::Apply(r) = plan.next() else { break };
        attempts.push(r.clone());
        if conflicted {
            plan.report(Outcome::Committed);
            width.committed();
        } else {
            conflicted = true;
            plan.report(Outcome::Transient);
            width.conflicted();
        }
    }
    assert_eq!(attempts, [0..20, 0..1, 1..3, 3..7, 7..15, 15..20]);
}

#[test]
fn an_empty_batch_is_done() {
    assert_eq!(Plan::new(0).next(), Step::Done);
}

proptest! {
    /// Every record is committed or dead-lettered exactly once, in offset order, whatever fails
    /// and whatever transient failures come in between; under halt, everything before the first
    /// failing record is committed and nothing after it.
    #[test]
    fn each_record_once_in_order(
        len in 0usize..40,
        handler_failing in proptest::collection::vec(0usize..40, 0..6),
        at_commit in proptest::collection::vec(0usize..40, 0..3),
        transient in proptest::collection::vec(1usize..30, 0..6),
        halt in any::<bool>(),
        width in proptest::option::of(1usize..50),
    ) {
        let (committed, dead, halted, _) =
            drive_with(len, &handler_failing, &at_commit, &transient, halt, width);
        let failing: Vec<usize> = handler_failing.iter().chain(&at_commit).copied().collect();
        let mut all: Vec<usize> = committed.iter().chain(&dead).copied().collect();
        all.sort_unstable();
        prop_assert!(committed.windows(2).all(|w| w[0] < w[1]), "in order: {committed:?}");
        for d in &dead {
            prop_assert!(failing.contains(d), "only failing records are dead-lettered");
        }
        for c in &committed {
            prop_assert!(!failing.contains(c), "a failing record is never committed");
        }
        let first_failing = (0..len).find(|i| failing.contains(i));
        if halt {
            prop_assert_eq!(halted, first_failing);
            let upto = first_failing.unwrap_or(len);
            prop_assert_eq!(committed, (0..upto).collect::<Vec<_>>());
        } else {
            prop_assert_eq!(all, (0..len).collect::<Vec<_>>(), "each record exactly once");
        }
    }
}
