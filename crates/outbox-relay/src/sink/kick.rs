//! The kick when the replication stream goes quiet (`kafka.flush_when_quiet`): a trickle is
//! sent at once instead of after `linger.ms`, Nagle-style (only when every earlier record is
//! acknowledged), so busy streams keep batching.

use std::sync::atomic::Ordering;

use super::KafkaSink;

impl KafkaSink {
    /// The replication stream went quiet: what was produced should go out now instead of when
    /// `linger.ms` runs out, since no batch is going to fill (`kafka.flush_when_quiet`). Like
    /// Nagle's algorithm, it goes out at once only when every earlier record was acknowledged;
    /// otherwise it waits for those reports ([`try_kick`](Self::try_kick) on each) and batches
    /// with whatever comes meanwhile. Kicking while requests are outstanding would send many
    /// small requests that queue behind each other (5 in flight at most): at 10k events/s that
    /// raised the p99 tenfold.
    pub(crate) fn kick(&self) {
        self.kick_wanted.store(true, Ordering::Relaxed);
        self.try_kick();
    }

    /// Kicks if a kick is wanted and nothing older than the records since the last kick is
    /// still unacknowledged. The kick is librdkafka's flush for at most 1 ms on the producer's
    /// kick thread (while it runs the brokers' threads treat the linger as elapsed), without
    /// waiting for acknowledgements; one asked for while one runs runs right after it.
    pub(crate) fn try_kick(&self) {
        if !self.kick_wanted.load(Ordering::Relaxed) {
            return;
        }
        let outstanding = u64::try_from(self.unreported()).unwrap_or(0);
        if outstanding == 0 {
            // Nothing left in librdkafka to send. Most quiet moments of a source whose cluster
            // has other busy databases are this: its walsender pings after each of their
            // commits, and a flush for nothing cost a thread wake-up each (docs/benchmarks.md,
            // "Many databases").
            self.kick_wanted.store(false, Ordering::Relaxed);
            return;
        }
        if outstanding > self.since_kick.load(Ordering::Relaxed) {
            return;
        }
        self.kick_wanted.store(false, Ordering::Relaxed);
        self.since_kick.store(0, Ordering::Relaxed);
        self.producer().kicker().kick();
    }
}
