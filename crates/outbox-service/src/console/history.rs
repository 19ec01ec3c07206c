//! The last hour without Prometheus: a fixed-size ring of samples per source (relay) or per
//! consumer (applier), taken every [`INTERVAL`] from the process's own metrics and drawn by the
//! page as small charts.
//!
//! Invariant: memory is bounded. Each ring holds at most [`CAPACITY`] samples (720 × 5 s = one
//! hour; a sample is 32 bytes, so about 23 KiB per ring), and a ring exists only for a key of
//! the latest sample (a source removed by a reload loses its ring), so the history costs
//! `CAPACITY × 32 B × keys` at most, whatever the uptime.

use std::{
    collections::{BTreeMap, VecDeque},
    time::Duration,
};

use serde::Serialize;

/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Samples kept per ring: one hour at [`INTERVAL`].
pub(crate) const CAPACITY: usize = 720;

/// One reading: two levels (for the relay the slot's lag and retained WAL in bytes; for the
/// applier the records not applied yet and the halted partitions) and the rate of a counter
/// (events or records per second) since the previous reading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Point {
    /// Seconds since the Unix epoch.
    pub(crate) t: f64,
    pub(crate) a: f64,
    pub(crate) b: f64,
    /// `NaN` is never stored: the first reading and a counter reset have no rate (0).
    pub(crate) rate: f64,
}

/// A reading before its rate is known: the counter's total.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub t: f64,
    pub a: f64,
    pub b: f64,
    pub counter: f64,
}

#[derive(Debug, Default)]
struct Ring {
    points: VecDeque<Point>,
    last: Option<Reading>,
}

impl Ring {
    fn push(&mut self, r: Reading) {
        let rate = match self.last {
            Some(p) if r.t > p.t && r.counter >= p.counter => (r.counter - p.counter) / (r.t - p.t),
            _ => 0.0,
        };
        self.last = Some(r);
        if self.points.len() == CAPACITY {
            self.points.pop_front();
        }
        self.points.push_back(Point {
            t: r.t,
            a: r.a,
            b: r.b,
            rate,
        });
    }
}

/// Every key's ring.
#[derive(Debug, Default)]
pub struct History {
    rings: BTreeMap<String, Ring>,
}

#[derive(Serialize)]
struct Document<'a> {
    interval_secs: u64,
    capacity: usize,
    series: BTreeMap<&'a str, Vec<Point>>,
}

impl History {
    /// Adds one reading per key; the rings of keys missing from `readings` are dropped.
    pub fn record(&mut self, readings: Vec<(String, Reading)>) {
        self.rings
            .retain(|k, _| readings.iter().any(|(key, _)| key == k));
        for (key, r) in readings {
            self.rings.entry(key).or_default().push(r);
        }
    }

    /// The last rate of `key` (events or records per second), once two readings exist.
    pub fn rate(&self, key: &str) -> Option<f64> {
        let ring = self.rings.get(key)?;
        (ring.points.len() >= 2).then(|| ring.points.back().map(|p| p.rate))?
    }

    #[cfg(test)]
    pub(crate) fn len(&self, key: &str) -> usize {
        self.rings.get(key).map_or(0, |r| r.points.len())
    }

    /// `/history.json`: `{interval_secs, capacity, series: {key: [{t, a, b, rate}]}}`.
    pub fn to_json(&self) -> String {
        let d = Document {
            interval_secs: INTERVAL.as_secs(),
            capacity: CAPACITY,
            series: self
                .rings
                .iter()
                .map(|(k, r)| (k.as_str(), r.points.iter().copied().collect()))
                .collect(),
        };
        serde_json::to_string(&d).unwrap_or_else(|_| "{}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(t: f64, counter: f64) -> Reading {
        Reading {
            t,
            a: t,
            b: 0.0,
            counter,
        }
    }

    #[test]
    fn the_ring_holds_one_hour_and_never_more() {
        assert_eq!(CAPACITY as u64 * INTERVAL.as_secs(), 3600, "one hour");
        assert_eq!(std::mem::size_of::<Point>(), 32, "the size the docs state");
        let mut h = History::default();
        for i in 0..(CAPACITY + 500) {
            h.record(vec![("a".into(), reading(i as f64 * 5.0, i as f64 * 50.0))]);
        }
        assert_eq!(h.len("a"), CAPACITY);
        let ring = &h.rings["a"];
        assert_eq!(
            ring.points.front().unwrap().t,
            500.0 * 5.0,
            "the oldest dropped"
        );
        assert_eq!(h.rate("a"), Some(10.0));
    }

    #[test]
    fn rates_survive_a_counter_reset_and_gone_keys_lose_their_ring() {
        let mut h = History::default();
        h.record(vec![
            ("a".into(), reading(0.0, 100.0)),
            ("b".into(), reading(0.0, 0.0)),
        ]);
        assert_eq!(h.rate("a"), None, "one reading has no rate");
        h.record(vec![("a".into(), reading(5.0, 3.0))]);
        assert_eq!(h.rate("a"), Some(0.0), "a restarted counter");
        assert_eq!(h.len("b"), 0, "b is gone");
        h.record(vec![("a".into(), reading(10.0, 53.0))]);
        assert_eq!(h.rate("a"), Some(10.0));
        let json: serde_json::Value = serde_json::from_str(&h.to_json()).unwrap();
        assert_eq!(json["capacity"], 720);
        assert_eq!(json["series"]["a"].as_array().unwrap().len(), 3);
    }
}
