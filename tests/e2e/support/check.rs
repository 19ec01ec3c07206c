//! Compares what was committed with what Kafka holds, and records the figures.

use std::{
    collections::{HashMap, HashSet},
    io::Write,
};

use super::{kafka::Rec, repo_root, writer::Written};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub written: usize,
    pub delivered: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub order_violations: usize,
    pub unexpected: usize,
}

/// Checks topic, key, value and the `id`/`eventType` headers of every record, and counts
/// lost, duplicated and out-of-order events. Order: per aggregate, the first delivery of each
/// event must come in sequence order (what a consumer deduplicating by id observes), and
/// within one partition a duplicate may only re-deliver a suffix (never reorder).
pub fn check(
    test: &str,
    topic_of: impl Fn(&str) -> String,
    written: &[Written],
    got: &[Rec],
) -> Figures {
    let by_id: HashMap<&str, &Written> = written.iter().map(|w| (w.id.as_str(), w)).collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut f = Figures {
        written: written.len(),
        delivered: got.len(),
        ..Default::default()
    };
    // Records in broker order per partition.
    let mut sorted: Vec<&Rec> = got.iter().collect();
    sorted.sort_by_key(|r| (r.topic.clone(), r.partition, r.offset));
    let mut last_seq: HashMap<&str, i32> = HashMap::new();
    for r in &sorted {
        let id = r.header("id");
        let Some(w) = by_id.get(id) else {
            f.unexpected += 1;
            continue;
        };
        assert_eq!(r.topic, topic_of(&w.aggregate_type), "topic of {id}");
        assert_eq!(r.key.as_deref(), Some(w.aggregate.as_str()), "key of {id}");
        assert_eq!(r.json(), w.payload, "value of {id}");
        assert_eq!(r.header("eventType"), "Event", "eventType header of {id}");
        assert!(
            r.header("outbox-relay.commit-lsn").contains('/'),
            "commit-lsn header of {id}"
        );
        let n = seen.entry(id).or_default();
        *n += 1;
        if *n > 1 {
            f.duplicated += 1;
            continue;
        }
        let last = last_seq.entry(w.aggregate.as_str()).or_insert(0);
        if w.seq != *last + 1 {
            f.order_violations += 1;
        }
        *last = w.seq;
    }
    f.lost = written
        .iter()
        .filter(|w| !seen.contains_key(w.id.as_str()))
        .count();
    record(test, &f);
    f
}

impl Figures {
    /// Every event delivered exactly once, in order, and nothing else.
    pub fn assert_exactly_once(&self, context: &str) {
        assert_eq!(
            (
                self.lost,
                self.duplicated,
                self.order_violations,
                self.unexpected
            ),
            (0, 0, 0, 0),
            "{self:?}\n{context}"
        );
    }

    /// At-least-once: nothing lost, out of order or unexpected; duplicates are the caller's to
    /// bound.
    pub fn assert_nothing_lost_or_reordered(&self, context: &str) {
        assert_eq!(
            (self.lost, self.order_violations, self.unexpected),
            (0, 0, 0),
            "{self:?}\n{context}"
        );
    }
}

/// For a failure's message: each lost event with the commit LSNs of the delivered events of
/// its aggregate just before and after it (its own commit lies between them), to be read
/// against the relay's log (slot start, checkpoint, confirmed positions).
pub fn explain_lost(written: &[Written], got: &[Rec]) -> String {
    let delivered: HashMap<&str, &str> = got
        .iter()
        .map(|r| (r.header("id"), r.header("outbox-relay.commit-lsn")))
        .collect();
    let mut by_agg: HashMap<&str, Vec<&Written>> = HashMap::new();
    for w in written {
        by_agg.entry(w.aggregate.as_str()).or_default().push(w);
    }
    let mut out = String::new();
    for events in by_agg.values_mut() {
        events.sort_by_key(|w| w.seq);
        for (i, w) in events.iter().enumerate() {
            if delivered.contains_key(w.id.as_str()) {
                continue;
            }
            let lsn = |w: &&Written| delivered.get(w.id.as_str()).copied();
            let before = events[..i].iter().rev().find_map(lsn).unwrap_or("-");
            let after = events[i + 1..].iter().find_map(lsn).unwrap_or("-");
            out.push_str(&format!(
                "lost {} ({} #{}): committed after {before}, before {after}\n",
                w.id, w.aggregate, w.seq
            ));
        }
    }
    out
}

/// Appends the figures of a test to `target/test-figures.log` (printed by scripts/test.sh).
pub fn record(test: &str, f: &Figures) {
    let mut pass = if super::fenced_pass() {
        "fenced/".to_string()
    } else {
        String::new()
    };
    // The version matrix (scripts/test-versions.sh): the figures of each server apart.
    if let Ok(major) = std::env::var("RELAY_TEST_PG_MAJOR") {
        pass = format!("pg{major}/{pass}");
    }
    note(&format!(
        "{pass}{test}: written={} delivered={} lost={} duplicated={} order_violations={} unexpected={}",
        f.written, f.delivered, f.lost, f.duplicated, f.order_violations, f.unexpected
    ));
}

/// Appends one measured line to `target/test-figures.log`.
pub fn note(line: &str) {
    let line = format!("{line}\n");
    eprint!("{line}");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(repo_root().join("target/test-figures.log"))
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Ids that must never appear (rolled back).
pub fn assert_absent(discarded: &[String], got: &[Rec]) {
    let bad: HashSet<&str> = discarded.iter().map(String::as_str).collect();
    for r in got {
        assert!(
            !bad.contains(r.header("id")),
            "rolled-back event {} reached Kafka",
            r.header("id")
        );
    }
}
