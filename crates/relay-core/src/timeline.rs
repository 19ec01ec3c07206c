//! Timelines and the failover rule.
//!
//! Invariant: the relay follows a server only if that server's WAL history contains every
//! transaction the relay has already handed to Kafka.
//!
//! Why: a promoted standby starts a new timeline at its *switch point*, the end of the WAL it had
//! replayed. WAL before that point is shared with the old primary. WAL after it on the old
//! timeline (commits the standby never received, under asynchronous replication) does not exist
//! on the new server, which reuses those LSNs for other transactions. An event published from
//! there is in Kafka while its transaction is gone from the database; streaming on would mix two
//! histories without anyone noticing. The check needs only the timeline the relay streamed from,
//! the commit LSN of the last transaction it published, and the new timeline's history file
//! (`TIMELINE_HISTORY`).

use std::fmt;

use crate::Lsn;

/// One line of a history file: `timeline` ended at `switch_point`, where its child began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    pub timeline: u32,
    pub switch_point: Lsn,
}

/// The ancestry of a timeline, oldest first, as PostgreSQL's `NNNNNNNN.history` file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    /// The timeline this history leads to.
    pub timeline: u32,
    pub ancestors: Vec<Branch>,
}

/// The history file could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("timeline history file of timeline {timeline}, line {line}: {problem}")]
pub struct HistoryError {
    pub timeline: u32,
    pub line: usize,
    pub problem: String,
}

impl History {
    /// Timeline 1 has no ancestors and no history file.
    pub fn root() -> History {
        History {
            timeline: 1,
            ancestors: Vec::new(),
        }
    }

    /// Parses a history file: lines `parent<TAB>X/Y<TAB>reason`, `#` comments and blank lines.
    /// Parent timelines must increase and stay below `timeline`, as PostgreSQL requires.
    pub fn parse(timeline: u32, content: &str) -> Result<History, HistoryError> {
        let mut ancestors: Vec<Branch> = Vec::new();
        for (i, raw) in content.lines().enumerate() {
            let err = |problem: String| HistoryError {
                timeline,
                line: i + 1,
                problem,
            };
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let parent: u32 = fields
                .next()
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| err(format!("expected a timeline number in {raw:?}")))?;
            let switch_point: Lsn = fields
                .next()
                .ok_or_else(|| {
                    err(format!(
                        "expected a switch point after the timeline in {raw:?}"
                    ))
                })?
                .parse()
                .map_err(|e| err(format!("{e}")))?;
            if parent >= timeline || ancestors.last().is_some_and(|b| b.timeline >= parent) {
                return Err(err(format!(
                    "timeline {parent} out of order (timelines must increase and stay below {timeline})"
                )));
            }
            if ancestors
                .last()
                .is_some_and(|b| b.switch_point > switch_point)
            {
                return Err(err(format!("switch point {switch_point} goes backwards")));
            }
            ancestors.push(Branch {
                timeline: parent,
                switch_point,
            });
        }
        Ok(History {
            timeline,
            ancestors,
        })
    }

    /// Where this history left `timeline`: WAL before it is shared with that timeline. `None`
    /// if `timeline` is not an ancestor.
    pub fn fork_point(&self, timeline: u32) -> Option<Lsn> {
        self.ancestors
            .iter()
            .find(|b| b.timeline == timeline)
            .map(|b| b.switch_point)
    }
}

/// A server the relay may follow after a timeline change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Follow {
    /// Where the server's history left the timeline the relay streamed from.
    pub fork: Lsn,
}

/// Why a server's history cannot be followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Divergence {
    /// The server's timeline does not descend from the one the relay streamed from: an old
    /// primary came back, or a standby promoted on another branch.
    NotDescendant { streamed: u32, server: u32 },
    /// The server forked from the relay's timeline before the last published commit.
    LostPublished {
        streamed: u32,
        server: u32,
        fork: Lsn,
        published: Lsn,
    },
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Divergence::NotDescendant { streamed, server } => write!(
                f,
                "the server is on timeline {server}, whose history does not contain timeline \
                 {streamed} that this relay streamed from (an old primary came back, or a \
                 standby was promoted on another branch)"
            ),
            Divergence::LostPublished {
                streamed,
                server,
                fork,
                published,
            } => write!(
                f,
                "the server is on timeline {server}, which left timeline {streamed} at {fork}, \
                 but this relay already published events of transactions committed on timeline \
                 {streamed} up to {published}: the transactions from {fork} to {published} were \
                 lost in the failover (asynchronous replication) and are in Kafka but not in \
                 the database"
            ),
        }
    }
}

