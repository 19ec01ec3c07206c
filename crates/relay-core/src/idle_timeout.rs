//! PostgreSQL 18's `idle_replication_slot_timeout`: when the relay must hold its slot itself,
//! and when to warn that the timeout is too short.
//!
//! Invariant: a running relay never lets its own slot go idle past the timeout. The server
//! invalidates a slot that no replication connection used for longer than the timeout (checked
//! at each checkpoint), and the relay lets its connection go on purpose: under back-pressure
//! (`relay.backpressure_release_ms`, or at once when WAL is at risk) and between the attempts
//! of a Kafka outage. So while nothing streams, the slot keeper acquires the slot (a
//! replication connection that starts and closes, reading and confirming nothing) once it has
//! been idle for half the timeout, checking four times per timeout. A stopped relay cannot do
//! that: the warning says how to size the timeout against planned downtime.

use std::time::Duration;

/// The shortest timeout the keeper can hold a slot against: one check, one connection and
/// the server's own checkpoint cadence need some seconds.
pub const SHORTEST_HELD: Duration = Duration::from_secs(4);

/// How often the keeper looks at the slot under `timeout` (`None`: the setting is off or
/// absent, look again in a minute in case it is turned on).
pub fn check_every(timeout: Option<Duration>) -> Duration {
    match timeout.filter(|t| !t.is_zero()) {
        Some(t) => (t / 4).clamp(Duration::from_millis(250), Duration::from_secs(30)),
        None => Duration::from_secs(60),
    }
}

/// Whether the keeper must acquire the slot now: the timeout is on, no connection holds the
/// slot, and it has been idle for at least half the timeout.
pub fn hold_due(timeout: Option<Duration>, active: bool, idle: Option<Duration>) -> bool {
    match (timeout.filter(|t| !t.is_zero()), idle) {
        (Some(t), Some(idle)) => !active && idle >= t / 2,
        _ => false,
    }
}

/// The warning `setup` and `run` log for a timeout that is on (`None` when it is off).
pub fn warning(timeout: Duration) -> Option<String> {
    if timeout.is_zero() {
        return None;
    }
    let secs = timeout.as_secs();
    let short = if timeout < SHORTEST_HELD {
        format!(
            " It is shorter than the {} s the relay needs to hold its slot while Kafka is \
             down or back-pressure released the connection; raise it.",
            SHORTEST_HELD.as_secs()
        )
    } else {
        String::new()
    };
    Some(format!(
        "idle_replication_slot_timeout is {secs} s: PostgreSQL invalidates the slot when no \
         connection uses it for longer (at the next checkpoint). A running relay holds its slot \
         itself; a relay stopped or down for longer than {secs} s plus checkpoint_timeout loses \
         it and every event committed meanwhile.{short} Size it above your longest planned \
         downtime, or set it to 0 (docs/operations.md, \"PostgreSQL 18: \
         idle_replication_slot_timeout\")."
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn examples() {
        let t = Some(Duration::from_secs(8));
        assert_eq!(check_every(t), Duration::from_secs(2));
        assert_eq!(
            check_every(Some(Duration::from_secs(1))),
            Duration::from_millis(250)
        );
        assert_eq!(
            check_every(Some(Duration::from_secs(86_400))),
            Duration::from_secs(30)
        );
        assert_eq!(check_every(None), Duration::from_secs(60));
        assert_eq!(check_every(Some(Duration::ZERO)), Duration::from_secs(60));
        assert!(!hold_due(t, false, Some(Duration::from_secs(3))));
        assert!(hold_due(t, false, Some(Duration::from_secs(4))));
        assert!(!hold_due(t, true, None), "streamed: inactive_since is NULL");
        assert!(
            !hold_due(None, false, Some(Duration::from_secs(1_000))),
            "off"
        );
        assert!(!hold_due(
            Some(Duration::ZERO),
            false,
            Some(Duration::from_secs(9))
        ));
        assert_eq!(warning(Duration::ZERO), None);
        let w = warning(Duration::from_secs(1)).unwrap();
        assert!(
            w.contains("is 1 s") && w.contains("shorter than the 4 s"),
            "{w}"
        );
        let w = warning(Duration::from_secs(3600)).unwrap();
        assert!(
            w.contains("planned downtime") && !w.contains("shorter"),
            "{w}"
        );
    }

    proptest! {
        /// Checked every `check_every` and held once idle for half the timeout, a slot is
        /// held before the timeout runs out, for every timeout the keeper can hold against,
        /// whatever the phase of the checks (a hold takes `hold_cost`, under a second).
        #[test]
        fn held_before_the_timeout_runs_out(
            secs in SHORTEST_HELD.as_secs()..200_000u64, phase in 0.0f64..1.0, hold_ms in 0u64..1_000,
        ) {
            let timeout = Duration::from_secs(secs);
            let every = check_every(Some(timeout));
            // Idle since 0; checks at phase*every, phase*every + every, ...
            let mut at = every.mul_f64(phase);
            loop {
                if hold_due(Some(timeout), false, Some(at)) {
                    let held_at = at + Duration::from_millis(hold_ms);
                    prop_assert!(held_at < timeout, "held at {held_at:?} of {timeout:?}");
                    break;
                }
                at += every;
                prop_assert!(at < timeout * 2, "never held");
            }
        }
    }
}
