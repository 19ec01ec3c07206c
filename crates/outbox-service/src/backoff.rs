//! [`Backoff`]: the wait before each retry of a loop, doubled per failure up to a cap, and back
//! to the first wait after a success. The loop sleeps (async or on its thread); this only
//! counts. A small own type rather than a crate (`backon`): the loops need to read the next
//! wait without taking it (it is logged before the sleep), to restart the schedule from either
//! end, and to jitter only some of the waits, which fits in forty lines.

use std::time::Duration;

use rand::Rng as _;

/// Waits `initial`, `2 × initial`, `4 × initial`, ... never above `max` (the first wait is
/// `initial` even when `max` is smaller: callers that want otherwise pass `max.max(initial)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// From `initial_ms` (at least 1 ms) doubling to `max_ms`: the schedules of
    /// `apply.retry_backoff_initial_ms`/`_max_ms`.
    pub fn from_millis(initial_ms: u64, max_ms: u64) -> Backoff {
        Backoff::new(
            Duration::from_millis(initial_ms.max(1)),
            Duration::from_millis(max_ms),
        )
    }

    /// The wait before the next retry, without taking it.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// The wait before this retry; the one after it is doubled (up to `max`).
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = wait.saturating_mul(2).min(self.max);
        wait
    }

    /// A success: the next wait is `initial` again.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The next wait is `max` (a schedule that starts slow and speeds up after progress).
    pub fn saturate(&mut self) {
        self.next = self.max;
    }

    pub fn max(&self) -> Duration {
        self.max
    }
}

/// `wait` scaled by a random factor in `[0.5, 1)`: instances that failed together do not
/// retry in step.
pub fn jittered(wait: Duration) -> Duration {
    wait.mul_f64(rand::rng().random_range(0.5..1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(ms(100), ms(500));
        let waits: Vec<_> = (0..5).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        assert_eq!(b.peek(), ms(500));
        b.reset();
        assert_eq!(b.next_wait(), ms(100));
    }

    #[test]
    fn the_first_wait_is_initial_even_above_the_cap() {
        let mut b = Backoff::new(ms(300), ms(100));
        assert_eq!((b.next_wait(), b.next_wait()), (ms(300), ms(100)));
        let mut b = Backoff::from_millis(0, 10);
        assert_eq!(b.next_wait(), ms(1));
    }

    #[test]
    fn saturate_starts_from_the_cap() {
        let mut b = Backoff::new(ms(1), ms(100));
        b.saturate();
        assert_eq!(b.next_wait(), ms(100));
        b.reset();
        let waits: Vec<_> = (0..8).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 100]);
    }

    #[test]
    fn doubling_saturates_instead_of_overflowing() {
        let mut b = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(
            (b.next_wait(), b.next_wait()),
            (Duration::MAX, Duration::MAX)
        );
    }

    #[test]
    fn jitter_stays_within_half_and_whole() {
        for _ in 0..100 {
            let j = jittered(ms(1000));
            assert!(j >= ms(500) && j < ms(1000), "{j:?}");
        }
    }
}
