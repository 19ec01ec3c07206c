//! Stall detection: the replication stream is up and the server writes WAL, yet nothing moves.
//!
//! "Moves" is any of the progress markers the caller passes: the relay received a change (and
//! handed it to Kafka), Kafka acknowledged a record, the slot confirmed a position. A long
//! transaction that is still arriving moves them, or, while the server still decodes it and
//! sends nothing, the caller reports the walsender busy; either way it is not a stall.
//!
//! Invariant: a stall is reported only after `stalled_secs` of continuous streaming in which no
//! marker changed *and* the server's WAL position grew past where it was when they last moved;
//! an idle database (no new WAL) or a closed stream is never a stall. Pure: time is passed in.

use crate::Lsn;

/// One observation of the relay and the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallInput {
    /// The replication stream is open.
    pub streaming: bool,
    /// The server's WAL position.
    pub server_lsn: Lsn,
    /// Values that change whenever the pipeline or the server's decoding makes progress.
    pub markers: Vec<u64>,
    /// The server is busy decoding for this slot (e.g. reading back a large transaction).
    pub decoding: bool,
}

/// Remembers when the markers last moved.
#[derive(Debug, Clone, Default)]
pub struct StallDetector {
    /// (seconds, markers, server WAL position) at the last movement.
    last: Option<(f64, Vec<u64>, Lsn)>,
}

impl StallDetector {
    /// Applies one observation at `now` (seconds on any monotonic clock); returns for how many
    /// seconds the relay has been stalled, or `None` when it is not stalled.
    pub fn observe(&mut self, now: f64, input: &StallInput, stalled_secs: f64) -> Option<f64> {
        if !input.streaming {
            self.last = None;
            return None;
        }
        let moved = match &self.last {
            None => true,
            Some((_, markers, _)) => *markers != input.markers || input.decoding,
        };
        if moved {
            self.last = Some((now, input.markers.clone(), input.server_lsn));
            return None;
        }
        let (since, _, lsn) = self.last.as_ref()?;
        let quiet = now - since;
        (stalled_secs > 0.0 && quiet >= stalled_secs && input.server_lsn > *lsn).then_some(quiet)
    }

    /// Forgets the history (after the pipeline was restarted).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn input(lsn: u64, markers: &[u64]) -> StallInput {
        StallInput {
            streaming: true,
            server_lsn: Lsn(lsn),
            markers: markers.to_vec(),
            decoding: false,
        }
    }

    #[test]
    fn examples() {
        let mut d = StallDetector::default();
        assert_eq!(d.observe(0.0, &input(100, &[1, 1]), 10.0), None);
        assert_eq!(d.observe(9.0, &input(200, &[1, 1]), 10.0), None, "not yet");
        assert_eq!(d.observe(10.0, &input(200, &[1, 1]), 10.0), Some(10.0));
        assert_eq!(d.observe(11.0, &input(200, &[1, 2]), 10.0), None, "moved");
        assert_eq!(
            d.observe(30.0, &input(200, &[1, 2]), 10.0),
            None,
            "no new WAL: idle"
        );
        let mut busy = input(300, &[1, 2]);
        busy.decoding = true;
        assert_eq!(
            d.observe(40.0, &busy, 10.0),
            None,
            "a long transaction arriving"
        );
        assert_eq!(d.observe(49.0, &input(400, &[1, 2]), 10.0), None);
        assert_eq!(d.observe(50.0, &input(400, &[1, 2]), 10.0), Some(10.0));
        let mut down = input(500, &[1, 2]);
        down.streaming = false;
        assert_eq!(d.observe(60.0, &down, 10.0), None, "stream closed");
        assert_eq!(
            d.observe(61.0, &input(600, &[1, 2]), 10.0),
            None,
            "clock restarts"
        );
        assert_eq!(d.observe(100.0, &input(700, &[1, 2]), 0.0), None, "off");
    }

    #[derive(Debug, Clone)]
    struct Step {
        dt: f64,
        wal: u64,
        moved: bool,
        streaming: bool,
        decoding: bool,
    }

    fn step() -> impl Strategy<Value = Step> {
        (
            0.0f64..20.0,
            0u64..3,
            any::<bool>(),
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(dt, wal, moved, streaming, decoding)| Step {
                dt,
                wal,
                moved,
                streaming,
                decoding,
            })
    }

    proptest! {
        /// Against a model: stalled exactly when streaming has lasted, nothing moved and WAL
        /// grew for at least `stalled_secs`; the reported duration is that quiet time.
        #[test]
        fn matches_the_model(steps in prop::collection::vec(step(), 1..60), limit in 1.0f64..60.0) {
            let mut d = StallDetector::default();
            let (mut now, mut lsn, mut marker) = (0.0, 0u64, 0u64);
            let mut model: Option<(f64, Lsn)> = None;
            for s in steps {
                now += s.dt;
                lsn += s.wal;
                if s.moved { marker += 1; }
                let inp = StallInput { streaming: s.streaming, server_lsn: Lsn(lsn), markers: vec![marker], decoding: s.decoding };
                let got = d.observe(now, &inp, limit);
                let want = if !s.streaming {
                    model = None;
                    None
                } else {
                    match model {
                        Some((_, _)) if !s.moved && !s.decoding => {
                            let (since, at) = model.unwrap();
                            (now - since >= limit && Lsn(lsn) > at).then_some(now - since)
                        }
                        _ => { model = Some((now, Lsn(lsn))); None }
                    }
                };
                prop_assert_eq!(got, want);
                if let Some(q) = got {
                    prop_assert!(q >= limit);
                }
            }
        }
    }
}
