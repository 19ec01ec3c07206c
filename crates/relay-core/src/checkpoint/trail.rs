//! The trail: the last published change of each source transaction a checkpoint does not
//! cover yet, so that a checkpoint written at a given position names its `last`.
//!
//! Invariants:
//! - [`Trail::within`] names the last change of the transactions that end at or before the
//!   position, whenever the transactions before it were forgotten by
//!   [`Trail::acknowledged`]: forgetting early changes no answer, as long as the positions only
//!   grow (an acknowledged prefix does).
//! - The trail owns what it keeps: an event id sliced out of a replication message would keep
//!   that message's whole read buffer (4 KB, shared by the messages around it) alive for as
//!   long as the trail holds it, which in a catch-up of single-row transactions was ~15 MB.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{ChangeRef, Fingerprint};
use crate::Lsn;

#[derive(Debug, Default)]
pub struct Trail {
    /// What the checkpoint read at the start names.
    base: Option<ChangeRef>,
    /// The newest change of the transactions forgotten so far (named only when a checkpoint
    /// names it: rendering it for each transaction passed would cost a string each).
    passed: Option<Published>,
    /// Completed transactions with a published change: (end LSN, its last change).
    done: VecDeque<(Lsn, Published)>,
    open: Option<Published>,
}

#[derive(Debug, Clone)]
struct Published {
    commit_lsn: Lsn,
    index: u64,
    fingerprint: Fingerprint,
}

impl Published {
    fn named(&self) -> ChangeRef {
        ChangeRef {
            commit_lsn: self.commit_lsn,
            index: self.index,
            fingerprint: self.fingerprint.render(),
        }
    }
}

impl Trail {
    /// `from`: the last change of the checkpoint read at the start.
    pub fn new(from: Option<ChangeRef>) -> Self {
        Self {
            base: from,
            ..Self::default()
        }
    }

    /// A change of the open transaction got a record.
    pub fn published(&mut self, commit_lsn: Lsn, index: u64, fingerprint: Fingerprint) {
        self.open = Some(Published {
            commit_lsn,
            index,
            fingerprint,
        });
    }

    /// The open transaction committed, ending at `end_lsn`.
    pub fn committed(&mut self, end_lsn: Lsn) {
        if let Some(mut p) = self.open.take() {
            // Copied only here, once per transaction kept (see the module's invariants): the
            // open transaction's last change, one at a time, may stay a slice.
            if let Fingerprint::Id(id) = &p.fingerprint {
                p.fingerprint = Fingerprint::Id(Bytes::copy_from_slice(id));
            }
            self.done.push_back((end_lsn, p));
        }
    }

    /// The last change published at all, the open transaction's included: a checkpoint at the
    /// end of a Kafka transaction, which holds every record handed to it.
    pub fn latest(&self) -> Option<ChangeRef> {
        match (&self.open, self.done.back()) {
            (Some(p), _) | (None, Some((_, p))) => Some(p.named()),
            (None, None) => self.before(),
        }
    }

    /// The last change of the transactions that end at or before `covered` (an acknowledged
    /// prefix): a checkpoint written outside transactions. Forgets what it passes.
    pub fn within(&mut self, covered: Lsn) -> Option<ChangeRef> {
        self.acknowledged(covered);
        self.before()
    }

    /// Every transaction ending at or before `covered` is acknowledged: only the last of them
    /// is kept, so that between checkpoints the trail holds what is in flight, not every
    /// transaction since the last checkpoint.
    pub fn acknowledged(&mut self, covered: Lsn) {
        while let Some((end, _)) = self.done.front() {
            if *end > covered {
                break;
            }
            self.passed = self.done.pop_front().map(|(_, p)| p);
        }
    }

    fn before(&self) -> Option<ChangeRef> {
        match &self.passed {
            Some(p) => Some(p.named()),
            None => self.base.clone(),
        }
    }

