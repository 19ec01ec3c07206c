//! The monitor's history for the `slot_forecast` and `stalled` alerts: headroom samples over
//! `alerts.slot_forecast_window_secs` and the stall detector's progress markers. The rules
//! themselves are pure ([`relay_core::forecast`], [`relay_core::stall`]).

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use relay_core::{
    forecast,
    stall::{StallDetector, StallInput},
};

use crate::{config::AlertsConfig, slot::SlotSnapshot};

/// The share of `alerts.slot_forecast_window_secs` the samples must span (poll jitter).
const FULL_WINDOW: f64 = 0.9;

#[derive(Debug)]
pub(super) struct Trends {
    origin: Instant,
    /// (seconds since `origin`, headroom bytes), within the window.
    headroom: VecDeque<(f64, i64)>,
    stall: StallDetector,
}

/// What the history says after one reading.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Trend {
    pub(super) seconds_to_loss: Option<f64>,
    pub(super) stalled_for: Option<Duration>,
}

impl Trends {
    pub(super) fn new(now: Instant) -> Self {
        Trends {
            origin: now,
            headroom: VecDeque::new(),
            stall: StallDetector::default(),
        }
    }

    /// The WAL that may still be written before the slot is lost: `safe_wal_size`, or with an
    /// unlimited `max_slot_wal_keep_size` the distance to `retained_wal_critical_bytes`.
    fn headroom(cfg: &AlertsConfig, snap: &SlotSnapshot) -> Option<i64> {
        let slot = snap.slot.as_ref().filter(|s| !s.is_lost())?;
        match snap.max_slot_wal_keep_size {
            Some(_) => slot.safe_wal_size,
            None if cfg.retained_wal_critical_bytes > 0 => {
                let retained = snap.retained_wal_bytes()?;
                Some(cfg.retained_wal_critical_bytes as i64 - retained as i64)
            }
            None => None,
        }
    }

    pub(super) fn observe(
        &mut self,
        cfg: &AlertsConfig,
        snap: &SlotSnapshot,
        streaming: bool,
        pipeline: (u64, u64),
        now: Instant,
    ) -> Trend {
        let t = now.saturating_duration_since(self.origin).as_secs_f64();
        let window = cfg.slot_forecast_window_secs as f64;
        let seconds_to_loss = match Self::headroom(cfg, snap) {
            Some(h) => {
                self.headroom.push_back((t, h));
                while self.headroom.front().is_some_and(|&(s, _)| t - s > window) {
                    self.headroom.pop_front();
                }
                // Only over a (nearly) full window: a healthy slot's headroom saw-tooths (its
                // restart_lsn moves with each running-xacts record, every 15 s or so), and a
                // few seconds of one tooth would forecast a loss that never comes.
                let span = self.headroom.front().map_or(0.0, |&(s, _)| t - s);
                if span >= window * FULL_WINDOW {
                    forecast::seconds_to_loss(self.headroom.make_contiguous())
                } else {
                    None
                }
            }
            None => {
                self.headroom.clear();
                None
            }
        };
        let slot = snap.slot.as_ref();
        let input = StallInput {
            streaming,
            server_lsn: snap.server_lsn.unwrap_or_default(),
            markers: vec![
                pipeline.0,
                pipeline.1,
                slot.and_then(|s| s.confirmed_flush).map_or(0, |l| l.0),
            ],
            decoding: slot.is_some_and(|s| s.walsender_decoding()),
        };
        let stalled_for = self
            .stall
            .observe(t, &input, cfg.stalled_secs as f64)
            .map(Duration::from_secs_f64);
        Trend {
            seconds_to_loss,
            stalled_for,
        }
    }

    /// After the pipeline was restarted: the stall clock starts again.
    pub(super) fn restarted(&mut self) {
        self.stall.reset();
    }
}

#[cfg(test)]
mod tests {
    use relay_core::Lsn;

