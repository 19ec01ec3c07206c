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
                forecast::seconds_to_loss(self.headroom.make_contiguous())
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
