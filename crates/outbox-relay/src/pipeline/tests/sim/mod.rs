//! A deterministic simulation of the relay's loop (issue 43, first part): the real pipeline,
//! restarted as the supervisor restarts it, against a model of PostgreSQL (a WAL of
//! transactions, a slot whose confirmed position becomes durable only at a checkpoint and is
//! rewound by a crash, a replication connection that can drop) and of Kafka (partitions that
//! acknowledge in their own order and at their own pace, transient refusals, records in flight
//! at a kill -9 that the broker may or may not have stored), on tokio's paused clock. Every
//! choice comes from one seeded generator, so a seed is a schedule and replays identically.
//!
//! Invariants, checked for every schedule:
//! * never a confirmed position ahead of what Kafka holds (checked at every status update:
//!   every row of every transaction that ends at or before it is stored);
//! * nothing lost: every committed row is stored once the last (fault-free) run has confirmed
//!   the end of the WAL;
//! * per-key order: the first occurrences of a key's rows are in commit order (duplicates
//!   from the unconfirmed window come after, at-least-once);
//! * memory: never more records in flight than `relay.max_in_flight_records`.
//!
//! Run: `cargo test -p outbox-relay --lib sim`; `SIM_SEEDS=<n>` schedules (default 200),
//! `SIM_SEED=<seed>` replays one and prints its schedule. A failing seed prints itself and its
//! schedule as a list of steps; `SIM_TRACE=1` adds to them, exactly-once, what each run made
//! visible (the committed records and checkpoints).
//!
//! Both delivery modes: odd seeds at-least-once, even seeds exactly-once, where Kafka
//! transactions commit (or fail, or are left to the coordinator by a kill -9 mid-commit), only
//! committed records and checkpoints are visible, and a run starts from the newest committed
//! checkpoint's skip and trail as `checkpoints::start` reads them back; there the invariant is
//! also that nothing is visible twice to a read-committed reader.
//!
//! Seeds 4-7 of every 8 mix logical messages (`[[message]]`) into the transactions; exactly-once
//! seeds cap a Kafka transaction at 1, 2, 3 or 10,000 records (`kafka.max_transaction_records`),
//! so a source transaction is split over Kafka transactions and a start may resume in its middle.
//!
//! Seeds 16-31 of every 64, exactly-once, play a second instance taking over from one cut off
//! with a commit running (`takeover`).
//!
//! Exactly-once, a refusal purges the rest of its Kafka transaction (`kafka`).
//!
//! Seeds 32-47 of every 64 dead-letter events Kafka refuses for good (`poison`).
//!
//! Seeds 40-47 of every 64 have the producer refuse those events at once (too large).
//!
//! Seeds 48-63 of every 64 read from a standby that replays each transaction up to 300 ms
//! late: the stream goes quiet between transactions and keepalives report what it replayed.
//!
//! Not modelled yet (the real-stack tests cover them): promotions and timelines.

use std::collections::HashSet;

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::{
    memory::{MemorySink, MemoryView},
    paused::memory_config,
    *,
};
use crate::pipeline::state::Connection;

mod check;
mod checkpoints;
mod kafka;
mod poison;
mod postgres;
mod search;
mod takeover;
mod world;

use kafka::{drive, id};
use postgres::{SimSession, wal};
use world::World;

/// In-flight bound the schedules run with (small, so that back-pressure is exercised).
const MAX_IN_FLIGHT: usize = 6;
/// Faults per schedule at most; then the run is left to finish.
const MAX_FAULTS: usize = 6;

/// A deliberate bug, to show that the invariants catch what they are meant to catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// A delivery report of success for a record the broker did not store (librdkafka's
    /// implicit acknowledgement taken as delivery: issue 40 item 6 before 79d59a7).
    ImplicitAckTaken,
    /// The pipeline without its head rule (a partition's first record not sent alone: issue
    /// 40 item 7 before ffb31fd).
    NoHeadRule,
    /// The slot confirms what the relay asks plus the next transaction (a progress rule that
    /// runs ahead).
    ConfirmAhead,
    /// Exactly-once without the checkpoint's skip at a start (what the slot replays that Kafka
    /// already holds is sent again).
    NoSkip,
    /// A second instance reads the checkpoint back before it fences the first one's producer.
    ReadBeforeFence,
    /// A rule of the pipeline itself broken behind its test-only switch
    /// (`pipeline::deliberate`).
    Pipeline(crate::pipeline::deliberate::Bug),
}

/// How one run of the pipeline ended.
enum RunEnd {
    /// Stopped after everything was confirmed: the schedule is over.
    Done,
    /// A transient failure, a SIGTERM or a PostgreSQL crash: the supervisor starts it again.
    Restart { process_ended: bool },
    /// A definite error: never expected here (no fault of the model is definite).
    Definite(RelayError),
}

