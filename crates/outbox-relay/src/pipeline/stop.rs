//! Stopping from any wait.
//!
//! Invariant: every await that depends on a server answering (connect, a query, a replication
//! command, a full producer queue, a delivery report) races the stop signal, so SIGTERM ends
//! the process within `relay.shutdown_timeout_ms` whatever the servers do. A wait cut short
//! this way leaves nothing confirmed that Kafka has not acknowledged: the pipeline then drains
//! (bounded) and confirms only the acknowledged prefix.

use std::{future::Future, pin::pin, task::Poll};

use tokio::sync::watch;

/// Runs `work` unless a stop arrives first (`None`: stopped, `work` was dropped). Work that
/// completes without waiting (an event handed to librdkafka: almost every call, once per
/// event in a catch-up) returns at once, without watching the stop signal: it waits for
/// nobody, so there is nothing to cut short.
pub(crate) async fn unless_stopped<F: Future>(
    stop: &watch::Receiver<bool>,
    work: F,
) -> Option<F::Output> {
    let mut work = pin!(work);
    if let Poll::Ready(out) = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await {
        return Some(out);
    }
    let mut stop = stop.clone();
    let stopped = async move {
        // A dropped sender can no longer stop anything: wait for `work` alone.
        if stop.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        _ = stopped => None,
        out = work => Some(out),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_stop_ends_a_wait_that_never_returns_and_a_finished_one_returns() {
        let (tx, rx) = watch::channel(false);
        assert_eq!(unless_stopped(&rx, async { 7 }).await, Some(7));
        crate::telemetry::source_scope::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(true);
        });
        let stuck = std::future::pending::<()>();
        let r = tokio::time::timeout(Duration::from_secs(5), unless_stopped(&rx, stuck)).await;
        assert_eq!(r, Ok(None));
        // Already stopped: returns at once.
        assert_eq!(
            unless_stopped(&rx, std::future::pending::<()>()).await,
            None
        );
        // Already stopped, but the work is done without waiting: its result counts.
        assert_eq!(unless_stopped(&rx, async { 8 }).await, Some(8));
        // Work that waits first is cut short.
        let waits = async {
            tokio::task::yield_now().await;
            9
        };
        assert_eq!(unless_stopped(&rx, waits).await, None);
    }
}
