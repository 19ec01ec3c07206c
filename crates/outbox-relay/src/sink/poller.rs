//! The producer and its two threads: one serves its events (delivery reports, errors, logs), in
//! place of rdkafka's `ThreadedProducer`; one runs the kick (`sink/kicker.rs`).
//!
//! Invariant: the poll thread calls `poll` until the producer is dropped, so every delivery
//! report reaches [`super::SinkContext`] without the pipeline polling; dropping [`Polled`] stops
//! and joins both threads before the producer itself is dropped (and purged), as
//! `ThreadedProducer` does.
//!
//! Why not `ThreadedProducer`: its thread polls with a 100 ms deadline, and rdkafka turns the
//! time left into whole milliseconds, so the last fraction of every window is polled with a
//! 0 ms timeout in a spin: up to 1 ms of CPU every 100 ms, about 1 % of a core per idle
//! producer, and as much again after every event that ends a wait early (a delivery report at
//! 10 events/s: ~0.4 ms of CPU per event; docs/benchmarks.md, "Many databases"). So this thread
//! never waits inside rdkafka's poll: it parks, librdkafka wakes it when an event arrives on
//! an empty queue (`rd_kafka_queue_cb_event_enable`, whose callback only unparks), and it
//! serves what is queued with zero timeouts.

use std::{
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use rdkafka::{
    bindings as rd,
    producer::{BaseProducer, Producer},
};

/// How long the poll thread parks at most: a lost wake-up costs no more than this, and the
/// thread notices a drop within it.
const WINDOW: Duration = Duration::from_millis(100);
/// Events served per turn before the queue's length is looked at again.
const TURN: usize = 1024;

pub(crate) struct Polled<C: rdkafka::producer::ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Dropped (stopped and joined) first.
    kicker: Option<super::kicker::Kicker>,
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
                .spawn(move || serve(&producer, &stop))?
        };
        let kicker = super::kicker::Kicker::new(producer.clone())?;
        Ok(Self {
            producer,
            stop,
            thread: Some(thread),
            kicker: Some(kicker),
        })
    }

    /// The producer's kick thread.
    pub(crate) fn kicker(&self) -> &super::kicker::Kicker {
        self.kicker.as_ref().expect("present until dropped")
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
        drop(self.kicker.take());
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The poll thread: serves the producer's events until `stop`, parked while there are none.
fn serve<C: rdkafka::producer::ProducerContext>(producer: &BaseProducer<C>, stop: &AtomicBool) {
    // SAFETY: a new reference to the main queue, destroyed below; the callback gets a pointer
    // to this thread's handle, which lives until the callback is removed again (removing it
    // takes the queue's lock, under which the callback runs, so none is running after).
    let native = producer.client().native_ptr();
    let queue = unsafe { rd::rd_kafka_queue_get_main(native) };
    let me = Box::new(std::thread::current());
    unsafe {
        rd::rd_kafka_queue_cb_event_enable(
            queue,
            Some(wake),
            std::ptr::from_ref::<std::thread::Thread>(&me)
                .cast_mut()
                .cast(),
        )
    };
    while !stop.load(Ordering::Relaxed) {
        let mut served = 0;
        // SAFETY: `queue` is valid until destroyed below.
        while served < TURN && unsafe { rd::rd_kafka_queue_length(queue) } > 0 {
            producer.poll(Duration::ZERO);
            served += 1;
        }
        if served < TURN {
            // An event queued after the length was read has unparked this thread already, so
            // this returns at once.
            std::thread::park_timeout(WINDOW);
        }
    }
    unsafe {
        rd::rd_kafka_queue_cb_event_enable(queue, None, std::ptr::null_mut());
        rd::rd_kafka_queue_destroy(queue);
    }
    drop(me);
}

/// librdkafka's callback when an event lands on the empty main queue: unparks the poll thread.
/// It runs on a librdkafka thread with the queue locked, so it does nothing else.
unsafe extern "C" fn wake(_rk: *mut rd::rd_kafka_t, opaque: *mut std::ffi::c_void) {
    // SAFETY: `opaque` is the poll thread's handle, alive while the callback is registered.
    let thread = unsafe { &*opaque.cast::<std::thread::Thread>() };
    thread.unpark();
}