    use super::*;
    use crate::slot::{SlotState, WalStatus};

    fn snap(lsn: u64, safe: i64, keep: Option<u64>, wait: &str) -> SlotSnapshot {
        SlotSnapshot {
            in_recovery: false,
            server_lsn: Some(Lsn(lsn)),
            max_slot_wal_keep_size: keep,
            slot: Some(SlotState {
                active: true,
                active_pid: Some(1),
                restart_lsn: Some(Lsn(1000)),
                confirmed_flush: Some(Lsn(1000)),
                wal_status: Some(WalStatus::Reserved),
                safe_wal_size: Some(safe),
                invalidation_reason: None,
                on_standby: false,
                inactive_since: None,
                stats: None,
                walsender_wait: Some(wait.into()),
            }),
        }
    }

    fn cfg() -> AlertsConfig {
        AlertsConfig {
            slot_forecast_window_secs: 2,
            stalled_secs: 3,
            retained_wal_critical_bytes: 11_000,
            ..AlertsConfig::default()
        }
    }

    #[test]
    fn the_headroom_is_safe_wal_size_or_the_critical_threshold() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut t = Trends::new(t0);
        let idle = "Client:WalSenderWriteData";
        // 100 bytes/s of WAL the slot keeps: 1000 bytes of safe_wal_size last 10 s.
        t.observe(
            &cfg(),
            &snap(2000, 1200, Some(1 << 20), idle),
            true,
            (5, 5),
            at(0),
        );
        let early = t.observe(
            &cfg(),
            &snap(2100, 1100, Some(1 << 20), idle),
            true,
            (5, 5),
            at(1),
        );
        assert_eq!(early.seconds_to_loss, None, "the window is not full yet");
        let tr = t.observe(
            &cfg(),
            &snap(2200, 1000, Some(1 << 20), idle),
            true,
            (5, 5),
            at(2),
        );
        assert!((tr.seconds_to_loss.unwrap() - 10.0).abs() < 1e-6, "{tr:?}");
        // Unlimited: 11000 - (server - restart_lsn) = 11000 - 2000 = 9000 at 100 bytes/s.
        let mut t = Trends::new(t0);
        t.observe(&cfg(), &snap(2800, -1, None, idle), true, (5, 5), at(0));
        let tr = t.observe(&cfg(), &snap(3000, -1, None, idle), true, (5, 5), at(2));
        assert!((tr.seconds_to_loss.unwrap() - 90.0).abs() < 1e-6, "{tr:?}");
        // A lost slot has no headroom to forecast.
        let mut lost = snap(3100, 0, Some(1), idle);
        lost.slot.as_mut().unwrap().wal_status = Some(WalStatus::Lost);
        let tr = t.observe(&cfg(), &lost, true, (5, 5), at(3));
        assert_eq!(tr.seconds_to_loss, None);
    }

    #[test]
    fn stalled_unless_the_walsender_is_busy_or_the_pipeline_moves() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut t = Trends::new(t0);
        let idle = "Client:WalSenderWriteData";
        let obs = |t: &mut Trends, lsn, wait, markers, s| {
            t.observe(
                &cfg(),
                &snap(lsn, 1 << 20, Some(1 << 30), wait),
                true,
                markers,
                at(s),
            )
            .stalled_for
        };
        assert_eq!(obs(&mut t, 2000, idle, (5, 5), 0), None);
        assert_eq!(obs(&mut t, 2100, "IO:WALRead", (5, 5), 2), None, "decoding");
        assert_eq!(obs(&mut t, 2200, idle, (5, 5), 4), None);
        assert_eq!(
            obs(&mut t, 2300, idle, (5, 5), 5),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            obs(&mut t, 2400, idle, (6, 5), 6),
            None,
            "a record was received"
        );
        t.restarted();
        assert_eq!(
            obs(&mut t, 2500, idle, (6, 5), 10),
            None,
            "the clock starts again"
        );
    }
}
