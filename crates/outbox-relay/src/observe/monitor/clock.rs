//! The monitor's memory of the server's counters: when the WAL passed each position (for the
//! time lag) and the last value of each cumulative server counter (for Prometheus counters).

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use relay_core::Lsn;

/// Remembers when the server's WAL first passed each position the monitor saw.
#[derive(Debug, Default)]
pub(super) struct WalClock {
    samples: VecDeque<(Instant, Lsn)>,
}

/// About six days of samples at the default interval; older ones are dropped (the lag is then
/// underestimated, never overestimated).
const MAX_SAMPLES: usize = 100_000;

impl WalClock {
    pub(super) fn observe(&mut self, at: Instant, server_lsn: Lsn) {
        if self.samples.back().is_none_or(|&(_, l)| server_lsn > l) {
            if self.samples.len() == MAX_SAMPLES {
                self.samples.pop_front();
            }
            self.samples.push_back((at, server_lsn));
        }
    }

    /// Age of the oldest WAL after `confirmed`: the time since the first sample beyond it.
    pub(super) fn lag(&mut self, confirmed: Lsn, now: Instant) -> Duration {
        while self.samples.front().is_some_and(|&(_, l)| l <= confirmed) {
            self.samples.pop_front();
        }
        self.samples
            .front()
            .map_or(Duration::ZERO, |&(t, _)| now.saturating_duration_since(t))
    }
}

/// Mirrors a server-side cumulative counter into a Prometheus counter (by increments, so a
/// `pg_stat_reset_replication_slot` is a counter reset, not a stuck value).
#[derive(Debug, Default)]
pub(super) struct CounterMirror {
    last: Option<i64>,
}

impl CounterMirror {
    pub(super) fn increment(&mut self, value: i64) -> u64 {
        let inc = match self.last {
            Some(last) if value >= last => value - last,
            _ => value,
        };
        self.last = Some(value);
        inc.max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_clock_measures_the_age_of_the_oldest_unconfirmed_wal() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut c = WalClock::default();
        c.observe(at(0), Lsn(100));
        assert_eq!(c.lag(Lsn(100), at(0)), Duration::ZERO, "caught up");
        c.observe(at(5), Lsn(200));
        c.observe(at(10), Lsn(200)); // no new WAL: no sample
        c.observe(at(15), Lsn(300));
        assert_eq!(
            c.lag(Lsn(100), at(20)),
            Duration::from_secs(15),
            "WAL past 100 seen at 5 s"
        );
        assert_eq!(
            c.lag(Lsn(250), at(20)),
            Duration::from_secs(5),
            "WAL past 250 seen at 15 s"
        );
        assert_eq!(c.lag(Lsn(300), at(20)), Duration::ZERO);
        assert!(c.samples.is_empty(), "confirmed samples are forgotten");
    }

    #[test]
    fn counter_mirror_turns_server_counters_into_increments() {
        let mut m = CounterMirror::default();
        assert_eq!(m.increment(10), 10, "first reading: the server's total");
        assert_eq!(m.increment(15), 5);
        assert_eq!(m.increment(15), 0);
        assert_eq!(m.increment(3), 3, "stats reset: counted again from zero");
    }
}
