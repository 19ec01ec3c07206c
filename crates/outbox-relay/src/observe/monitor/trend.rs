//! The monitor's history for the `slot_forecast` and `stalled` alerts: the headroom series
//! over `alerts.slot_forecast_window_secs` and the stall detector's progress markers. The rules
//! themselves are pure ([`relay_core::headroom`], [`relay_core::stall`]).

use std::time::{Duration, Instant};

use relay_core::{
    headroom::{self, Basis, Series},
    stall::{StallDetector, StallInput},
};

use crate::{config::AlertsConfig, postgres::slot::SlotSnapshot};

/// Headroom under which the slot counts as lost now, even while a restarted series fills: one
/// WAL segment of the default size (the server removes WAL a segment at a time).
const NEAR_ZERO: i64 = 16 << 20;

#[derive(Debug)]
pub(super) struct Trends {
    origin: Instant,
    headroom: Series,
    stall: StallDetector,
}

/// What the history says after one reading.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Trend {
    pub(super) seconds_to_loss: Option<f64>,
    /// What the headroom of the forecast is measured against (`None`: nothing measured).
    pub(super) basis: Option<Basis>,
    pub(super) stalled_for: Option<Duration>,
}

impl Trends {
    pub(super) fn new(now: Instant) -> Self {
        Trends {
            origin: now,
            headroom: Series::default(),
            stall: StallDetector::default(),
        }
    }

    /// The WAL that may still be written before the slot is lost (relay_core::headroom).
    fn headroom(cfg: &AlertsConfig, snap: &SlotSnapshot) -> Option<headroom::Headroom> {
        let slot = snap.slot.as_ref().filter(|s| !s.is_lost())?;
        headroom::headroom(
            snap.max_slot_wal_keep_size,
            slot.safe_wal_size,
            snap.retained_wal_bytes(),
            cfg.retained_wal_critical_bytes,
        )
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
        let seconds_to_loss =
            self.headroom
                .observe(t, Self::headroom(cfg, snap), window, NEAR_ZERO);
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
            basis: self.headroom.basis(),
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
    use crate::postgres::slot::{SlotState, WalStatus};

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
        // 100 bytes/s of WAL the slot keeps: 64 MiB + 1000 bytes of safe_wal_size (well above
        // NEAR_ZERO, so the filling series forecasts nothing).
        const BIG: i64 = 64 << 20;
        t.observe(
            &cfg(),
            &snap(2000, BIG + 1200, Some(1 << 30), idle),
            true,
            (5, 5),
            at(0),
        );
        let early = t.observe(
            &cfg(),
            &snap(2100, BIG + 1100, Some(1 << 30), idle),
            true,
            (5, 5),
            at(1),
        );
        assert_eq!(early.seconds_to_loss, None, "the window is not full yet");
        let tr = t.observe(
            &cfg(),
            &snap(2200, BIG + 1000, Some(1 << 30), idle),
            true,
            (5, 5),
            at(2),
        );
        let want = (BIG + 1000) as f64 / 100.0;
        assert!((tr.seconds_to_loss.unwrap() - want).abs() < 1e-3, "{tr:?}");
        assert_eq!(tr.basis, Some(Basis::SafeWalSize { limit: 1 << 30 }));
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
