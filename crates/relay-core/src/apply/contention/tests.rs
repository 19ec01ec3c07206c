use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn deadlocks_and_serialization_failures_are_conflicts_everything_else_is_away() {
    assert_eq!(Cause::of(Some("40P01")), Cause::Conflict);
    assert_eq!(Cause::of(Some("40001")), Cause::Conflict);
    for code in [
        None,
        Some("08006"),
        Some("57P01"),
        Some("53300"),
        Some("55P03"),
    ] {
        assert_eq!(Cause::of(code), Cause::Away, "{code:?}");
    }
}

#[test]
fn the_server_away_backs_off_as_configured() {
    let mut r = Retry::new(100 * MS, 10_000 * MS);
    let waits: Vec<u128> = (0..9)
        .map(|_| r.wait(Cause::Away, 0.5).as_millis())
        .collect();
    assert_eq!(
        waits,
        [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
    );
    r.reset();
    assert_eq!(r.wait(Cause::Away, 0.5), 100 * MS);
}

#[test]
fn a_conflict_is_retried_at_once_and_does_not_count_as_the_server_away() {
    let mut r = Retry::new(100 * MS, 10_000 * MS);
    assert_eq!(r.wait(Cause::Away, 0.0), 100 * MS);
    // The first conflict: within 5 ms, then 10, 20, 40, 50, 50.
    let uppers: Vec<Duration> = (0..6).map(|_| r.wait(Cause::Conflict, 0.999_999)).collect();
    for (w, upper) in uppers.iter().zip([5u32, 10, 20, 40, 50, 50]) {
        assert!(
            *w <= upper * MS && *w + MS >= upper * MS,
            "{w:?} ~ {upper} ms"
        );
    }
    assert_eq!(r.wait(Cause::Conflict, 0.0), Duration::ZERO);
    // The away schedule went on where it was.
    assert_eq!(r.wait(Cause::Away, 0.0), 200 * MS);
}

#[test]
fn the_width_drops_to_one_on_a_conflict_and_doubles_back() {
    let mut w = Width::new(100);
    assert_eq!(w.get(), 100);
    w.conflicted();
    let mut seen = vec![w.get()];
    for _ in 0..8 {
        w.committed();
        seen.push(w.get());
    }
    assert_eq!(seen, [1, 2, 4, 8, 16, 32, 64, 100, 100]);
    assert_eq!(Width::new(0).get(), 1);
}

#[test]
fn turns_start_with_a_conflict_and_end_a_period_after_the_last() {
    let s = Duration::from_secs(1);
    let mut t = Turns::default();
    assert!(!t.on(Duration::ZERO) && !t.turn_needed(1000 * s, 100));
    t.conflict(10 * s);
    assert!(t.on(10 * s) && t.on(309 * s) && !t.on(310 * s));
    assert!(t.turn_needed(20 * s, 2) && !t.turn_needed(20 * s, 1));
    // Another conflict while on: the period runs from it, not doubled.
    t.conflict(100 * s);
    assert!(t.on(399 * s) && !t.on(400 * s));
    assert_eq!(t.period(), TURNS_FIRST);
    // A conflict soon after the end: the next period is twice as long.
    t.conflict(450 * s);
    assert_eq!(t.period(), 2 * TURNS_FIRST);
    assert!(t.on(450 * s + 2 * TURNS_FIRST - s));
    // Long after: back to the first period.
    let late = 450 * s + 2 * TURNS_FIRST + 10 * TURNS_MAX;
    t.conflict(late);
    assert_eq!(t.period(), TURNS_FIRST);
}

proptest! {
    /// Whatever the sequence of failures, a conflict's wait is under the small cap and the
    /// server-away wait within the configured bounds.
    #[test]
    fn waits_stay_within_their_caps(
        initial in 1u32..5_000,
        max in 1u32..60_000,
        steps in prop::collection::vec((any::<bool>(), 0.0f64..1.0, any::<bool>()), 0..200),
    ) {
        let mut r = Retry::new(initial * MS, max * MS);
        for (conflict, jitter, reset) in steps {
            let cause = if conflict { Cause::Conflict } else { Cause::Away };
            let w = r.wait(cause, jitter);
            match cause {
                Cause::Conflict => prop_assert!(w <= CONFLICT_WAIT_CAP),
                Cause::Away => prop_assert!(w <= (max * MS).max(MS) && w >= (initial * MS).min(max * MS)),
            }
            if reset {
                r.reset();
            }
        }
    }

    /// The width is always in 1..=max, is 1 right after a conflict, and is back to max after
    /// at most log2(max) + 1 commits in a row.
    #[test]
    fn the_width_stays_in_bounds_and_recovers(
        max in 1usize..10_000,
        steps in prop::collection::vec(any::<bool>(), 0..100),
    ) {
        let mut w = Width::new(max);
        for conflict in steps {
            if conflict {
                w.conflicted();
                prop_assert_eq!(w.get(), 1);
            } else {
                w.committed();
            }
            prop_assert!((1..=max).contains(&w.get()));
        }
        for _ in 0..=(usize::BITS - max.leading_zeros()) {
            w.committed();
        }
        prop_assert_eq!(w.get(), max);
    }

    /// Turns are on exactly when a conflict happened within the current period before now,
    /// and the period stays within its bounds.
    #[test]
    fn turns_are_on_after_every_conflict_for_at_least_the_first_period(
        gaps in prop::collection::vec(0u32..10_000, 1..30),
        probe in 0u32..20_000,
    ) {
        let s = Duration::from_secs(1);
        let mut t = Turns::default();
        let mut now = Duration::ZERO;
        for g in gaps {
            now += g * s;
            t.conflict(now);
            prop_assert!(t.on(now));
            prop_assert!(t.on(now + TURNS_FIRST - s));
            prop_assert!((TURNS_FIRST..=TURNS_MAX).contains(&t.period()));
        }
        prop_assert!(!t.on(now + TURNS_MAX + probe * s));
    }
}
