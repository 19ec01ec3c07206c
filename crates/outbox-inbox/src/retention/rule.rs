//! When may inbox rows older than some retention be deleted?
//!
//! Invariant: an inbox row is kept at least as long as its event can be delivered again. A
//! consumer group reset to the earliest offset (or a new consumer group) receives every record
//! the topic still holds; if the inbox row of one of them was deleted, that event is applied a
//! second time. Kafka deletes a segment only once its NEWEST record is older than `retention.ms`,
//! and a segment stays open for up to `segment.ms`, so a record can still be read up to
//! `retention.ms + segment.ms` after it was written (plus the broker's retention check interval,
//! `log.retention.check.interval.ms`, 5 minutes by default: [`CHECK_INTERVAL_MARGIN`]). An inbox
//! row is written after its record (`processed_at` >= the record's time), so keeping rows for
//! that long covers every record a replay can return. A topic with `retention.ms = -1` or
//! `cleanup.policy` containing `compact` keeps records without a time bound: no retention is
//! safe unless the operator states the replay window they guarantee (e.g. "we never reset
//! offsets beyond 30 days").

use std::time::Duration;

/// Margin for Kafka's `log.retention.check.interval.ms` (broker-wide, default 5 minutes).
pub const CHECK_INTERVAL_MARGIN: Duration = Duration::from_secs(300);

/// A topic's settings that bound how old a replayed record can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRetention {
    pub topic: String,
    /// `retention.ms`; negative = forever.
    pub retention_ms: i64,
    /// `segment.ms`.
    pub segment_ms: i64,
    /// `cleanup.policy` contains `compact`.
    pub compacted: bool,
}

impl TopicRetention {
    /// How long after it was written a record may still be read; `None` = no bound.
    pub fn replay_bound(&self) -> Option<Duration> {
        if self.compacted || self.retention_ms < 0 {
            return None;
        }
        let ms = self.retention_ms.saturating_add(self.segment_ms.max(0)) as u64;
        Some(Duration::from_millis(ms) + CHECK_INTERVAL_MARGIN)
    }
}

/// Permission to delete inbox rows older than [`retention`](Allowed::retention); only
/// [`decide`] makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    retention: Duration,
}

impl Allowed {
    pub fn retention(&self) -> Duration {
        self.retention
    }
}

/// Why a retention was refused; each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "no topic given: the inbox retention is checked against the topics the consumer reads; \
         name them all"
    )]
    NoTopics,
    #[error(
        "refusing to delete inbox rows older than {retention:?}: topic {topic:?} can replay a \
         record up to {bound:?} after it was written (retention.ms + segment.ms + 5 min), and an \
         event whose inbox row is gone would be applied again after an offset reset. Keep inbox \
         rows at least {bound:?}, or lower the topic's retention.ms/segment.ms"
    )]
    ShorterThanTopic {
        topic: String,
        retention: Duration,
        bound: Duration,
    },
    #[error(
        "refusing any time-based deletion of inbox rows: topic {topic:?} keeps records without a \
         time bound ({why}), so any record may be replayed. State the replay window you guarantee \
         (the oldest record you would ever re-consume) explicitly, or keep the inbox rows"
    )]
    Unbounded { topic: String, why: &'static str },
    #[error(
        "refusing to delete inbox rows older than {retention:?}: the stated replay window is \
         {window:?}; keep inbox rows at least that long"
    )]
    ShorterThanWindow {
        retention: Duration,
        window: Duration,
    },
}

impl Refusal {
    /// The shortest retention that would be allowed, when there is one.
    pub fn minimum(&self) -> Option<Duration> {
        match self {
            Refusal::ShorterThanTopic { bound, .. } => Some(*bound),
            Refusal::ShorterThanWindow { window, .. } => Some(*window),
            Refusal::NoTopics | Refusal::Unbounded { .. } => None,
        }
    }
}