    /// Transactions kept (tests).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.done.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn fp(s: &str) -> Fingerprint {
        Fingerprint::Id(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn the_trail_names_the_last_change_of_what_a_checkpoint_covers() {
        let start = ChangeRef {
            commit_lsn: Lsn(50),
            index: 0,
            fingerprint: "id:s".into(),
        };
        let mut t = Trail::new(Some(start.clone()));
        assert_eq!(t.latest(), Some(start.clone()));
        t.published(Lsn(100), 0, fp("a"));
        t.published(Lsn(100), 2, fp("b"));
        assert_eq!(t.latest().unwrap().fingerprint, "id:b");
        assert_eq!(t.within(Lsn(99)), Some(start));
        t.committed(Lsn(110));
        t.published(Lsn(200), 1, fp("c"));
        t.committed(Lsn(210));
        assert_eq!(t.within(Lsn(150)).unwrap().fingerprint, "id:b");
        assert_eq!(t.latest().unwrap().index, 1);
        assert_eq!(t.within(Lsn(210)).unwrap().fingerprint, "id:c");
        assert_eq!(t.kept(), 0);
    }

    #[test]
    fn acknowledged_keeps_only_what_is_in_flight() {
        let mut t = Trail::new(None);
        for i in 0..1000u64 {
            t.published(Lsn(i * 10), 0, fp(&format!("e-{i}")));
            t.committed(Lsn(i * 10 + 5));
            // Acknowledged up to ten transactions behind.
            t.acknowledged(Lsn((i * 10 + 5).saturating_sub(100)));
        }
        assert!(t.kept() <= 11, "{}", t.kept());
        assert_eq!(t.within(Lsn(9_990)).unwrap().fingerprint, "id:e-998");
    }

    #[test]
    fn an_id_is_copied_out_of_the_message_it_was_sliced_from() {
        let message = Bytes::from(vec![b'x'; 4096]);
        let mut t = Trail::new(None);
        t.published(Lsn(1), 0, Fingerprint::Id(message.slice(10..46)));
        t.committed(Lsn(2));
        drop(message);
        let Some((
            _,
            Published {
                fingerprint: Fingerprint::Id(kept),
                ..
            },
        )) = t.done.front()
        else {
            panic!("the committed change is kept");
        };
        // A slice would still point into the 4 KB buffer.
        assert!(kept.is_unique() && kept.len() == 36);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Publish(u8),
        Commit,
        Acknowledge(u8),
        Within(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u8>().prop_map(Op::Publish),
            2 => Just(Op::Commit),
            2 => any::<u8>().prop_map(Op::Acknowledge),
            1 => any::<u8>().prop_map(Op::Within),
        ]
    }

    proptest! {
        /// Forgetting acknowledged transactions early changes no checkpoint's `last`:
        /// a trail told of every acknowledgement answers as one that never was.
        #[test]
        fn acknowledging_early_changes_no_answer(ops in proptest::collection::vec(op(), 0..80)) {
            let mut told = Trail::new(None);
            let mut untold = Trail::new(None);
            // LSNs only grow: the stream's, and the acknowledged prefix.
            let (mut lsn, mut acked) = (0u64, 0u64);
            for op in ops {
                match op {
                    Op::Publish(n) => {
                        lsn += 1;
                        let f = fp(&format!("e-{n}"));
                        told.published(Lsn(lsn), u64::from(n), f.clone());
                        untold.published(Lsn(lsn), u64::from(n), f);
                    }
                    Op::Commit => {
                        lsn += 1;
                        told.committed(Lsn(lsn));
                        untold.committed(Lsn(lsn));
                    }
                    Op::Acknowledge(step) => {
                        acked = (acked + u64::from(step % 8)).min(lsn);
                        told.acknowledged(Lsn(acked));
                    }
                    Op::Within(step) => {
                        acked = (acked + u64::from(step % 8)).min(lsn);
                        prop_assert_eq!(told.within(Lsn(acked)), untold.within(Lsn(acked)));
                    }
                }
                prop_assert_eq!(told.latest(), untold.latest());
            }
        }
    }
}
