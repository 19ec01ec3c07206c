//! `relay.max_in_flight_bytes_total`: the payload bytes in flight of every source of the
//! process, bounded together. The rule is `relay_core::budget::may_read`; this is its
//! bookkeeping.
//!
//! Invariant: [`Budget::total`] is the sum of every live [`Share`]'s last published bytes. A
//! share is one pipeline attempt's; it publishes its in-flight bytes once per turn of the loop
//! (not per record: one atomic add per turn) and withdraws them when the attempt ends, whatever
//! ended it, so a crashed attempt's records (purged with its producer) never hold the budget.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

#[derive(Debug)]
pub(crate) struct Budget {
    total: AtomicU64,
    limit: u64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            total: AtomicU64::new(0),
            limit,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// One pipeline attempt's part of a [`Budget`].
#[derive(Debug)]
pub(crate) struct Share {
    budget: Arc<Budget>,
    mine: u64,
}

impl Share {
    pub(crate) fn new(budget: Arc<Budget>) -> Self {
        Self { budget, mine: 0 }
    }

    /// This attempt now holds `bytes` in flight.
    pub(crate) fn publish(&mut self, bytes: u64) {
        if bytes >= self.mine {
            self.budget
                .total
                .fetch_add(bytes - self.mine, Ordering::Relaxed);
        } else {
            self.budget
                .total
                .fetch_sub(self.mine - bytes, Ordering::Relaxed);
        }
        self.mine = bytes;
    }

    /// Publishes `bytes`, then says whether a source holding `records` may read more.
    pub(crate) fn may_read(&mut self, records: u64, bytes: u64) -> bool {
        self.publish(bytes);
        relay_core::budget::may_read(records, self.budget.total(), self.budget.limit)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.publish(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_withdraw_when_dropped() {
        let budget = Arc::new(Budget::new(100));
        let mut a = Share::new(budget.clone());
        let mut b = Share::new(budget.clone());
        assert!(a.may_read(3, 70));
        assert!(b.may_read(0, 0), "nothing in flight: may read");
        assert!(b.may_read(2, 40) || budget.total() == 110);
        assert_eq!(budget.total(), 110);
        assert!(!a.may_read(3, 70), "110 in flight of 100");
        b.publish(10);
        assert_eq!(budget.total(), 80);
        assert!(a.may_read(3, 70));
        drop(a);
        assert_eq!(budget.total(), 10, "a dropped share withdraws its bytes");
        drop(b);
        assert_eq!(budget.total(), 0);
    }
}