/// May inbox rows older than `retention` be deleted, for a consumer of `topics`? `window` is
/// the replay window the operator states explicitly: required for unbounded topics, and for
/// bounded ones it can only raise the bar (a replay goes back as far as the topic allows).
pub fn decide(
    retention: Duration,
    topics: &[TopicRetention],
    window: Option<Duration>,
) -> Result<Allowed, Refusal> {
    if topics.is_empty() {
        return Err(Refusal::NoTopics);
    }
    for t in topics {
        match t.replay_bound() {
            Some(bound) if retention < bound => {
                return Err(Refusal::ShorterThanTopic {
                    topic: t.topic.clone(),
                    retention,
                    bound,
                });
            }
            Some(_) => {}
            None if window.is_none() => {
                return Err(Refusal::Unbounded {
                    topic: t.topic.clone(),
                    why: if t.compacted {
                        "cleanup.policy contains compact"
                    } else {
                        "retention.ms = -1"
                    },
                });
            }
            None => {}
        }
    }
    if let Some(window) = window
        && retention < window
    {
        return Err(Refusal::ShorterThanWindow { retention, window });
    }
    Ok(Allowed { retention })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn topic() -> impl Strategy<Value = TopicRetention> {
        (
            prop_oneof![Just(-1i64), 0i64..10_000_000],
            0i64..10_000_000,
            any::<bool>(),
        )
            .prop_map(|(retention_ms, segment_ms, compacted)| TopicRetention {
                topic: "t".into(),
                retention_ms,
                segment_ms,
                compacted,
            })
    }

    fn ms() -> impl Strategy<Value = Duration> {
        (0u64..30_000_000).prop_map(Duration::from_millis)
    }

    proptest! {
        /// An allowed retention covers every record any of the topics can replay, and the
        /// stated window.
        #[test]
        fn allowed_covers_every_replay(
            topics in prop::collection::vec(topic(), 0..4),
            retention in ms(),
            window in prop::option::of(ms()),
        ) {
            if let Ok(a) = decide(retention, &topics, window) {
                prop_assert!(!topics.is_empty());
                for t in &topics {
                    match t.replay_bound() {
                        Some(b) => prop_assert!(a.retention() >= b),
                        None => prop_assert!(window.is_some()),
                    }
                    prop_assert!(
                        t.compacted || t.retention_ms < 0
                            || a.retention() >= Duration::from_millis(t.retention_ms as u64)
                    );
                }
                if let Some(w) = window {
                    prop_assert!(a.retention() >= w);
                }
            }
        }

        /// Keeping rows longer is never refused when keeping them shorter was allowed.
        #[test]
        fn longer_retention_stays_allowed(
            topics in prop::collection::vec(topic(), 1..4),
            retention in ms(),
            extra in ms(),
            window in prop::option::of(ms()),
        ) {
            if decide(retention, &topics, window).is_ok() {
                prop_assert!(decide(retention + extra, &topics, window).is_ok());
            }
        }

        /// An unbounded topic without a stated window refuses every retention.
        #[test]
        fn unbounded_needs_a_window(
            mut topics in prop::collection::vec(topic(), 1..4),
            retention in ms(),
            compacted in any::<bool>(),
        ) {
            if compacted { topics[0].compacted = true } else { topics[0].retention_ms = -1 }
            let refused = decide(retention, &topics, None);
            prop_assert!(refused.is_err());
        }

        /// The minimum a refusal names is enough on that count: following the advice either
        /// passes or fails for another topic, never for the same reason and bound again.
        #[test]
        fn the_named_minimum_fixes_that_refusal(
            topics in prop::collection::vec(topic(), 1..4),
            retention in ms(),
            window in prop::option::of(ms()),
        ) {
            if let Err(r) = decide(retention, &topics, window)
                && let Some(min) = r.minimum()
            {
                prop_assert!(min > retention);
                match decide(min, &topics, window) {
                    Ok(a) => prop_assert_eq!(a.retention(), min),
                    Err(again) => prop_assert_ne!(again, r),
                }
            }
        }
    }

    #[test]
    fn a_week_topic_needs_two_weeks_and_the_margin() {
        let week = 7 * 24 * 3600 * 1000;
        let t = TopicRetention {
            topic: "orders".into(),
            retention_ms: week,
            segment_ms: week,
            compacted: false,
        };
        let two_weeks = Duration::from_millis(2 * week as u64);
        assert!(matches!(
            decide(two_weeks, std::slice::from_ref(&t), None),
            Err(Refusal::ShorterThanTopic { .. })
        ));
        assert!(decide(two_weeks + CHECK_INTERVAL_MARGIN, &[t], None).is_ok());
    }
}
