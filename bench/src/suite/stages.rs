//! Where a steady run's latency goes: each relay record's writer-to-consumer time cut at
//! PostgreSQL's commit and at the producer's hand-off ([`Stages`]), summarised over all
//! records and over the slowest 1 % (the p99's tail), so a miss can be placed in a stage.

use serde::Serialize;

use crate::kafka::Stages;

/// One stage over the records: its p50 and p99, and its mean over the tail.
#[derive(Debug, Clone, Serialize)]
pub struct StageStats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Mean over the slowest 1 % of records (by their total).
    pub tail_mean_ms: f64,
    /// Tail records that spent longer in this stage than in either other.
    pub tail_dominant: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageBreakdown {
    /// Where the middle cut is: `"hand-off"` (the producer's `produce` call) or `"broker"`
    /// (the broker's append time, `BENCH_TIMESTAMP_TYPE=LogAppendTime`).
    pub cut: &'static str,
    pub count: usize,
    /// Records in the tail: the slowest 1 % by total, at least one.
    pub tail_count: usize,
    pub to_commit: StageStats,
    pub to_produce: StageStats,
    pub to_consumer: StageStats,
}

fn quantile(sorted: &[i64], q: f64) -> i64 {
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The breakdown of `stages`; `None` when there are none (systems without the commit-time
/// header).
pub fn breakdown(stages: &[Stages]) -> Option<StageBreakdown> {
    if stages.is_empty() {
        return None;
    }
    let total = |s: &Stages| s.to_commit_us + s.to_produce_us + s.to_consumer_us;
    let mut by_total: Vec<&Stages> = stages.iter().collect();
    by_total.sort_unstable_by_key(|s| std::cmp::Reverse(total(s)));
    let tail = &by_total[..stages.len().div_ceil(100)];
    let parts: [fn(&Stages) -> i64; 3] = [
        |s| s.to_commit_us,
        |s| s.to_produce_us,
        |s| s.to_consumer_us,
    ];
    let stat = |k: usize| {
        let mut v: Vec<i64> = stages.iter().map(parts[k]).collect();
        v.sort_unstable();
        let dominant = tail
            .iter()
            .filter(|s| (0..3).all(|o| o == k || parts[k](s) > parts[o](s)))
            .count();
        StageStats {
            p50_ms: quantile(&v, 0.5) as f64 / 1000.0,
            p99_ms: quantile(&v, 0.99) as f64 / 1000.0,
            tail_mean_ms: tail.iter().map(|s| parts[k](s)).sum::<i64>() as f64
                / tail.len() as f64
                / 1000.0,
            tail_dominant: dominant,
        }
    };
    Some(StageBreakdown {
        cut: if stages[0].at_broker {
            "broker"
        } else {
            "hand-off"
        },
        count: stages.len(),
        tail_count: tail.len(),
        to_commit: stat(0),
        to_produce: stat(1),
        to_consumer: stat(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: i64, b: i64, c: i64) -> Stages {
        Stages {
            at_broker: false,
            to_commit_us: a,
            to_produce_us: b,
            to_consumer_us: c,
        }
    }

    #[test]
    fn the_tail_is_placed_in_the_stage_it_spent_its_time_in() {
        // 99 quick records, one slow one that waited before the hand-off.
        let mut v: Vec<Stages> = (0..99).map(|_| s(300, 500, 1_000)).collect();
        v.push(s(300, 20_000, 1_000));
        let b = breakdown(&v).unwrap();
        assert_eq!((b.cut, b.count, b.tail_count), ("hand-off", 100, 1));
        assert_eq!(b.to_produce.tail_mean_ms, 20.0);
        assert_eq!(b.to_produce.tail_dominant, 1);
        assert_eq!(b.to_consumer.tail_dominant, 0);
        assert_eq!(b.to_produce.p50_ms, 0.5);
        assert_eq!(b.to_consumer.p99_ms, 1.0);
        assert!(breakdown(&[]).is_none());
    }
}