/// One run of the pipeline from the slot's position, as `stream` starts it.
async fn run_once(
    world: &Arc<World>,
    cfg: &Config,
    rng: &mut StdRng,
    faults: &mut usize,
    carry: &mut Carry,
) -> RunEnd {
    let start = world.pg.lock().unwrap().confirmed;
    let session = SimSession::new(world.clone(), start, rng, *faults < MAX_FAULTS);
    if session.drop_at.is_some() {
        *faults += 1;
    }
    world.step(format!("relay: streams from {start:#x}"));
    let (sink, mut reports, begun) = if world.exactly_once {
        let latency = Duration::from_millis(rng.random_range(0..50));
        let (sink, reports) = MemorySink::new(false, rng.random_bool(0.5), latency);
        let sink = poison::at_once(world, sink);
        // As `pipeline::stream`: fence the earlier holders, then read what Kafka holds.
        let begun = if world.bug == Bug::ReadBeforeFence {
            let begun = checkpoints::start_of(world, cfg, start, carry);
            takeover::fence(world, rng);
            begun
        } else {
            takeover::fence(world, rng);
            checkpoints::start_of(world, cfg, start, carry)
        };
        sink.fence_and_begin(Duration::from_secs(1)).await.unwrap();
        *world.view.lock().unwrap() = Some(sink.view());
        (sink, reports, begun)
    } else {
        let (sink, reports) = MemorySink::new(false, false, Duration::ZERO);
        let sink = poison::at_once(world, sink.at_heads());
        (
            sink,
            reports,
            checkpoints::start_of(world, cfg, start, carry),
        )
    };
    // A process's own health (a static shared with the other loop tests would make a schedule
    // depend on them).
    let health = crate::observe::health::Shared::new();
    let health = &health;
    let conn = Connection {
        client: session,
        start: begun,
        decoder: Decoder::new(&cfg.outbox, cfg.relay.relay_headers),
        memory: None,
    };
    let mut p = Pipeline::new(cfg, &sink, &mut reports, carry, health, conn);
    if world.bug == Bug::NoHeadRule {
        p.heads = None;
    }
    let (stop, mut shutdown) = watch::channel(false);
    let mut broken = HashSet::new();
    let mut killed = false;
    let mut contradicted = false;
    let ended = {
        let pipeline = async {
            match p.run(&mut shutdown).await {
                Ok(()) => p.drain(Duration::from_secs(5)).await,
                Err(e) => Err(e),
            }
        };
        let driver = drive(world, &sink, rng, faults, &stop, &mut broken);
        tokio::select! {
            biased;
            r = pipeline => match r {
                Ok(()) if *stop.borrow() => {
                    let pg = world.pg.lock().unwrap();
                    if pg.confirmed >= pg.tail {
                        RunEnd::Done
                    } else {
                        RunEnd::Restart { process_ended: true }
                    }
                }
                Ok(()) => RunEnd::Restart { process_ended: false },
                Err(e @ RelayError::Definite(_)) => RunEnd::Definite(e),
                Err(e) => {
                    world.step(format!("relay: restarts on {}", e.reason()));
                    // As `pipeline::stream`: at-least-once, the next start ignores a
                    // checkpoint the stream contradicted.
                    contradicted = matches!(
                        e,
                        RelayError::Transient(crate::error::Transient::CheckpointContradicted(_))
                    );
                    RunEnd::Restart { process_ended: false }
                }
            },
            k = driver => {
                killed = k;
                RunEnd::Restart { process_ended: k }
            }
        }
    };
    drop(p);
    carry.ignore_checkpoint = contradicted;
    if world.exactly_once {
        *world.view.lock().unwrap() = None;
        if std::mem::take(&mut *world.cut_off.lock().unwrap()) {
            takeover::leave_running(world, sink.view());
            return ended;
        }
        // The Kafka transactions that committed are visible; one whose commit had started may
        // have been committed by the coordinator too.
        let uncertain = rng.random_bool(0.5);
        make_visible(world, &sink.view(), uncertain);
        return ended;
    }
    // Records still in flight: the broker may have stored any prefix of each partition's,
    // none after a refusal.
    let sent = kafka::sent(&sink);
    let pending = sink.pending_origins();
    let mut log = world.log.lock().unwrap();
    for p in 0..kafka::LANES {
        let of_p: Vec<&(String, String)> = pending
            .iter()
            .map(|o| &sent[&id(o)])
            .filter(|kv| kafka::lane(kv) == p)
            .collect();
        if of_p.is_empty() || broken.contains(&p) {
            continue;
        }
        // Never past a record the broker refuses for good.
        let storable = of_p
            .iter()
            .position(|kv| poison::refused(world, &kv.1))
            .unwrap_or(of_p.len());
        let kept = rng.random_range(0..=of_p.len()).min(storable);
        if kept > 0 {
            world.step(format!(
                "kafka: partition {p} had stored {kept} of its {} in flight",
                of_p.len()
            ));
        }
        log.extend(of_p[..kept].iter().map(|kv| (*kv).clone()));
    }
    drop(log);
    checkpoints::store(world, &sink, killed);
    ended
}

