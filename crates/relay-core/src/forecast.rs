//! When the replication slot runs out of headroom, at the current rate.
//!
//! The headroom is the WAL that may still be written before the slot is lost: PostgreSQL's
//! `safe_wal_size` when `max_slot_wal_keep_size` is set, else the distance to the relay's own
//! critical threshold of retained WAL. It shrinks at the WAL rate while the slot does not
//! advance, and grows back when the slot's `restart_lsn` moves on.
//!
//! Invariant: a forecast exists only while the headroom *shrinks* (least-squares slope over the
//! samples below zero), so a relay that keeps up, whose headroom saw-tooths around a constant,
//! is never forecast to lose its slot; and it is never negative (no headroom left = 0 s).

/// Seconds until the headroom reaches zero, from `(seconds, headroom bytes)` samples in time
/// order (the last one is "now"). `None` when there are fewer than two samples over a positive
/// time span, or the headroom does not shrink.
pub fn seconds_to_loss(samples: &[(f64, i64)]) -> Option<f64> {
    let &(_, last) = samples.last()?;
    if last <= 0 {
        return Some(0.0);
    }
    let slope = slope(samples)?;
    // Bytes per second lost; a slope that rounds to zero is "not shrinking".
    if slope >= -f64::EPSILON {
        return None;
    }
    Some(last as f64 / -slope)
}

/// The least-squares slope of headroom over time, in bytes per second.
pub fn slope(samples: &[(f64, i64)]) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let n = samples.len() as f64;
    let mean_t = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let mean_h = samples.iter().map(|s| s.1 as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for &(t, h) in samples {
        num += (t - mean_t) * (h as f64 - mean_h);
        den += (t - mean_t) * (t - mean_t);
    }
    if den <= 0.0 || !den.is_finite() {
        return None;
    }
    Some(num / den)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn examples() {
        // 1 MiB/s shrinking, 60 MiB left: 60 s.
        let s: Vec<_> = (0..10)
            .map(|i| (i as f64, (70 - i) as i64 * (1 << 20)))
            .collect();
        assert!((seconds_to_loss(&s).unwrap() - 61.0).abs() < 1e-6);
        assert_eq!(seconds_to_loss(&[(0.0, 5), (1.0, 0)]), Some(0.0));
        assert_eq!(seconds_to_loss(&[(0.0, 5), (1.0, -7)]), Some(0.0));
        assert_eq!(seconds_to_loss(&[(0.0, 5)]), None, "one sample");
        assert_eq!(seconds_to_loss(&[(1.0, 9), (1.0, 5)]), None, "no time span");
        assert_eq!(seconds_to_loss(&[(0.0, 5), (1.0, 5)]), None, "steady");
        assert_eq!(seconds_to_loss(&[(0.0, 5), (1.0, 9)]), None, "growing");
        assert_eq!(seconds_to_loss(&[]), None);
    }

    proptest! {
        /// Headroom shrinking linearly at `rate` is forecast to end exactly when it would.
        #[test]
        fn linear_shrink_is_forecast_exactly(
            left in 1i64..1 << 40, rate in 1i64..1 << 30, n in 2usize..50, step in 0.1f64..30.0,
        ) {
            let s: Vec<(f64, i64)> = (0..n)
                .map(|i| (i as f64 * step, left + rate * (n - 1 - i) as i64))
                .collect();
            let per_sec = rate as f64 / step;
            let want = left as f64 / per_sec;
            let got = seconds_to_loss(&s).unwrap();
            prop_assert!((got - want).abs() <= want * 1e-6 + 1e-6, "got {got}, want {want}");
        }

        /// Never negative, and none while the headroom does not shrink (a relay that keeps up:
        /// any saw-tooth that ends where it started or higher).
        #[test]
        fn never_negative_and_none_unless_shrinking(
            mut hs in prop::collection::vec(-1i64 << 30..1 << 40, 2..40),
        ) {
            let s: Vec<(f64, i64)> = hs.iter().enumerate().map(|(i, h)| (i as f64, *h)).collect();
            if let Some(f) = seconds_to_loss(&s) {
                prop_assert!(f >= 0.0 && f.is_finite());
            }
            hs.sort();
            let rising: Vec<(f64, i64)> = hs.iter().enumerate().map(|(i, h)| (i as f64, *h)).collect();
            if rising.last().unwrap().1 > 0 {
                prop_assert_eq!(seconds_to_loss(&rising), None);
            }
        }

        /// More headroom at the same rate is never forecast to run out sooner.
        #[test]
        fn more_headroom_lasts_longer(
            base in prop::collection::vec(1i64..1 << 30, 2..20), extra in 0i64..1 << 30,
        ) {
            let a: Vec<(f64, i64)> = base.iter().enumerate().map(|(i, h)| (i as f64, *h)).collect();
            let b: Vec<(f64, i64)> = a.iter().map(|&(t, h)| (t, h + extra)).collect();
            if let (Some(fa), Some(fb)) = (seconds_to_loss(&a), seconds_to_loss(&b)) {
                prop_assert!(fb >= fa - 1e-9);
            }
        }
    }
}
