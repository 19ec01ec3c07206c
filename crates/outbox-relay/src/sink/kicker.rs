//! The kick's thread: librdkafka's flush for at most [`KICK`] ms, run off the runtime thread,
//! one per producer, parked between kicks (waking it is one futex call; a `spawn_blocking` per
//! kick took the blocking pool's lock and woke one of its threads: with 25 sources at 10 events/s
//! each, about a third of the relay's CPU; docs/benchmarks.md, "Under load").
//!
//! Invariant: a kick asked for while one runs is not lost; it runs right after. The report that
//! lets the sink's Nagle rule kick (`sink/kick.rs`) may arrive while the previous flush still
//! runs, and nothing else asks again: dropped, that kick left its records to wait out
//! `linger.ms`.
//!
//! A kick is best effort: librdkafka's broker threads send only while the flush is open, and
//! one that wakes after [`KICK`] ms (a starved machine) sends nothing. The records then go at
//! the next kick or after `linger.ms` (default 20): latency, never loss.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
};

use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

/// How long a kick holds librdkafka's flush open: the broker threads treat `linger.ms` as
/// elapsed while it lasts; it returns sooner once every record is acknowledged.
const KICK: i32 = 1;

#[derive(Default)]
struct State {
    /// A flush runs or is about to.
    running: bool,
    /// Another one was asked for meanwhile.
    again: bool,
    stop: bool,
}

pub(crate) struct Kicker {
    state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
    /// Kicks asked for, for the tests.
    kicks: AtomicU64,
    /// Flushes run, for the tests (the kick thread counts them).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests only"))]
    flushes: Arc<AtomicU64>,
}

impl Kicker {
    pub(crate) fn new<C: ProducerContext + 'static>(
        producer: Arc<BaseProducer<C>>,
    ) -> std::io::Result<Self> {
        let state = Arc::new(Mutex::new(State::default()));
        let flushes = Arc::new(AtomicU64::new(0));
        let thread = {
            let (state, flushes) = (state.clone(), flushes.clone());
            std::thread::Builder::new()
                .name("producer-kick".into())
                .spawn(move || run(&producer, &state, &flushes))?
        };
        Ok(Self {
            state,
            thread: Some(thread),
            kicks: AtomicU64::new(0),
            flushes,
        })
    }

    /// Sends what is queued now rather than after `linger.ms`, on the kick thread, without
    /// waiting for it: at once, or right after the kick that runs.
    pub(crate) fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::Relaxed);
        let Ok(mut s) = self.state.lock() else { return };
        if s.running {
            s.again = true;
            return;
        }
        s.running = true;
        drop(s);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Kicks asked for so far.
    #[cfg(test)]
    pub(crate) fn kicks(&self) -> u64 {
        self.kicks.load(Ordering::Relaxed)
    }

    /// Flushes run so far.
    #[cfg(test)]
    pub(crate) fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }
}

fn run<C: ProducerContext>(producer: &BaseProducer<C>, state: &Mutex<State>, flushes: &AtomicU64) {
    loop {
        std::thread::park();
        loop {
            {
                let Ok(s) = state.lock() else { return };
                if s.stop {
                    return;
                }
                // A spurious wake-up finds nothing asked for.
                if !s.running {
                    break;
                }
            }
            // SAFETY: the handle lives as long as `producer`, which this thread borrows from
            // an `Arc` it holds.
            unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), KICK) };
            flushes.fetch_add(1, Ordering::Relaxed);
            let Ok(mut s) = state.lock() else { return };
            if s.again {
                s.again = false;
                continue;
            }
            s.running = false;
            break;
        }
    }
}

impl Drop for Kicker {
    fn drop(&mut self) {
        if let Ok(mut s) = self.state.lock() {
            s.stop = true;
        }
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
