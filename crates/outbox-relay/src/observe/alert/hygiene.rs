//! `outbox_dead_tuples`: an outbox table holds dead tuples that vacuum has not removed. Each
//! published-then-deleted row leaves one; when autovacuum falls behind (the default scale
//! factor waits for 20% of the table) they slow every scan of the table and bloat it.

use super::{AlertKind, Finding, Observation, Severity, human_duration};
use crate::config::AlertsConfig;

const ACTION: &str = "check that autovacuum reaches the outbox table (last_autovacuum, \
     long-running transactions that hold back the xmin horizon) and give it per-table settings, \
     e.g. ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, \
     autovacuum_vacuum_threshold = 10000); or retire rows by dropping time partitions \
     (docs/operations.md#outbox-table-hygiene)";

pub(super) fn outbox_dead_tuples(cfg: &AlertsConfig, obs: &Observation) -> Finding {
    let kind = AlertKind::OutboxDeadTuples;
    let Some(t) = &obs.outbox_worst else {
        return Finding {
            kind,
            level: None,
            summary: "outbox table health not read (no outbox table, or not yet)".into(),
            action: ACTION,
            state: String::new(),
        };
    };
    let dead = t.dead_tuples.max(0) as u64;
    let over = |limit: u64| limit > 0 && dead >= limit;
    let level = if over(cfg.outbox_dead_tuples_critical) {
        Some(Severity::Critical)
    } else if over(cfg.outbox_dead_tuples_warning) {
        Some(Severity::Warning)
    } else {
        None
    };
    let vacuumed = t.last_vacuum_age.map_or("never vacuumed".to_string(), |a| {
        format!("last vacuum {} ago", human_duration(a))
    });
    Finding {
        kind,
        level,
        summary: format!(
            "outbox table {} holds {dead} dead tuples beside {} live ones ({vacuumed}; warning \
             at {}, critical at {})",
            t.table,
            t.live_tuples,
            count_text(cfg.outbox_dead_tuples_warning),
            count_text(cfg.outbox_dead_tuples_critical)
        ),
        action: ACTION,
        state: String::new(),
    }
}

fn count_text(n: u64) -> String {
    if n == 0 { "off".into() } else { n.to_string() }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::outbox_tables::TableHealth;

    #[test]
    fn levels_and_message() {
        let cfg = AlertsConfig {
            outbox_dead_tuples_warning: 100,
            outbox_dead_tuples_critical: 1000,
            ..AlertsConfig::default()
        };
        let at = |dead: i64, vacuum: Option<Duration>| {
            outbox_dead_tuples(
                &cfg,
                &Observation {
                    outbox_worst: Some(TableHealth {
                        table: "public.outbox".into(),
                        partitions: 1,
                        live_tuples: 5,
                        dead_tuples: dead,
                        size_bytes: 8192,
                        last_autovacuum: None,
                        last_vacuum_age: vacuum,
                        last_autoanalyze: None,
                        oldest_row_age: None,
                    }),
                    ..Observation::default()
                },
            )
        };
        assert_eq!(at(99, None).level, None);
        assert_eq!(at(100, None).level, Some(Severity::Warning));
        let f = at(1000, Some(Duration::from_secs(125)));
        assert_eq!(f.level, Some(Severity::Critical));
        assert!(
            f.summary.starts_with(
                "outbox table public.outbox holds 1000 dead tuples beside 5 live ones \
                 (last vacuum 2m 5s ago;"
            ),
            "{}",
            f.summary
        );
        assert!(at(100, None).summary.contains("never vacuumed"));
        let none = outbox_dead_tuples(&cfg, &Observation::default());
        assert_eq!(none.level, None);
    }
}
