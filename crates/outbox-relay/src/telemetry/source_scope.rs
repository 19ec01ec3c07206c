//! The source a task works for, when one process relays several databases (`[source.<name>]`).
//!
//! Invariant: every metric a source's tasks record carries `source="<name>"`, and every log line
//! they write is inside a `source` span, without any call site naming the source. The name
//! lives in a tokio task-local set by [`within`]; tasks a source spawns inherit it only through
//! [`spawn`] / [`carry`] (tokio does not copy task-locals into new tasks), which every spawn
//! site of the relay's per-source code uses. The [`Labelled`] recorder adds the label when
//! a metric is registered; it is installed only for multi-source configs, so a single-database
//! relay's series and costs are exactly as before.

use std::{future::Future, sync::Arc};

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use tracing::Instrument;

tokio::task_local! {
    static SOURCE: Option<Arc<str>>;
}

/// The source of the running task, if it works for one.
pub(crate) fn current() -> Option<Arc<str>> {
    SOURCE.try_with(Clone::clone).ok().flatten()
}

/// Runs `fut` as source `name`'s: its metrics are labelled and its logs are in its span.
pub(crate) fn within<F: Future>(name: &str, fut: F) -> impl Future<Output = F::Output> + use<F> {
    let span = tracing::info_span!("source", source = name);
    SOURCE.scope(Some(Arc::from(name)), fut.instrument(span))
}

/// `fut` with the current task's source and span, to run in another task.
pub(crate) fn carry<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    SOURCE.scope(current(), fut.instrument(tracing::Span::current()))
}

/// `tokio::spawn` keeping the current source and span.
pub(crate) fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(carry(fut))
}

/// A recorder that adds `source="<name>"` to the metrics of a source's tasks.
#[derive(Debug)]
pub(crate) struct Labelled<R>(pub(crate) R);

impl<R> Labelled<R> {
    fn key(key: &Key) -> Option<Key> {
        current().map(|s| key.with_extra_labels(vec![Label::new("source", s.to_string())]))
    }
}

impl<R: Recorder> Recorder for Labelled<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        match Self::key(key) {
            Some(k) => self.0.register_counter(&k, metadata),
            None => self.0.register_counter(key, metadata),
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        match Self::key(key) {
            Some(k) => self.0.register_gauge(&k, metadata),
            None => self.0.register_gauge(key, metadata),
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match Self::key(key) {
            Some(k) => self.0.register_histogram(&k, metadata),
            None => self.0.register_histogram(key, metadata),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metrics inside a source's scope, and in tasks it spawns, carry its label; outside, none.
    #[tokio::test]
    async fn metrics_of_a_source_and_its_tasks_carry_its_label() {
        let recorder = Labelled(
            crate::telemetry::metrics::builder()
                .unwrap()
                .build_recorder(),
        );
        let handle = recorder.0.handle();
        let recorder = Arc::new(recorder);
        let r = recorder.clone();
        metrics::with_local_recorder(r.as_ref(), || {
            metrics::counter!("t_outside_total").increment(1)
        });
        within("orders", async {
            metrics::with_local_recorder(recorder.as_ref(), || {
                metrics::counter!("t_inside_total", "topic" => "x").increment(2)
            });
            let r = recorder.clone();
            spawn(async move {
                metrics::with_local_recorder(r.as_ref(), || metrics::gauge!("t_spawned").set(3.0));
            })
            .await
            .unwrap();
        })
        .await;
        let text = handle.render();
        assert!(text.contains("t_outside_total 1"), "{text}");
        assert!(
            text.contains("t_inside_total{topic=\"x\",source=\"orders\"} 2"),
            "{text}"
        );
        assert!(text.contains("t_spawned{source=\"orders\"} 3"), "{text}");
        // A plain tokio::spawn does not inherit the source: why the relay uses `spawn`.
        let r = recorder.clone();
        within("orders", async move {
            tokio::spawn(async move {
                metrics::with_local_recorder(r.as_ref(), || metrics::gauge!("t_plain").set(1.0));
            })
            .await
            .unwrap();
        })
        .await;
        assert!(handle.render().contains("t_plain 1"));
    }
}
