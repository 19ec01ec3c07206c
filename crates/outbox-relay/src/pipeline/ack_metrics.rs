//! The metrics of acknowledged records: events and bytes produced per topic, and the time
//! from the source commit to Kafka's acknowledgement.
//!
//! The handles are looked up once per topic and kept: a labelled `metrics::counter!` builds
//! its key (allocating the label), hashes it and locks the registry on every call, which cost
//! about 4,000 instructions per record in a catch-up (docs/benchmarks.md, "CPU per event").
//! The recorder is installed before the pipeline starts and never replaced (`metrics::install`),
//! and it drops no idle series, so a kept handle always reaches the exported series.

use std::{collections::HashMap, sync::Arc};

use metrics::{Counter, Histogram};

use crate::telemetry::metrics as m;

/// The two counters of one topic.
#[derive(Clone)]
struct TopicCounters {
    events: Counter,
    bytes: Counter,
}

impl TopicCounters {
    fn of(topic: &Arc<str>) -> Self {
        Self {
            events: metrics::counter!(m::EVENTS_PRODUCED, "topic" => topic.to_string()),
            bytes: metrics::counter!(m::BYTES_PRODUCED, "topic" => topic.to_string()),
        }
    }
}

pub(super) struct AckMetrics {
    topics: HashMap<Arc<str>, TopicCounters>,
    /// The topic of the last acknowledgement: records of one topic come in runs.
    last: Option<(Arc<str>, TopicCounters)>,
    commit_to_ack: Histogram,
}

impl AckMetrics {
    pub(super) fn new() -> Self {
        Self {
            topics: HashMap::new(),
            last: None,
            commit_to_ack: metrics::histogram!(m::COMMIT_TO_ACK_SECONDS),
        }
    }

    /// One record of `topic` (`bytes` of key and value) acknowledged `lag_us` after its source
    /// transaction committed.
    pub(super) fn acked(&mut self, topic: &Arc<str>, bytes: u64, lag_us: i64) {
        let counters = match &self.last {
            Some((t, c)) if Arc::ptr_eq(t, topic) || **t == **topic => c,
            _ => {
                let c = self
                    .topics
                    .entry(topic.clone())
                    .or_insert_with(|| TopicCounters::of(topic))
                    .clone();
                &self.last.insert((topic.clone(), c)).1
            }
        };
        counters.events.increment(1);
        counters.bytes.increment(bytes);
        self.commit_to_ack.record(lag_us.max(0) as f64 / 1e6);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_topic_counts_its_own_events_and_bytes() {
        let recorder = m::builder().unwrap().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let mut acks = AckMetrics::new();
            let (a, b): (Arc<str>, Arc<str>) = ("t.a".into(), "t.b".into());
            acks.acked(&a, 10, 1_000);
            acks.acked(&b, 5, 2_000);
            // Another allocation of the same name is the same topic.
            acks.acked(&Arc::from("t.a"), 1, 3_000);
            // A lag below zero (clocks) counts as none.
            acks.acked(&b, 0, -5);
        });
        let text = handle.render();
        for line in [
            format!("{}{{topic=\"t.a\"}} 2", m::EVENTS_PRODUCED),
            format!("{}{{topic=\"t.b\"}} 2", m::EVENTS_PRODUCED),
            format!("{}{{topic=\"t.a\"}} 11", m::BYTES_PRODUCED),
            format!("{}{{topic=\"t.b\"}} 5", m::BYTES_PRODUCED),
            format!("{}_count 4", m::COMMIT_TO_ACK_SECONDS),
            format!("{}_sum 0.006", m::COMMIT_TO_ACK_SECONDS),
            format!("{}_bucket{{le=\"0.005\"}} 4", m::COMMIT_TO_ACK_SECONDS),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
