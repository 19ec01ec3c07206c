//! The slot's headroom (WAL that may still be written before it is lost) and its series over
//! the forecast window, from which [`crate::forecast::seconds_to_loss`] is read.
//!
//! Invariants:
//! - One series measures one thing. The headroom is PostgreSQL's `safe_wal_size` under a
//!   `max_slot_wal_keep_size`, an estimate from that limit and the retained WAL where a managed
//!   server hides `safe_wal_size`, or the distance to the relay's own critical threshold of
//!   retained WAL with an unlimited setting. Operators change `max_slot_wal_keep_size` at run
//!   time (the `slot_forecast` alert advises it), and each change is a step in the headroom
//!   that a least-squares slope would read as a collapse (or, raised, as a recovery hiding a
//!   real loss). So a change of what is measured, or of the limit, restarts the series.
//! - No forecast from a short series, except for the one case that needs none: a headroom
//!   already at or within `near_zero` bytes of zero is "lost now" (0 s), so a restarted series
//!   never leaves a slot at the edge unreported while it fills.

use std::collections::VecDeque;

use crate::forecast;

/// What the headroom is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// `safe_wal_size` under `max_slot_wal_keep_size` = the given bytes.
    SafeWalSize { limit: u64 },
    /// `max_slot_wal_keep_size` minus the retained WAL: the server set a limit but did not
    /// show `safe_wal_size` (hidden or unreadable on some managed servers).
    EstimatedFromLimit { limit: u64 },
    /// `max_slot_wal_keep_size` is unlimited: the distance from the retained WAL to the
    /// relay's `alerts.retained_wal_critical_bytes`.
    Threshold { critical: u64 },
}

/// One reading of the headroom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    pub bytes: i64,
    pub basis: Basis,
}

/// The headroom of one reading: `max_keep` is `max_slot_wal_keep_size` in bytes (`None` =
/// unlimited), `safe` the slot's `safe_wal_size`, `retained` the WAL it keeps, `critical` the
/// relay's threshold (0 = off). `None` when nothing can be measured.
pub fn headroom(
    max_keep: Option<u64>,
    safe: Option<i64>,
    retained: Option<u64>,
    critical: u64,
) -> Option<Headroom> {
    match (max_keep, safe, retained) {
        (Some(limit), Some(bytes), _) => Some(Headroom {
            bytes,
            basis: Basis::SafeWalSize { limit },
        }),
        (Some(limit), None, Some(r)) => Some(Headroom {
            bytes: limit as i64 - r as i64,
            basis: Basis::EstimatedFromLimit { limit },
        }),
        (None, _, Some(r)) if critical > 0 => Some(Headroom {
            bytes: critical as i64 - r as i64,
            basis: Basis::Threshold { critical },
        }),
        _ => None,
    }
}

/// The headroom samples of the current basis within the forecast window.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// (seconds, headroom bytes), oldest first, all of `basis`.
    samples: VecDeque<(f64, i64)>,
    basis: Option<Basis>,
}

/// The share of the window the samples must span before a slope is trusted (poll jitter).
pub const FULL_WINDOW: f64 = 0.9;

impl Series {
    /// Adds the reading at `t` seconds and returns the forecast: seconds until the headroom is
    /// gone, or `None`. `window` is `alerts.slot_forecast_window_secs`; `near_zero` the bytes
    /// under which the headroom counts as gone (a WAL segment: the server removes WAL a whole
    /// segment at a time).
    pub fn observe(
        &mut self,
        t: f64,
        reading: Option<Headroom>,
        window: f64,
        near_zero: i64,
    ) -> Option<f64> {
        let Some(h) = reading else {
            self.samples.clear();
            self.basis = None;
            return None;
        };
        if self.basis != Some(h.basis) {
            self.samples.clear();
            self.basis = Some(h.basis);
        }
        self.samples.push_back((t, h.bytes));
        while self.samples.front().is_some_and(|&(s, _)| t - s > window) {
            self.samples.pop_front();
        }
        // Only over a (nearly) full window: a healthy slot's headroom saw-tooths (its
        // restart_lsn moves with each running-xacts record, every 15 s or so), and a few
        // seconds of one tooth would forecast a loss that never comes.
        let span = self.samples.front().map_or(0.0, |&(s, _)| t - s);
        if span >= window * FULL_WINDOW {
            forecast::seconds_to_loss(self.samples.make_contiguous())
        } else if h.bytes <= near_zero {
            Some(0.0)
        } else {
            None
        }
    }

