//! Deliberate bugs for the simulation (issue 43, "teeth"): switches that exist only in test
//! builds, each breaking one rule of the pipeline where the rule lives, so that the simulation
//! (`pipeline/tests/sim`) shows it catches the break and after how many seeds. In a release or
//! debug build of the relay [`on`] is `false` and compiles away: nothing in the production path
//! depends on the simulation. Thread-local: a schedule runs on its test's own thread.

/// A rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Bug {
    /// The status update names what was read, not what Kafka acknowledged.
    ConfirmBeforeAck,
    /// After a restart the checkpoint's skip passes one change more than it names.
    SkipOneTooMany,
    /// The next Kafka commit starts before the running one settled.
    CommitBeforeSettled,
    /// A start takes the checkpoint's position as the stream's start instead of the slot's.
    ResumeFromCheckpoint,
    /// A record Kafka refused in a batch is dead-lettered at once, without being sent alone.
    SuspectDeadLettered,
    /// A checkpoint names whole source transactions only: where a Kafka transaction ends in
    /// the middle of one (`kafka.max_transaction_records`), the split point is forgotten.
    ForgetSplitPoint,
    /// Without Kafka transactions a checkpoint covers what was read, not what Kafka
    /// acknowledged (a restart then skips what was in flight).
    CheckpointBeyondAcks,
}

#[cfg(test)]
thread_local! {
    static ON: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Whether `bug` is switched on (only ever in a test).
pub(crate) fn on(bug: Bug) -> bool {
    #[cfg(test)]
    {
        ON.with(|b| b.get() == Some(bug))
    }
    #[cfg(not(test))]
    {
        let _ = bug;
        false
    }
}

/// Switches `bug` on for this thread (`None`: none).
#[cfg(test)]
pub(crate) fn set(bug: Option<Bug>) {
    ON.with(|b| b.set(bug));
}