/// Decides whether a server on history `server` may be followed by a relay that streamed from
/// timeline `streamed` and handed to Kafka transactions whose commit records start at or before
/// `published` (`Lsn::ZERO`: nothing yet).
///
/// A commit whose record starts before the switch point ends before it too (the switch point
/// is the end of a WAL record), so it is in the shared history.
pub fn follow(streamed: u32, published: Lsn, server: &History) -> Result<Follow, Divergence> {
    if server.timeline == streamed {
        return Ok(Follow {
            fork: Lsn(u64::MAX),
        });
    }
    let Some(fork) = server.fork_point(streamed) else {
        return Err(Divergence::NotDescendant {
            streamed,
            server: server.timeline,
        });
    };
    if !published.is_zero() && published >= fork {
        return Err(Divergence::LostPublished {
            streamed,
            server: server.timeline,
            fork,
            published,
        });
    }
    Ok(Follow { fork })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    // As written by a PostgreSQL 15 promotion.
    const TL3: &str = "1\t0/3000060\tno recovery target specified\n\n\
                       2\t0/5000148\tno recovery target specified\n";

    #[test]
    fn parses_a_real_history_file() {
        let h = History::parse(3, TL3).unwrap();
        assert_eq!(h.fork_point(1), Some(Lsn(0x300_0060)));
        assert_eq!(h.fork_point(2), Some(Lsn(0x500_0148)));
        assert_eq!(h.fork_point(3), None);
        assert_eq!(History::parse(2, "# comment\n").unwrap().ancestors, vec![]);
    }

    #[test]
    fn rejects_malformed_lines() {
        for bad in [
            "x\t0/1\treason",
            "1",
            "1\tnope\treason",
            "2\t0/1\tr\n1\t0/2\tr",
            "1\t0/5\tr\n2\t0/4\tr",
            "3\t0/1\tr",
        ] {
            let e = History::parse(3, bad).unwrap_err();
            assert_eq!(e.timeline, 3, "{bad:?}");
        }
    }

    #[test]
    fn follows_a_promotion_after_everything_published() {
        let h = History::parse(2, "1\t0/5000148\tr").unwrap();
        let ok = follow(1, Lsn(0x500_0147), &h).unwrap();
        assert_eq!(ok.fork, Lsn(0x500_0148));
        assert!(follow(1, Lsn::ZERO, &h).is_ok());
        // several promotions since the relay last streamed
        assert!(follow(1, Lsn(0x300_005F), &History::parse(3, TL3).unwrap()).is_ok());
    }

    #[test]
    fn refuses_a_history_that_lost_published_commits() {
        let h = History::parse(2, "1\t0/5000148\tr").unwrap();
        let e = follow(1, Lsn(0x500_0148), &h).unwrap_err();
        assert!(matches!(e, Divergence::LostPublished { fork, .. } if fork == Lsn(0x500_0148)));
        assert!(e.to_string().contains("0/5000148"), "{e}");
        // lost on the first branch even though the second branch is later
        assert!(follow(1, Lsn(0x400_0000), &History::parse(3, TL3).unwrap()).is_err());
    }

    #[test]
    fn refuses_an_old_primary_or_a_sibling_branch() {
        assert_eq!(
            follow(2, Lsn::ZERO, &History::root()),
            Err(Divergence::NotDescendant {
                streamed: 2,
                server: 1
            })
        );
        // timeline 4 branched from 1, not from 3
        let sibling = History::parse(4, "1\t0/3000060\tr").unwrap();
        assert!(matches!(
            follow(3, Lsn::ZERO, &sibling),
            Err(Divergence::NotDescendant { .. })
        ));
    }

    proptest! {
        /// Following is allowed exactly when every published commit precedes the fork point.
        #[test]
        fn follow_iff_published_before_fork(
            switch in proptest::collection::vec(1u64..1 << 40, 1..5),
            pick in 0usize..5,
            published in 0u64..1 << 41,
        ) {
            let mut switch = switch;
            switch.sort_unstable();
            let text: String = switch
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{}\t{}\treason\n", i + 1, Lsn(*s)))
                .collect();
            let server = switch.len() as u32 + 1;
            let h = History::parse(server, &text).unwrap();
            let streamed = (pick % switch.len()) as u32 + 1;
            let fork = switch[streamed as usize - 1];
            let verdict = follow(streamed, Lsn(published), &h);
            prop_assert_eq!(verdict.is_ok(), published == 0 || published < fork);
            prop_assert!(follow(server, Lsn(published), &h).is_ok());
        }
    }
}
