//! The database's floor in a steady run (issue #15): how long a row takes from the writer to a
//! replication client that does nothing with it. pg_recvlogical streams the same publication
//! with pgoutput to a pipe; a thread timestamps each message as it is read and takes the
//! writer's `ts` out of the row (jsonb text inside the binary message), the same clock and the
//! same window as the Kafka consumer's latencies. What outbox-relay adds on top of this and of
//! Kafka's floor is its own share of the writer-to-consumer latency.
//!
//! pg_recvlogical writes every message with one `write` followed by a newline, unbuffered, so a
//! message is readable as soon as the walsender sent it. A pgoutput message may itself contain
//! newline bytes (lengths, OIDs), but never inside the `"ts": <digits>` text, so splitting the
//! stream at newlines never splits the field.

use std::{
    io::{BufRead, BufReader},
    process::ChildStdout,
    sync::atomic::Ordering,
};

use anyhow::Result;

use crate::{
    kafka::{Collected, Collector, Window, payload_ts},
    pg::now_us,
};

/// Latencies of the rows pg_recvlogical receives, collected until its output ends.
pub struct WalsenderLatency(Collector);

impl WalsenderLatency {
    /// Reads `out` (pg_recvlogical's `-f -`) until it closes.
    pub fn start(out: ChildStdout, window: Window) -> Self {
        Self(Collector::spawn(move |received| {
            let mut reader = BufReader::with_capacity(1 << 16, out);
            let mut line = Vec::with_capacity(1024);
            let mut local = Collected::default();
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line)? == 0 {
                    break;
                }
                // Only the rows count: BEGIN, COMMIT and RELATION messages carry no `ts`. The
                // count is published with every row: once the writer stops, no further line
                // comes that could publish the last ones (the run waits for that count).
                if let Some(ts) = payload_ts(&line) {
                    local.record(now_us(), Some(ts), window);
                    received.store(local.received, Ordering::Relaxed);
                }
            }
            Ok(local)
        }))
    }

    /// Rows received so far.
    pub fn received(&self) -> u64 {
        self.0.received()
    }

    /// What was collected; call once pg_recvlogical has exited (its output closed).
    pub fn finish(self) -> Result<Collected> {
        self.0.join()
    }
}
