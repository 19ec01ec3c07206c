//! The producer and the thread that serves its events (delivery reports, errors, logs), in
//! place of rdkafka's `ThreadedProducer`.
//!
//! Invariant: the thread calls `poll` until the producer is dropped, so every delivery report
//! reaches [`super::SinkContext`] without the pipeline polling; dropping [`Polled`] stops and
//! joins the thread before the producer itself is dropped (and purged), as `ThreadedProducer`
//! does.
//!
//! Why not `ThreadedProducer`: its thread polls with a 100 ms deadline, and rdkafka turns the
//! time left into whole milliseconds, so the last fraction of every window is polled with a
//! 0 ms timeout in a spin: up to 1 ms of CPU every 100 ms, about 1 % of a core per idle
//! producer (docs/benchmarks.md, "Many databases"). Here each window is a whole number of
//! milliseconds plus [`MARGIN`], so the time left after the wait is at most the margin (the
//! wait itself ends at or after its timeout), and the spin goes with it.

use std::{
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::producer::BaseProducer;

/// One poll window: 100 ms, as `ThreadedProducer`'s, which bounds how long a drop waits.
const WINDOW: Duration = Duration::from_millis(100);
/// More than the time between rdkafka computing the deadline and the time left in it.
const MARGIN: Duration = Duration::from_micros(50);

pub(crate) struct Polled<C: rdkafka::producer::ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl<C: rdkafka::producer::ProducerContext + 'static> Polled<C> {
    /// Starts the poll thread of `producer`.
    pub(crate) fn new(producer: BaseProducer<C>) -> std::io::Result<Self> {
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (producer, stop) = (producer.clone(), stop.clone());
            std::thread::Builder::new()
                .name("producer-poll".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        producer.poll(WINDOW + MARGIN);
                    }
                })?
        };
        Ok(Self {
            producer,
            stop,
            thread: Some(thread),
        })
    }
}

impl<C: rdkafka::producer::ProducerContext + 'static> Deref for Polled<C> {
    type Target = BaseProducer<C>;

    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: rdkafka::producer::ProducerContext + 'static> Drop for Polled<C> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
