//! The monitor's reading of the outbox tables' health ([`crate::observe::outbox_tables`]): at most
//! every `monitor.outbox_stats_interval_ms`, on the monitor's connection; the last good
//! reading of each table is kept for the `outbox_dead_tuples` alert between readings.

use std::time::{Duration, Instant, SystemTime};

use super::Monitor;
use crate::{
    observe::outbox_tables::{self, TableHealth},
    telemetry::events::OUTBOX_STATS_FAILED,
    telemetry::metrics as m,
};

impl Monitor {
    pub(super) async fn read_outbox_tables(&mut self) {
        let every = Duration::from_millis(self.cfg.monitor.outbox_stats_interval_ms);
        if self.cfg.outbox.is_empty() || self.tables_read.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        let Some((client, _)) = self.conn.as_ref() else {
            return;
        };
        self.tables_read = Some(Instant::now());
        let mut good = Vec::new();
        let mut errors = Vec::new();
        for r in outbox_tables::query(client, &self.cfg.outbox).await {
            match r {
                Ok(h) => {
                    publish(&h);
                    good.push(h);
                }
                Err(e) => errors.push(e),
            }
        }
        let error = (!errors.is_empty()).then(|| errors.join("; "));
        if error.is_some() && error != self.tables_error {
            tracing::warn!(
                error = error.as_deref().unwrap_or(""),
                "{OUTBOX_STATS_FAILED}: retried every monitor.outbox_stats_interval_ms"
            );
        }
        self.tables_error = error;
        // A table that failed keeps its last good reading.
        for h in good {
            match self.tables.iter_mut().find(|t| t.table == h.table) {
                Some(t) => *t = h,
                None => self.tables.push(h),
            }
        }
    }
}

/// Publishes the gauges of one table.
fn publish(h: &TableHealth) {
    let unix = |t: Option<SystemTime>| {
        t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let label = h.table.clone();
    let set = |name: &'static str, v: f64| metrics::gauge!(name, "table" => label.clone()).set(v);
    set(m::OUTBOX_PARTITIONS, h.partitions as f64);
    set(m::OUTBOX_LIVE_TUPLES, h.live_tuples as f64);
    set(m::OUTBOX_DEAD_TUPLES, h.dead_tuples as f64);
    set(m::OUTBOX_SIZE_BYTES, h.size_bytes as f64);
    set(m::OUTBOX_LAST_AUTOVACUUM, unix(h.last_autovacuum));
    set(m::OUTBOX_LAST_AUTOANALYZE, unix(h.last_autoanalyze));
    if let Some(age) = h.oldest_row_age {
        set(m::OUTBOX_OLDEST_ROW_AGE, age.as_secs_f64());
    }
}
