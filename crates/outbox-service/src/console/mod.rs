//! The console: a read-only live web page of the relay's or the applier's state, served by the
//! HTTP endpoint beside `/metrics` (`/` the page, `/console.js` its script, `/status.json` the
//! document the page and `outbox-relay status` read, `/history.json` the last hour).
//!
//! Invariants: the console only reads. Every route answers GET or HEAD and changes nothing;
//! there is no form and no action, and the script draws text with `textContent` (never as
//! HTML), so a value from the database (an error message, an event type) cannot become markup.
//! Assets are compiled in (`include_str!`): the page works with no internet. Memory is bounded
//! by the history ring ([`history`]).

use std::sync::{Arc, Mutex};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

use crate::http::{Readiness, Routes};

pub mod history;
pub mod prom_text;

use history::{History, Reading};

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("console.js");

/// What a process (the relay, or the applier) shows.
pub trait View: Readiness {
    /// The status document (JSON) from the process's metrics text; `history` gives the rates.
    fn status_json(&self, metrics: &str, history: &History) -> String;
    /// One reading per key (source, consumer) for the history ring.
    fn readings(&self, metrics: &str, now: f64) -> Vec<(String, Reading)>;
}

/// A process's view and its history, served by [`crate::http`].
pub struct Console<V> {
    view: Arc<V>,
    history: Mutex<History>,
}

impl<V: View> Readiness for Console<V> {
    fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>> {
        self.view.readiness(passive_ok)
    }
}

impl<V: View> Console<V> {
    pub fn new(view: Arc<V>) -> Arc<Self> {
        Arc::new(Console {
            view,
            history: Mutex::new(History::default()),
        })
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<V: View> Routes for Console<V> {
    const PATHS: &'static str = "/, /status.json, /history.json";

    fn route(&self, path: &str, prom: &PrometheusHandle) -> Option<(&'static str, String)> {
        Some(match path {
            "/" | "/index.html" => ("text/html; charset=utf-8", PAGE.to_string()),
            "/console.js" => ("text/javascript; charset=utf-8", SCRIPT.to_string()),
            "/status.json" => (
                "application/json",
                self.view.status_json(&prom.render(), &self.history()),
            ),
            "/history.json" => ("application/json", self.history().to_json()),
            _ => return None,
        })
    }
}

impl<V: View> Console<V> {
    /// Takes a reading every [`history::INTERVAL`] until `stop` flips.
    pub async fn sample(self: Arc<Self>, prom: PrometheusHandle, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(history::INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let now = unix(std::time::SystemTime::now());
            let readings = self.view.readings(&prom.render(), now);
            self.history().record(readings);
        }
    }
}

/// `t` in seconds since the Unix epoch (0 before it).
pub fn unix(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
