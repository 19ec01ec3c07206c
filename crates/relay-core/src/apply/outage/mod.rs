//! What the applier says while its broker (or its database) is away: librdkafka reports every
//! failed reconnect (several a second for a whole outage), every partition retries its own
//! connection to the database, and a line per report buries the log. The rule: one line when
//! the server goes, a reminder every [`REMIND_EVERY`] while it stays away, one line
//! when it is back; the errors in between are counted, not logged.
//!
//! ```text
//! connectivity errors, signs of life (a record, a broker UP) ──Outage──▶ Down / Still / Back
//! ```

use std::time::Duration;

/// How often an outage that lasts is mentioned again.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// A line to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The broker went away (this error is the first).
    Down,
    /// Still away since `for_`, with `errors` reports since the outage began.
    Still { for_: Duration, errors: u64 },
    /// Back after `after`, with `errors` reports during the outage.
    Back { after: Duration, errors: u64 },
}

/// The broker connection's state as the log tells it. Times are since any fixed instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outage {
    /// `Some((since, last said, errors))` while away.
    away: Option<(Duration, Duration, u64)>,
}

impl Outage {
    /// A connectivity error at `now`: [`Say::Down`] for the first, [`Say::Still`] once per
    /// [`REMIND_EVERY`], nothing otherwise.
    pub fn error(&mut self, now: Duration) -> Option<Say> {
        match &mut self.away {
            None => {
                self.away = Some((now, now, 1));
                Some(Say::Down)
            }
            Some((since, said, errors)) => {
                *errors += 1;
                (now.saturating_sub(*said) >= REMIND_EVERY).then(|| {
                    *said = now;
                    Say::Still {
                        for_: now.saturating_sub(*since),
                        errors: *errors,
                    }
                })
            }
        }
    }

    /// A sign that the broker is reachable at `now` (a record read, a broker up in the
    /// statistics): [`Say::Back`] if it was away.
    pub fn up(&mut self, now: Duration) -> Option<Say> {
        self.away.take().map(|(since, _, errors)| Say::Back {
            after: now.saturating_sub(since),
            errors,
        })
    }

    /// Whether the broker is away as far as this rule knows.
    pub fn is_away(&self) -> bool {
        self.away.is_some()
    }
}

#[cfg(test)]
mod tests;
