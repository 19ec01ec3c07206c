//! The monitor's reading of the outbox tables' health ([`crate::outbox_health`]): at most
//! every `monitor.outbox_stats_interval_ms`, on the monitor's connection; the last good
//! reading of each table is kept for the `outbox_dead_tuples` alert between readings.

use std::time::{Duration, Instant};

use super::Monitor;
use crate::{events::OUTBOX_STATS_FAILED, outbox_health};

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
        for r in outbox_health::query(client, &self.cfg.outbox).await {
            match r {
                Ok(h) => {
                    outbox_health::publish(&h);
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
