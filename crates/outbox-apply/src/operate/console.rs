//! What the applier's console shows: [`ApplierView`] joins the assignment (partitions, lag,
//! halted and why) with the database's part ([`status::store_report`], read every
//! [`INTERVAL`] on one connection kept by [`ApplierView::refresh`]).
//!
//! Invariant: reading the database for the page never delays applying: it runs on its own
//! connection (not the pool's), and a failed reading is shown (`store_error`) and retried at
//! the next interval, never fatal.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::status;
use crate::{partition::assignment::Assignment, postgres::store};
use outbox_service::{
    console::{
        View,
        history::{History, INTERVAL, Reading},
        unix,
    },
    http::Readiness,
};

use super::document::{ApplierStatus, PartitionView, StoreView};
use crate::config::ApplyConfig;

pub(crate) struct ApplierView {
    cfg: Arc<ApplyConfig>,
    assignment: Arc<Assignment>,
    /// The last reading of the database, or why it failed.
    store: Mutex<(Option<StoreView>, Option<String>)>,
}

impl ApplierView {
    pub(crate) fn new(cfg: Arc<ApplyConfig>, assignment: Arc<Assignment>) -> Arc<Self> {
        Arc::new(ApplierView {
            cfg,
            assignment,
            store: Mutex::new((None, None)),
        })
    }

    /// Reads the database's part every [`INTERVAL`] until `stop` flips.
    pub(crate) async fn refresh(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut client: Option<tokio_postgres::Client> = None;
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                client = store::connect(&self.cfg, "console").await.ok();
            }
            let reading = match &client {
                Some(c) => status::store_report(c, &self.cfg)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err("cannot connect to the consumer's database".to_string()),
            };
            let mut s = self.store.lock().unwrap_or_else(|e| e.into_inner());
            match reading {
                Ok(v) => *s = (Some(v), None),
                Err(e) => {
                    client = None;
                    s.1 = Some(e);
                }
            }
        }
    }

    fn document(&self, history: &History) -> ApplierStatus {
        let partitions = self
            .assignment
            .lock()
            .iter()
            .map(|((topic, partition), p)| PartitionView {
                topic: topic.clone(),
                partition: *partition,
                position: p.next,
                log_end: p.high,
                lag: p.high.zip(p.next).map(|(h, n)| (h - n).max(0)),
                halted: p.halted.clone(),
                retrying: p.retrying,
                last_error: p.last_error.as_ref().map(|(e, _)| e.clone()),
                last_error_at: p.last_error.as_ref().map(|(_, at)| unix(*at)),
            })
            .collect();
        let (store, store_error) = self.store.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ApplierStatus {
            kind: "applier".into(),
            at: unix(std::time::SystemTime::now()),
            version: env!("CARGO_PKG_VERSION").into(),
            consumer: self.cfg.apply.consumer.clone(),
            group: self.cfg.kafka.group_id.clone(),
            joined: self.assignment.has_joined(),
            partitions,
            records_per_sec: history.rate(&self.cfg.apply.consumer),
            store,
            store_error,
        }
    }
}

impl Readiness for ApplierView {
    fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>> {
        self.assignment.readiness(passive_ok)
    }
}

impl View for ApplierView {
    fn status_json(&self, _metrics: &str, history: &History) -> String {
        serde_json::to_string(&self.document(history)).unwrap_or_else(|_| "{}".into())
    }

    /// Lag (records) and halted partitions of this instance, records applied.
    fn readings(&self, metrics: &str, now: f64) -> Vec<(String, Reading)> {
        let (lag, halted) = self.assignment.lock().values().fold((0, 0), |(l, h), p| {
            let lag = p.high.zip(p.next).map_or(0, |(hi, n)| (hi - n).max(0));
            (l + lag, h + i64::from(p.halted.is_some()))
        });
        let applied = outbox_service::console::prom_text::total(
            metrics,
            crate::telemetry::metrics::APPLY_RECORDS,
        );
        vec![(
            self.cfg.apply.consumer.clone(),
            Reading {
                t: now,
                a: lag as f64,
                b: halted as f64,
                counter: applied,
            },
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_shows_lag_halts_and_the_last_database_reading() {
        let cfg = ApplyConfig::from_test_toml(
            "[kafka]\ngroup_id = \"g\"\ntopics = [\"t\"]\n[apply]\nconsumer = \"c\"\n\
             [[handler]]\nevent_type = \"E\"\nsql = \"SELECT :value\"\n",
        )
        .unwrap();
        let a = Arc::new(Assignment::default());
        let (t0, t1) = (("t".to_string(), 0), ("t".to_string(), 1));
        a.assigned(&t0, Some(5), None);
        a.log_end(&t0, 9);
        a.assigned(&t1, Some(2), None);
        a.halt(&t1, "handler of \"E\" failed: <b>boom</b>".into());
        a.retrying(&t0, "connection refused");
        let view = ApplierView::new(Arc::new(cfg), a.clone());
        *view.store.lock().unwrap() = (None, Some("cannot connect".into()));
        let d = view.document(&History::default());
        assert_eq!((d.consumer.as_str(), d.group.as_str()), ("c", "g"));
        assert_eq!(
            (d.partitions[0].lag, d.partitions[0].halted.as_deref()),
            (Some(4), None)
        );
        assert_eq!(d.partitions[1].lag, None, "no log end seen yet");
        let p0 = &d.partitions[0];
        assert!(p0.retrying && p0.last_error.as_deref() == Some("connection refused"));
        assert!(p0.last_error_at.is_some_and(|t| t > 1.7e9));
        assert_eq!(
            d.partitions[1].halted.as_deref(),
            Some("handler of \"E\" failed: <b>boom</b>"),
            "carried as text (the page draws it with textContent)"
        );
        assert_eq!(d.store_error.as_deref(), Some("cannot connect"));
        let r = view.readings(
            "outbox_relay_apply_records_total{topic=\"t\",result=\"applied\"} 7\n",
            1.0,
        );
        assert_eq!((r[0].1.a, r[0].1.b, r[0].1.counter), (4.0, 1.0, 7.0));
        // Past the failed records: no longer retrying, the last error still shown.
        a.advanced(&t0, 6);
        let d = view.document(&History::default());
        let p0 = &d.partitions[0];
        assert!(!p0.retrying && p0.last_error.as_deref() == Some("connection refused"));
    }
}
