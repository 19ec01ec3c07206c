//! What this instance applies right now: its partitions, the next position of each, the log's
//! end as last seen, and the halted ones with their reason. Shared by the consumer's thread,
//! the partition tasks, `/readyz` and the metrics.
//!
//! Invariant: a halted partition stays halted (and `/readyz` says why) until it is revoked or the
//! process restarts; nothing here resumes it.

use std::{
    collections::BTreeMap,
    sync::{Mutex, MutexGuard},
};

use outbox_service::http::Readiness;

use crate::telemetry::metrics as m;

pub(crate) type Tp = (String, i32);

#[derive(Debug, Default, Clone)]
pub(crate) struct PartitionState {
    /// The next offset to apply (stored position or the offset after the last applied).
    pub(crate) next: Option<i64>,
    /// The log end (high watermark) as last fetched.
    pub(crate) high: Option<i64>,
    pub(crate) halted: Option<String>,
    /// The last error a transaction of the partition was rolled back on, and when (kept after
    /// the partition moved on, so that an operator sees what it last ran into).
    pub(crate) last_error: Option<(String, std::time::SystemTime)>,
    /// Rolled back and not past the failed records yet.
    pub(crate) retrying: bool,
    /// `next` moved since the last advisory offset commit.
    pub(crate) unreported: bool,
}

#[derive(Default)]
pub(crate) struct Assignment {
    parts: Mutex<BTreeMap<Tp, PartitionState>>,
    /// Set once the first assignment (possibly empty) is known.
    joined: std::sync::atomic::AtomicBool,
}

impl Assignment {
    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<Tp, PartitionState>> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn assigned(&self, tp: &Tp, next: Option<i64>, halted: Option<String>) {
        let label = (tp.0.clone(), tp.1.to_string());
        metrics::gauge!(m::APPLY_PARTITION_HALTED, "topic" => label.0, "partition" => label.1)
            .set(if halted.is_some() { 1.0 } else { 0.0 });
        self.lock().insert(
            tp.clone(),
            PartitionState {
                next,
                halted,
                ..Default::default()
            },
        );
        self.joined
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn revoked(&self, tp: &Tp) {
        self.lock().remove(tp);
        metrics::gauge!(m::APPLY_PARTITION_HALTED, "topic" => tp.0.clone(), "partition" => tp.1.to_string()).set(0.0);
        metrics::gauge!(m::APPLY_LAG_RECORDS, "topic" => tp.0.clone(), "partition" => tp.1.to_string()).set(0.0);
    }

    pub(crate) fn joined(&self) {
        self.joined
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The first assignment is known.
    pub(crate) fn has_joined(&self) -> bool {
        self.joined.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn advanced(&self, tp: &Tp, next: i64) {
        if let Some(p) = self.lock().get_mut(tp)
            && p.next.is_none_or(|n| next > n)
        {
            p.next = Some(next);
            p.unreported = true;
            p.retrying = false;
        }
    }

    /// A transaction of `tp` was rolled back on `why`; the same records are tried again.
    pub(crate) fn retrying(&self, tp: &Tp, why: &str) {
        if let Some(p) = self.lock().get_mut(tp) {
            p.last_error = Some((why.to_string(), std::time::SystemTime::now()));
            p.retrying = true;
        }
    }

    pub(crate) fn halt(&self, tp: &Tp, reason: String) {
        if let Some(p) = self.lock().get_mut(tp) {
            p.halted = Some(reason);
        }
        metrics::gauge!(m::APPLY_PARTITION_HALTED, "topic" => tp.0.clone(), "partition" => tp.1.to_string()).set(1.0);
    }

    /// Records the log end of `tp` and exports the lag (records not applied yet).
    pub(crate) fn log_end(&self, tp: &Tp, high: i64) {
        let mut parts = self.lock();
        let Some(p) = parts.get_mut(tp) else { return };
        p.high = Some(high);
        let lag = p.next.map_or(0, |n| (high - n).max(0));
        metrics::gauge!(m::APPLY_LAG_RECORDS, "topic" => tp.0.clone(), "partition" => tp.1.to_string()).set(lag as f64);
    }
}

impl Readiness for Assignment {
    fn readiness(&self, _passive_ok: bool) -> Result<(), Vec<String>> {
        let mut reasons = Vec::new();
        if !self.joined.load(std::sync::atomic::Ordering::Relaxed) {
            reasons.push(
                "not in the consumer group yet: waiting for the first assignment".to_string(),
            );
        }
        for ((topic, partition), p) in self.lock().iter() {
            if let Some(why) = &p.halted {
                reasons.push(format!("partition {topic}[{partition}] halted: {why}"));
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }
}
