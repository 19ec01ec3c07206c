//! Where the pipeline, the slot monitor, the heartbeat and the HTTP endpoint meet.
//!
//! Invariant: the relay is *ready* exactly when the replication stream is open and no built-in
//! alert is critical. Everything lives in one [`Shared`] value per relay run, which `run`
//! creates and hands to each task (the pipeline, the monitor, the heartbeat, the slot keeper,
//! the HTTP endpoint): no process globals, so that one process can serve several pipelines.
//! Locks are held only to copy values in or out.

use std::{
    collections::VecDeque,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::SystemTime,
};

use relay_core::Lsn;

use crate::{
    observe::alert::{Active, Severity},
    telemetry::metrics as m,
};

/// What a source's [`Shared`] knows beyond its metrics, for the console: its state
/// (`streaming`, `passive`, `stopped`, `waiting`), why, and its firing alerts.
#[derive(Debug, Clone, Default)]
pub(crate) struct SourceHealth {
    pub(crate) state: &'static str,
    pub(crate) why: Option<String>,
    pub(crate) alerts: Vec<Active>,
}

/// Heartbeats kept while waiting for their confirmation.
const MAX_PENDING_HEARTBEATS: usize = 10_000;

/// State shared by the relay's background tasks.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Firing alerts, replaced by the monitor after every poll.
    alerts: Mutex<Vec<Active>>,
    /// Heartbeats written and not yet confirmed by the slot: (written at, message LSN).
    heartbeats: Mutex<VecDeque<(SystemTime, Lsn)>>,
    /// The monitor asks the supervisor to restart a stalled pipeline.
    restart: tokio::sync::Notify,
    /// Held by the supervisor while a pipeline attempt holds (or opens) the replication
    /// session; the slot keeper holds the slot only while it is free.
    pub(crate) slot_lease: tokio::sync::Mutex<()>,
    /// The replication stream is open ([`set_streaming`](Self::set_streaming)).
    streaming: AtomicBool,
    /// The pipeline's records received and acknowledged in this attempt
    /// ([`pipeline_progress`](Self::pipeline_progress)).
    received: AtomicU64,
    acked: AtomicU64,
    /// The last attempt ended because another instance holds the slot.
    passive: AtomicBool,
    /// The slot's `wal_status` left `reserved`/`extended` ([`set_wal_at_risk`](Self::set_wal_at_risk)).
    wal_at_risk: AtomicBool,
    /// Why this source stopped for good ([`set_stopped`](Self::set_stopped)), in a process
    /// that goes on relaying its other sources.
    stopped: Mutex<Option<String>>,
    /// `relay.max_sources`: the permits of the process's streaming sources, shared by all of
    /// them; none without a limit.
    capacity: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    /// `relay.max_in_flight_bytes_total`: the in-flight bytes of every source of the process.
    budget: Option<std::sync::Arc<crate::sink::budget::Budget>>,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A source of a process that streams at most `capacity`'s permits of sources at once and
    /// holds at most `budget`'s bytes in flight over all its sources.
    pub(crate) fn of_fleet(
        capacity: Option<std::sync::Arc<tokio::sync::Semaphore>>,
        budget: Option<std::sync::Arc<crate::sink::budget::Budget>>,
    ) -> Self {
        Self {
            capacity,
            budget,
            ..Self::default()
        }
    }

    pub(crate) fn budget(&self) -> Option<&std::sync::Arc<crate::sink::budget::Budget>> {
        self.budget.as_ref()
    }

    pub(crate) fn capacity(&self) -> Option<&std::sync::Arc<tokio::sync::Semaphore>> {
        self.capacity.as_ref()
    }

    /// Called by the pipeline when the replication stream opens (`true`) and closes (`false`).
    pub(crate) fn set_streaming(&self, on: bool) {
        self.streaming.store(on, Ordering::SeqCst);
        metrics::gauge!(m::STREAMING).set(if on { 1.0 } else { 0.0 });
    }

    pub(crate) fn streaming(&self) -> bool {
        self.streaming.load(Ordering::SeqCst)
    }

    /// Called by the pipeline about once a second while it streams: the records received and
    /// handed to Kafka, and those Kafka acknowledged, in this attempt. The monitor's stall rule
    /// watches them move (keepalives do not count: they arrive while the pipeline waits for
    /// Kafka).
    pub(crate) fn pipeline_progress(&self, received: u64, acked: u64) {
        self.received.store(received, Ordering::Relaxed);
        self.acked.store(acked, Ordering::Relaxed);
    }

    /// The last [`pipeline_progress`](Self::pipeline_progress): (records received, records
    /// acknowledged).
    pub(crate) fn pipeline_markers(&self) -> (u64, u64) {
        (
            self.received.load(Ordering::Relaxed),
            self.acked.load(Ordering::Relaxed),
        )
    }

    /// Called by the supervisor after each attempt: `true` when it ended because another
    /// instance holds the slot (this one is the passive instance of an active/passive group),
    /// `false` when any other reason ended it. Streaming again clears it too.
    pub(crate) fn set_passive(&self, on: bool) {
        self.passive.store(on, Ordering::SeqCst);
    }

    fn passive(&self) -> bool {
        self.passive.load(Ordering::SeqCst) && !self.streaming()
    }

    /// Called by the monitor after each poll: the slot's `wal_status` left
    /// `reserved`/`extended` (PostgreSQL may invalidate it at its next checkpoint, which then
    /// waits for a walsender that the relay keeps blocked).
    pub(crate) fn set_wal_at_risk(&self, on: bool) {
        self.wal_at_risk.store(on, Ordering::SeqCst);
    }

    /// See [`set_wal_at_risk`](Self::set_wal_at_risk): the pipeline releases its replication
    /// connection while it waits for Kafka.
    pub(crate) fn wal_at_risk(&self) -> bool {
        self.wal_at_risk.load(Ordering::SeqCst)
    }

    /// Restarts the current pipeline attempt, if one runs (no permit is kept for a later one).
    pub(crate) fn request_restart(&self) {
        self.restart.notify_waiters();
    }

    /// Completes when [`Shared::request_restart`] is called.
    pub(crate) async fn restart_requested(&self) {
        self.restart.notified().await;
    }

    /// The source ended on a definite error while the process relays other sources: it stays
    /// not ready, with `why`, until a reload restarts it.
    pub(crate) fn set_stopped(&self, why: Option<String>) {
        *lock(&self.stopped) = why;
    }

    pub(crate) fn set_alerts(&self, active: Vec<Active>) {
        *lock(&self.alerts) = active;
    }

    /// `Ok` when ready, else every reason, one sentence each. `passive_ok` (`/readyz?role=any`,
    /// for Kubernetes): a passive instance waiting for the slot another instance holds is doing
    /// its job too, so it counts as ready (critical alerts still make it unready).
    pub(crate) fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>> {
        let mut reasons = Vec::new();
        if let Some(why) = lock(&self.stopped).as_ref() {
            reasons.push(format!("stopped: {why}"));
        } else if !(self.streaming() || (passive_ok && self.passive())) {
            reasons.push(
                "not streaming: the replication stream is not open (see the relay log for \
                 pipeline_restart)"
                    .to_string(),
            );
        }
        for a in lock(&self.alerts).iter() {
            if a.severity == Severity::Critical {
                reasons.push(format!("critical alert {}: {}", a.kind, a.summary));
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }

    /// The source's state for the console: `stopped` (why), `streaming`, `passive` (another
    /// instance holds the slot) or `waiting` (between attempts), and its firing alerts.
    pub(crate) fn health(&self) -> SourceHealth {
        let stopped = lock(&self.stopped).clone();
        let (state, why) = match stopped {
            Some(why) => ("stopped", Some(why)),
            None if self.streaming() => ("streaming", None),
            None if self.passive() => (
                "passive",
                Some("another instance holds the slot; this one takes over if it goes".into()),
            ),
            None => (
                "waiting",
                Some(
                    "the replication stream is not open (see the log for pipeline_restart)".into(),
                ),
            ),
        };
        SourceHealth {
            state,
            why,
            alerts: lock(&self.alerts).clone(),
        }
    }

    /// Records a heartbeat written at `at` whose message has LSN `lsn`.
    pub(crate) fn heartbeat_written(&self, at: SystemTime, lsn: Lsn) {
        let mut q = lock(&self.heartbeats);
        if q.len() == MAX_PENDING_HEARTBEATS {
            q.pop_front();
        }
        q.push_back((at, lsn));
    }

    /// Forgets the heartbeats the slot has confirmed (message LSN below `confirmed_flush`)
    /// and returns when the newest of them was written.
    pub(crate) fn heartbeats_confirmed(&self, confirmed_flush: Lsn) -> Option<SystemTime> {
        let mut q = lock(&self.heartbeats);
        let mut newest = None;
        while let Some(&(at, lsn)) = q.front() {
            if lsn >= confirmed_flush {
                break;
            }
            newest = Some(at);
            q.pop_front();
        }
        newest
    }
}

/// A poisoned lock only means another task panicked while copying a value: keep going.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::alert::AlertKind;

    #[test]
    fn confirmed_heartbeats_are_popped_in_order_and_the_newest_returned() {
        let s = Shared::new();
        let t = |n| SystemTime::UNIX_EPOCH + Duration::from_secs(n);
        s.heartbeat_written(t(1), Lsn(100));
        s.heartbeat_written(t(2), Lsn(200));
        s.heartbeat_written(t(3), Lsn(300));
        assert_eq!(
            s.heartbeats_confirmed(Lsn(100)),
            None,
            "confirmed must pass the message"
        );
        assert_eq!(s.heartbeats_confirmed(Lsn(250)), Some(t(2)));
        assert_eq!(s.heartbeats_confirmed(Lsn(250)), None);
        assert_eq!(s.heartbeats_confirmed(Lsn(301)), Some(t(3)));
    }

    #[test]
    fn readiness_lists_every_reason() {
        let s = Shared::new();
        s.set_streaming(false);
        s.set_alerts(vec![
            Active {
                kind: AlertKind::TimeLag,
                severity: Severity::Critical,
                summary: "old".into(),
                action: "",
                since: SystemTime::UNIX_EPOCH,
                state: String::new(),
            },
            Active {
                kind: AlertKind::RetainedWal,
                severity: Severity::Warning,
                summary: "big".into(),
                action: "",
                since: SystemTime::UNIX_EPOCH,
                state: String::new(),
            },
        ]);
        let reasons = s.readiness(false).unwrap_err();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].starts_with("not streaming"));
        assert_eq!(reasons[1], "critical alert time_lag: old");
        // A passive instance: not streaming is its role with `role=any`, not with plain /readyz.
        s.set_passive(true);
        assert_eq!(s.readiness(false).unwrap_err().len(), 2);
        assert_eq!(
            s.readiness(true).unwrap_err(),
            ["critical alert time_lag: old"]
        );
        s.set_alerts(vec![]);
        assert_eq!(s.readiness(true), Ok(()));
        s.set_passive(false);
        assert!(s.readiness(true).is_err(), "not passive, not streaming");
    }
}
