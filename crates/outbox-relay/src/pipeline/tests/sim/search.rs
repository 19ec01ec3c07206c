//! The searches: many seeds of both delivery modes without a bug (the test command runs 200;
//! `SIM_SEEDS` sets the count, `SIM_SEED` replays one with its steps printed, `SIM_FOR_SECS`
//! runs seeds from `SIM_FIRST` on for that long: scripts/simulate.sh), and each deliberate bug
//! until a seed catches it.

use super::{Bug, schedule};
use crate::pipeline::deliberate::Bug::{
    CheckpointBeyondAcks, CommitBeforeSettled, ConfirmBeforeAck, ForgetSplitPoint,
    ResumeFromCheckpoint, SkipOneTooMany, SuspectDeadLettered,
};

/// Odd seeds run at-least-once, even ones exactly-once.
fn mode(seed: u64) -> bool {
    seed.is_multiple_of(2)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn simulated_fault_schedules_lose_nothing_and_keep_order() {
    let first = env_u64("SIM_SEED").or(env_u64("SIM_FIRST")).unwrap_or(1);
    let (seeds, until): (Box<dyn Iterator<Item = u64>>, _) =
        match (env_u64("SIM_SEED"), env_u64("SIM_FOR_SECS")) {
            (Some(seed), _) => (Box::new(std::iter::once(seed)), None),
            (None, Some(secs)) => (
                Box::new(first..),
                Some(std::time::Instant::now() + std::time::Duration::from_secs(secs)),
            ),
            (None, None) => (
                Box::new(first..first + env_u64("SIM_SEEDS").unwrap_or(200)),
                None,
            ),
        };
    let replay = env_u64("SIM_SEED").is_some();
    let (wall, mut ran) = (std::time::Instant::now(), 0u64);
    let mut failed = Vec::new();
    let kinds = [
        "relay: streams",
        "relay: kill -9",
        "relay: SIGTERM",
        "relay: restarts on",
        "postgres: crash",
        "postgres: the connection drops",
        "postgres: checkpoint",
        "kafka: partition",
        "kafka: the next commit fails",
        "postgres: logical messages",
        "relay: kafka.max_transaction_records",
        "postgres: the relay's host is cut off",
        "kafka: refuses",
        "postgres: the relay reads a standby",
    ];
    let mut counts = [0usize; 14];
    for seed in seeds {
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            break;
        }
        ran += 1;
        let (violations, steps) = schedule(seed, mode(seed), Bug::None).await;
        for step in &steps {
            for (n, kind) in counts.iter_mut().zip(kinds) {
                *n += usize::from(step.starts_with(kind));
            }
        }
        if replay {
            println!(
                "seed {seed}: {} steps\n  {}",
                steps.len(),
                steps.join("\n  ")
            );
        }
        if !violations.is_empty() {
            println!(
                "seed {seed} FAILED (replay: SIM_SEED={seed} cargo test -p outbox-relay --lib \
                 sim -- --nocapture):\n  {}\nschedule:\n  {}",
                violations.join("\n  "),
                steps.join("\n  ")
            );
            failed.push(seed);
        }
    }
    let summary: Vec<String> = kinds
        .iter()
        .zip(counts)
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    let secs = wall.elapsed().as_secs_f64();
    println!(
        "{ran} schedules (seeds {first}..{}) in {secs:.0} s, {:.0} per minute; {}",
        first + ran.saturating_sub(1),
        ran as f64 * 60.0 / secs.max(1e-9),
        summary.join(", ")
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

/// A seed is a schedule: played twice, the same steps and the same findings. Nothing outside
/// the seed may choose (a `tokio::select!` without `biased`, the order of a `HashMap`, the wall
/// clock): exactly-once poison schedules did not replay until the pipeline's last two
/// unbiased selects were biased (docs/reliability.md, the simulation).
#[tokio::test(start_paused = true)]
async fn a_seed_plays_the_same_schedule_every_time() {
    for seed in (1..=64).chain(ONCE_FAILED) {
        let first = schedule(seed, mode(seed), Bug::None).await;
        let second = schedule(seed, mode(seed), Bug::None).await;
        assert!(first == second, "seed {seed} played differently twice");
    }
}

/// Seeds that once found a bug, played in every run whatever the search's range: exactly-once
/// poison schedules where a stop cut short the wait for a suspect's report (the suspect's
/// record then committed without its checkpoint naming it, and was sent again: visible twice).
const ONCE_FAILED: [u64; 7] = [5480, 8812, 9760, 12782, 15014, 18208, 18536];

#[tokio::test(start_paused = true)]
async fn the_seeds_that_once_found_a_bug_pass() {
    for seed in ONCE_FAILED {
        let (violations, steps) = schedule(seed, mode(seed), Bug::None).await;
        assert!(
            violations.is_empty(),
            "seed {seed}: {violations:?}\nschedule:\n  {}",
            steps.join("\n  ")
        );
    }
}

/// Each deliberate bug is caught, and within how many schedules (printed; the list).
#[tokio::test(start_paused = true)]
async fn each_deliberate_bug_is_caught_within_a_few_hundred_schedules() {
    for (bug, exactly_once) in [
        (Bug::ImplicitAckTaken, false),
        (Bug::NoHeadRule, false),
        (Bug::ConfirmAhead, false),
        (Bug::ConfirmAhead, true),
        (Bug::NoSkip, true),
        (Bug::ReadBeforeFence, true),
        (Bug::Pipeline(ConfirmBeforeAck), false),
        (Bug::Pipeline(ConfirmBeforeAck), true),
        (Bug::Pipeline(SkipOneTooMany), true),
        (Bug::Pipeline(CheckpointBeyondAcks), false),
        (Bug::Pipeline(CommitBeforeSettled), true),
        (Bug::Pipeline(SuspectDeadLettered), false),
        (Bug::Pipeline(SuspectDeadLettered), true),
        (Bug::Pipeline(ForgetSplitPoint), true),
    ] {
        catch(bug, exactly_once).await;
    }
}

/// The deliberate bug that takes the longest to catch: seed 78 since exactly-once poison
/// schedules play by default (a run that makes no progress; about 8 s in a debug build); seed 33
/// when purge reports joined the model; seed 50 with split
/// transactions, seed 84 before.
#[tokio::test(start_paused = true)]
async fn a_start_from_the_checkpoint_instead_of_the_slot_is_caught() {
    catch(Bug::Pipeline(ResumeFromCheckpoint), true).await;
}

/// Runs seeds with `bug` until one catches it (at most 500); prints which and how.
async fn catch(bug: Bug, exactly_once: bool) {
    let mut caught = None;
    let wall = std::time::Instant::now();
    for seed in 1..=500 {
        // A bug may also trip one of the pipeline's own assertions: caught too.
        let violations = match tokio::spawn(schedule(seed, exactly_once, bug)).await {
            Ok((violations, _)) => violations,
            Err(e) => vec![format!("the pipeline panicked: {e}")],
        };
        if let Some(first) = violations.first() {
            caught = Some((seed, first.clone()));
            break;
        }
    }
    let mode = if exactly_once {
        "exactly-once"
    } else {
        "at-least-once"
    };
    let (seed, what) =
        caught.unwrap_or_else(|| panic!("{bug:?} ({mode}) not caught in 500 schedules"));
    println!(
        "{bug:?} ({mode}): caught by seed {seed} in {:.1} s: {what}",
        wall.elapsed().as_secs_f64()
    );
}