/// The records and checkpoints of the Kafka transactions of `view` that committed (`uncertain`:
/// also one whose commit had started) become visible.
fn make_visible(world: &World, view: &MemoryView, uncertain: bool) {
    let (records, checkpoints) = view.committed(uncertain);
    if std::env::var_os("SIM_TRACE").is_some() {
        world.step(format!(
            "trace: visible (uncertain={uncertain}): {:?} checkpoints {:?}",
            records
                .iter()
                .map(|r| format!("{}:{}", r.topic, String::from_utf8_lossy(&r.value)))
                .collect::<Vec<_>>(),
            checkpoints
                .iter()
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
        ));
    }
    world.log.lock().unwrap().extend(
        records
            .iter()
            .map(|r| poison::stored(&r.topic, &r.key, &r.value)),
    );
    world.checkpoints.lock().unwrap().extend(checkpoints);
}

/// Plays schedule `seed`: its violations and its steps.
async fn schedule(seed: u64, exactly_once: bool, bug: Bug) -> (Vec<String>, Vec<String>) {
    crate::pipeline::deliberate::set(match bug {
        Bug::Pipeline(b) => Some(b),
        _ => None,
    });
    let mut rng = StdRng::seed_from_u64(seed);
    // Drawn from the seed alone (not from the generator), so that the schedules of seeds
    // without them stay what they were.
    let messages = !(seed / 4).is_multiple_of(2);
    let max_transaction_records = [10_000, 1, 2, 3][((seed / 2) % 4) as usize];
    let pg = wal(&mut rng);
    let refused = if poison::plays_in(seed) {
        poison::draw(&pg)
    } else {
        HashSet::new()
    };
    let world = Arc::new(World {
        bug,
        exactly_once,
        messages,
        checkpoints: Mutex::default(),
        checkpoint_draws: Mutex::new(StdRng::seed_from_u64(seed.rotate_left(32))),
        view: Mutex::default(),
        pg: Mutex::new(pg),
        log: Mutex::default(),
        violations: Mutex::default(),
        steps: Mutex::default(),
        second: Mutex::new(
            takeover::plays_in(seed, exactly_once).then(|| StdRng::seed_from_u64(!seed)),
        ),
        zombie: Mutex::default(),
        cut_off: Mutex::default(),
        poison_at_once: !refused.is_empty() && poison::refused_at_once_in(seed),
        standby: (seed / 16) % 4 == 3,
        poison: refused,
    });
    // Exactly-once: a source transaction larger than `kafka.max_transaction_records` is split
    // over Kafka transactions, each with its checkpoint (mid-transaction resumes).
    let transactions = if exactly_once {
        format!(
            "transactional_id = \"sim\"\ncheckpoint_topic = \"cp\"\n\
             max_transaction_records = {max_transaction_records}\n"
        )
    } else {
        "checkpoint_topic = \"cp\"\n".into()
    };
    let checkpoint_bytes = checkpoints::bytes_of(seed);
    if !exactly_once {
        world.step(format!(
            "relay: relay.checkpoint_bytes = {checkpoint_bytes}"
        ));
    }
    let sections = if messages {
        "[[outbox]]\ntable = \"public.outbox\"\n[[message]]\nprefix = \"outbox\"\n"
    } else {
        ""
    };
    let delivery = if exactly_once {
        "exactly-once"
    } else {
        "at-least-once"
    };
    let poison_policy = if world.poison.is_empty() {
        String::new()
    } else {
        world.step(format!(
            "kafka: refuses {} events {} (on_poison = dead-letter)",
            world.poison.len(),
            if world.poison_at_once {
                "at once, in the producer (too large)"
            } else {
                "for good on their topic"
            }
        ));
        format!(
            "on_poison = \"dead-letter\"\ndead_letter_topic = \"{}\"\n",
            poison::TOPIC
        )
    };
    let cfg = memory_config(&format!(
        "{transactions}[relay]\ndelivery = \"{delivery}\"\nmax_in_flight_records = {MAX_IN_FLIGHT}\n\
         checkpoint_bytes = {checkpoint_bytes}\n{poison_policy}{sections}"
    ));
    if exactly_once && max_transaction_records < 10_000 {
        world.step(format!(
            "relay: kafka.max_transaction_records = {max_transaction_records}"
        ));
    }
    if world.standby {
        world.step("postgres: the relay reads a standby that replays each transaction late".into());
    }
    let mut carry = Carry::default();
    let mut faults = 0;
    let mut done = false;
    // Each poison event takes up to two restarts of its own (refused in a batch, then alone),
    // more when a kill -9 makes the relay forget its suspects.
    let runs = 40 + 4 * world.poison.len();
    for _ in 0..runs {
        match run_once(&world, &cfg, &mut rng, &mut faults, &mut carry).await {
            RunEnd::Done => {
                done = true;
                break;
            }
            RunEnd::Restart { process_ended } => {
                if process_ended {
                    carry = Carry::default();
                }
            }
            RunEnd::Definite(e) => {
                world.violation(format!("stopped on a definite error: {e}"));
                break;
            }
        }
    }
    if !done && world.violations.lock().unwrap().is_empty() {
        world.violation(format!(
            "the WAL's end was not confirmed within {runs} runs"
        ));
    }
    check::delivery(&world);
    let v = world.violations.lock().unwrap().clone();
    let s = world.steps.lock().unwrap().clone();
    (v, s)
}
