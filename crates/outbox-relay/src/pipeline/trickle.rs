//! Whether the stream is a trickle, for the kick when it goes quiet (`kafka.flush_when_quiet`).
//!
//! The rule: a quiet moment kicks when the *smoothed* burst (events between quiet moments,
//! averaged over roughly the last [`RISE`] of them going up, [`FALL`] going down) is below
//! [`KICK_BELOW`], not when the burst that just ended is. At a low rate a hiccup (the database, the walsender or this
//! process held up for some milliseconds) ends in one larger burst; judged on its own it looked
//! like a busy stream, and its records waited out `linger.ms` (20 ms) on top of the hiccup:
//! that was most of the at-least-once tail at 1k events/s (bench/notes.md, 2026-12-03). A
//! stream that stays busy still batches: the average follows it within a few dozen quiet
//! moments, a few milliseconds at the rates where that matters.

/// A smoothed burst below this many events (replication messages: a single-row transaction
/// is three) is a trickle whose records are sent at once. With `relay.read_coalesce_us` at
/// 1 ms, a few thousand events per second; kicking busier streams too doubled the relay's CPU
/// at 10k events/s for no better p99.
const KICK_BELOW: f64 = 8.0;

/// A larger burst moves the average by 1/RISE of the difference: one burst after a hiccup
/// barely moves it.
const RISE: f64 = 16.0;

/// A smaller burst moves it by 1/FALL: when a busy stream turns into a trickle, its records are
/// kicked again after a few quiet moments, not a few dozen.
const FALL: f64 = 4.0;

/// The smoothed size of the bursts between quiet moments.
#[derive(Debug, Default)]
pub(super) struct Trickle {
    avg: f64,
}

impl Trickle {
    /// The stream went quiet after `burst` events: whether it is a trickle (kick its records
    /// out now rather than after `linger.ms`).
    pub(super) fn quiet_after(&mut self, burst: u32) -> bool {
        let d = f64::from(burst) - self.avg;
        self.avg += d / if d > 0.0 { RISE } else { FALL };
        self.avg < KICK_BELOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_after_a_hiccup_in_a_trickle_is_still_a_trickle() {
        let mut t = Trickle::default();
        // 1k single-row transactions a second: one or two per quiet moment.
        for burst in [3, 6, 3, 3, 6, 3, 3, 3, 6, 3] {
            assert!(t.quiet_after(burst));
        }
        // The database stalled 20 ms: 20 transactions arrive at once.
        assert!(t.quiet_after(60));
        assert!(t.quiet_after(3));
    }

    #[test]
    fn a_busy_stream_batches_within_a_few_dozen_quiet_moments_and_a_trickle_kicks_again() {
        let mut t = Trickle::default();
        for _ in 0..10 {
            t.quiet_after(3);
        }
        // 10k events/s: ~10 transactions per 1 ms pause.
        let until_busy = (1..=100).find(|_| !t.quiet_after(30)).unwrap();
        assert!(until_busy <= 10, "{until_busy}");
        for _ in 0..100 {
            assert!(!t.quiet_after(30));
        }
        let until_trickle = (1..=100).find(|_| t.quiet_after(3)).unwrap();
        assert!(until_trickle <= 8, "{until_trickle}");
    }
}