    /// The basis of the current series (`None` before the first reading or after a gap).
    pub fn basis(&self) -> Option<Basis> {
        self.basis
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn the_basis_follows_what_the_server_shows() {
        let keep = 96 << 20;
        assert_eq!(
            headroom(Some(keep), Some(50 * MIB), Some(10 << 20), 1 << 30).unwrap(),
            Headroom {
                bytes: 50 * MIB,
                basis: Basis::SafeWalSize { limit: keep }
            }
        );
        // safe_wal_size hidden: estimated from the limit, not "unknown".
        assert_eq!(
            headroom(Some(keep), None, Some(10 << 20), 1 << 30).unwrap(),
            Headroom {
                bytes: 86 * MIB,
                basis: Basis::EstimatedFromLimit { limit: keep }
            }
        );
        assert_eq!(
            headroom(None, None, Some(10 << 20), 1 << 30).unwrap().basis,
            Basis::Threshold { critical: 1 << 30 }
        );
        assert_eq!(headroom(None, None, Some(10 << 20), 0), None);
        assert_eq!(headroom(Some(keep), None, None, 1 << 30), None);
    }

    /// The reported case: the relay keeps up under the threshold basis (saw-tooth near 1 GiB of
    /// headroom), then `max_slot_wal_keep_size = '96MB'` is set. The headroom steps from ~1 GiB
    /// to ~90 MiB; one series over both would forecast a loss in seconds.
    #[test]
    fn setting_the_limit_restarts_the_series_instead_of_reading_a_collapse() {
        let (window, near_zero) = (10.0, 16 * MIB);
        let mut s = Series::default();
        // A saw-tooth: never a forecast under an hour (the default warning level).
        let calm = |f: Option<f64>| f.is_none_or(|f| f > 3600.0);
        for i in 0..20 {
            let h = headroom(None, None, Some(((i % 3) << 20) as u64), 1 << 30);
            assert!(calm(s.observe(i as f64, h, window, near_zero)));
        }
        for i in 20..40 {
            let h = headroom(
                Some(96 << 20),
                Some(90 * MIB - (i % 3) * MIB),
                None,
                1 << 30,
            );
            let f = s.observe(i as f64, h, window, near_zero);
            assert!(calm(f), "forecast {f:?} at t={i}: the slot keeps up");
        }
        assert_eq!(s.basis(), Some(Basis::SafeWalSize { limit: 96 << 20 }));
    }

    #[test]
    fn raising_or_lowering_the_limit_restarts_too() {
        let (window, near_zero) = (10.0, 16 * MIB);
        let mut s = Series::default();
        // A real loss under 200 MB: 10 MiB/s.
        for i in 0..12 {
            let h = headroom(Some(200 << 20), Some(190 * MIB - i * 10 * MIB), None, 0);
            s.observe(i as f64, h, window, near_zero);
        }
        let f = s.observe(
            12.0,
            headroom(Some(200 << 20), Some(70 * MIB), None, 0),
            window,
            near_zero,
        );
        assert!(f.is_some_and(|f| (f - 7.0).abs() < 0.5), "{f:?}");
        // Raised to 1 GB: a step up, which must not hide the loss behind a rising slope; the
        // new series says nothing until it has a window of its own...
        let up = headroom(Some(1 << 30), Some(900 * MIB), None, 0);
        assert_eq!(s.observe(13.0, up, window, near_zero), None);
        // ...and then forecasts the same rate again.
        let mut f = None;
        for i in 14..26 {
            let h = headroom(
                Some(1 << 30),
                Some(900 * MIB - (i - 13) * 10 * MIB),
                None,
                0,
            );
            f = s.observe(i as f64, h, window, near_zero);
        }
        assert!(f.is_some_and(|f| (f - 78.0).abs() < 1.0), "{f:?}");
    }

    #[test]
    fn a_restarted_series_at_the_edge_is_lost_now() {
        let (window, near_zero) = (300.0, 16 * MIB);
        let mut s = Series::default();
        for i in 0..100 {
            s.observe(
                i as f64,
                headroom(None, None, Some(1 << 20), 1 << 30),
                window,
                near_zero,
            );
        }
        // Lowered under what the slot already retains: nothing left.
        let h = headroom(Some(64 << 20), Some(-MIB), None, 1 << 30);
        assert_eq!(s.observe(100.0, h, window, near_zero), Some(0.0));
        // Within a segment of the limit: lost at the next segment switch.
        let h = headroom(Some(64 << 20), Some(8 * MIB), None, 1 << 30);
        assert_eq!(s.observe(101.0, h, window, near_zero), Some(0.0));
        // Comfortably inside: no forecast until the window fills.
        let h = headroom(Some(64 << 20), Some(40 * MIB), None, 1 << 30);
        assert_eq!(s.observe(102.0, h, window, near_zero), None);
    }

    proptest! {
        /// Whatever came before, a forecast right after a change of basis is either none or
        /// "lost now", and "lost now" only at the edge: a step is never read as a rate.
        #[test]
        fn no_rate_across_a_change_of_basis(
            before in prop::collection::vec(-1i64 << 30..1 << 31, 1..40),
            limit in 1u64..1 << 32, after in -1i64 << 30..1 << 31,
        ) {
            let (window, near_zero) = (10.0, 16 * MIB);
            let mut s = Series::default();
            for (i, b) in before.iter().enumerate() {
                s.observe(i as f64 * 0.5, headroom(None, None, Some(b.unsigned_abs()), 1 << 31), window, near_zero);
            }
            let t = before.len() as f64 * 0.5;
            let f = s.observe(t, headroom(Some(limit), Some(after), None, 1 << 31), window, near_zero);
            if after <= near_zero {
                prop_assert_eq!(f, Some(0.0));
            } else {
                prop_assert_eq!(f, None);
            }
        }
    }
}
