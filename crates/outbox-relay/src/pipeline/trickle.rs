//! Whether the stream is a trickle, for the kick when it goes quiet (`kafka.flush_when_quiet`).
//!
//! The rule: the stream is a trickle while its *rate* (replication messages per second, counted
//! over windows of [`WINDOW`] of the loop's clock) stays below [`BUSY_ABOVE`]; once busy, it is
//! a trickle again below [`TRICKLE_BELOW`]. A trickle's records are kicked out at each quiet
//! moment; a busy stream's batch for `linger.ms`.
//!
//! Why a rate and not the burst between two quiet moments (the rule before 2026-12-05): how
//! many events a quiet moment follows depends on how long the loop took to come round (the
//! read-coalescing pause plus the work, plus whatever else the machine did), not only on the
//! stream. At 1k single-row transactions a second the smoothed burst sat at the old threshold,
//! so whether a run kicked, and had a p50 of 3 ms or 10 ms and a p99 at `linger.ms`, was timing
//! (bench/notes.md, 2026-12-05). A rate over 50 ms is the same whichever way the walsender and
//! the loop group the transactions, and one larger burst after a hiccup barely moves it.

use std::time::Duration;

use tokio::time::Instant;

/// The span over which the rate is counted; the decision holds for the window after it.
const WINDOW: Duration = Duration::from_millis(50);

/// Above this many replication messages per second (a single-row transaction is three, and
/// the walsender's pings while it waits for WAL add about one: 10k is 2,500-3,300 transactions
/// a second) a trickle turns busy and batches. Kicking a 10k events/s stream at every quiet
/// moment doubled the relay's CPU for no better p99 (docs/benchmarks.md, 2026-12-01).
const BUSY_ABOVE: f64 = 10_000.0;

/// Below this rate a busy stream is a trickle again (1,500-2,000 single-row transactions a
/// second). The gap to [`BUSY_ABOVE`] keeps a stream near one threshold from flipping every
/// window.
const TRICKLE_BELOW: f64 = 6_000.0;

/// The stream's rate, counted per window, and what it made of the stream.
#[derive(Debug)]
pub(super) struct Trickle {
    since: Option<Instant>,
    messages: u64,
    busy: bool,
}

impl Default for Trickle {
    /// A new stream is a trickle until a window says otherwise: its first records go out at
    /// once.
    fn default() -> Self {
        Self {
            since: None,
            messages: 0,
            busy: false,
        }
    }
}

impl Trickle {
    /// The stream went quiet at `now` after `burst` replication messages: whether it is a
    /// trickle (kick its records out now rather than after `linger.ms`).
    pub(super) fn quiet_after(&mut self, burst: u32, now: Instant) -> bool {
        let Some(since) = self.since else {
            // The first burst came before any window: the rate is counted from here.
            self.since = Some(now);
            return !self.busy;
        };
        self.messages += u64::from(burst);
        let span = now.saturating_duration_since(since);
        if span >= WINDOW {
            let rate = self.messages as f64 / span.as_secs_f64();
            self.busy = if self.busy {
                rate >= TRICKLE_BELOW
            } else {
                rate > BUSY_ABOVE
            };
            (self.since, self.messages) = (Some(now), 0);
        }
        !self.busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `seconds` of a stream of `per_s` single-row transactions, read `per_quiet` at a
    /// time (the loop's quiet moments spaced accordingly); the decisions, one per quiet moment.
    fn feed(
        t: &mut Trickle,
        at: &mut Instant,
        per_s: u32,
        per_quiet: u32,
        seconds: u32,
    ) -> Vec<bool> {
        let gap = Duration::from_secs(1) * per_quiet / per_s;
        (0..seconds * per_s / per_quiet)
            .map(|_| {
                *at += gap;
                t.quiet_after(3 * per_quiet, *at)
            })
            .collect()
    }

    #[test]
    fn a_thousand_transactions_a_second_is_a_trickle_however_the_loop_groups_them() {
        // The old rule's flip: the same stream, read one transaction per quiet moment (a quick
        // loop) or three (a loop slowed by the machine: 9 messages, above the old threshold).
        for per_quiet in [1, 2, 3, 5, 10, 20] {
            let (mut t, mut at) = (Trickle::default(), Instant::now());
            let kicks = feed(&mut t, &mut at, 1_000, per_quiet, 2);
            assert!(kicks.iter().all(|k| *k), "{per_quiet} per quiet moment");
        }
    }

    #[test]
    fn a_burst_after_a_hiccup_in_a_trickle_is_still_a_trickle() {
        let (mut t, mut at) = (Trickle::default(), Instant::now());
        assert!(feed(&mut t, &mut at, 1_000, 1, 1).iter().all(|k| *k));
        // The database stalled 20 ms: 20 transactions arrive at once.
        at += Duration::from_millis(20);
        assert!(t.quiet_after(60, at));
        assert!(feed(&mut t, &mut at, 1_000, 1, 1).iter().all(|k| *k));
    }

    #[test]
    fn a_busy_stream_batches_within_two_windows_and_a_trickle_kicks_again() {
        let (mut t, mut at) = (Trickle::default(), Instant::now());
        feed(&mut t, &mut at, 1_000, 1, 1);
        // 10k single-row transactions a second, ten per quiet moment.
        let busy = feed(&mut t, &mut at, 10_000, 10, 1);
        let until_busy = busy.iter().position(|k| !k).unwrap();
        assert!(
            until_busy <= 2 * 50,
            "{until_busy} quiet moments (1 ms each)"
        );
        assert!(busy[until_busy..].iter().all(|k| !k));
        let trickle = feed(&mut t, &mut at, 1_000, 1, 1);
        let until_trickle = trickle.iter().position(|k| *k).unwrap();
        assert!(
            until_trickle <= 2 * 50,
            "{until_trickle} quiet moments (1 ms each)"
        );
        assert!(trickle[until_trickle..].iter().all(|k| *k));
    }

    #[test]
    fn a_stream_between_the_thresholds_keeps_what_it_was() {
        // 2,500 transactions a second: 7,500 messages, between the two thresholds.
        let (mut t, mut at) = (Trickle::default(), Instant::now());
        assert!(feed(&mut t, &mut at, 2_500, 5, 1).iter().all(|k| *k));
        let (mut t, mut at) = (Trickle::default(), Instant::now());
        feed(&mut t, &mut at, 10_000, 10, 1);
        assert!(feed(&mut t, &mut at, 2_500, 5, 1).iter().all(|k| !k));
    }

    #[test]
    fn a_quiet_moment_after_a_long_idle_is_a_trickle() {
        let (mut t, mut at) = (Trickle::default(), Instant::now());
        feed(&mut t, &mut at, 10_000, 10, 1);
        at += Duration::from_secs(60);
        assert!(t.quiet_after(3, at));
    }

    #[test]
    fn the_tick_after_a_busy_stream_stopped_says_trickle_and_a_tick_within_it_does_not() {
        // The loop's one-second tick is a quiet moment with nothing new (reactions.rs).
        let (mut t, mut at) = (Trickle::default(), Instant::now());
        feed(&mut t, &mut at, 10_000, 10, 1);
        assert!(
            !t.quiet_after(0, at),
            "busy: a tick right after its last read"
        );
        assert!(!feed(&mut t, &mut at, 10_000, 10, 1).iter().any(|k| *k));
        at += Duration::from_secs(1);
        assert!(t.quiet_after(0, at), "stopped a second ago");
    }
}
