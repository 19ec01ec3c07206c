use super::*;
use crate::postgres::slot::SlotState;
use relay_core::Lsn;

fn report(slot: Option<SlotState>, relay: Result<RelayView, String>) -> StatusReport {
    let snapshot = SlotSnapshot {
        in_recovery: false,
        server_lsn: Some(Lsn(0x3000000)),
        max_slot_wal_keep_size: Some(64 << 20),
        slot,
    };
    let cfg = crate::config::AlertsConfig::default();
    StatusReport {
        source: None,
        slot_name: "s".into(),
        server: "h:1 database d".into(),
        sources: "no outbox table; message prefixes \"outbox\"".into(),
        findings: alert::evaluate(&cfg, &Observation::of(&snapshot, None)),
        snapshot,
        relay,
        outbox: Vec::new(),
    }
}

fn slot(status: &str, restart: u64) -> SlotState {
    SlotState {
        active: true,
        active_pid: Some(42),
        restart_lsn: Some(Lsn(restart)),
        confirmed_flush: Some(Lsn(0x3000000 - 100)),
        wal_status: Some(status.parse().unwrap()),
        safe_wal_size: Some(40 << 20),
        invalidation_reason: None,
        on_standby: false,
        inactive_since: None,
        stats: None,
        walsender_wait: None,
    }
}

#[test]
fn healthy_slot_is_ok_and_shows_the_figures() {
    let r = report(Some(slot("reserved", 0x3000000 - 4096)), Err("off".into()));
    assert_eq!(r.worst(), None);
    let text = r.render();
    for needle in [
        "active (pid 42)",
        "wal_status reserved",
        "safe_wal_size 40.0 MiB",
        "lag 100 B",
        "retains 4.0 KiB of WAL",
        "max_slot_wal_keep_size 64.0 MiB",
        "alerts           none",
        "publishes        no outbox table; message prefixes \"outbox\"",
        "result: OK",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in\n{text}");
    }
}

#[test]
fn lost_missing_and_relay_reported_critical_alerts_are_critical() {
    let mut lost = slot("lost", 0);
    lost.restart_lsn = None;
    lost.safe_wal_size = None;
    let r = report(Some(lost), Err("off".into()));
    assert_eq!(r.worst(), Some(Severity::Critical));
    let text = r.render();
    assert!(
        text.contains("CRITICAL wal_status: the slot was invalidated"),
        "{text}"
    );
    assert!(
        text.contains("safe_wal_size none (lost)") && text.contains("retained WAL unknown"),
        "{text}"
    );
    assert_eq!(
        report(None, Err("off".into())).worst(),
        Some(Severity::Critical)
    );
    // PostgreSQL 18's idle timeout: the reason and the setting, never "removed WAL".
    let mut idle = slot("lost", 0);
    idle.invalidation_reason = Some("idle_timeout".into());
    idle.inactive_since = Some(1);
    let text = report(Some(idle), Err("off".into())).render();
    assert!(
        text.contains("invalidated      idle_timeout: ")
            && text.contains("idle_replication_slot_timeout")
            && text.contains("inactive for")
            && !text.contains("removed WAL"),
        "{text}"
    );
    assert!(report(None, Err("off".into())).render().contains("MISSING"));

    let view = relay_view(
        "# TYPE outbox_relay_alert_level gauge\n\
         outbox_relay_alert_level{alert=\"time_lag\"} 2\n\
         outbox_relay_alert_level{alert=\"retained_wal\"} 0\n\
         outbox_relay_streaming 0\noutbox_relay_ready 0\n\
         outbox_relay_slot_lag_seconds 12.5\n",
        None,
    );
    assert_eq!(view.streaming, Some(false));
    assert_eq!(view.time_lag_secs, Some(12.5));
    assert_eq!(view.alert_levels.len(), 2);
    let r = report(Some(slot("reserved", 0x3000000 - 4096)), Ok(view));
    assert_eq!(r.worst(), Some(Severity::Critical));
    let text = r.render();
    assert!(
        text.contains("NOT streaming") && text.contains("time lag 12.5s"),
        "{text}"
    );
    assert!(
        text.contains("CRITICAL time_lag (reported by the relay"),
        "{text}"
    );
}

#[test]
fn retained_wal_over_the_ratio_is_a_warning() {
    // 40 MiB of 64 MiB: 62% (default warning 50%, critical 80%).
    let r = report(
        Some(slot("reserved", 0x3000000 - (40 << 20))),
        Err("off".into()),
    );
    assert_eq!(r.worst(), Some(Severity::Warning));
    assert!(r.render().contains("WARNING retained_wal"));
}

#[test]
fn sources_say_whether_there_is_an_outbox_table() {
    let mut cfg = Config::load(None, []).unwrap();
    assert_eq!(sources(&cfg), "tables public.outbox");
    cfg.outbox.clear();
    cfg.message = vec![relay_core::route::MessageRoute {
        prefix: "outbox".into(),
        ..cfg_message()
    }];
    assert_eq!(
        sources(&cfg),
        "no outbox table; message prefixes \"outbox\""
    );
}

fn cfg_message() -> relay_core::route::MessageRoute {
    toml::from_str("prefix = \"x\"").unwrap()
}

#[test]
fn outbox_table_lines() {
    use std::time::Duration;
    let t = TableHealth {
        table: "public.outbox".into(),
        partitions: 3,
        live_tuples: 12,
        dead_tuples: 4,
        size_bytes: 49152,
        last_autovacuum: None,
        last_vacuum_age: Some(Duration::from_secs(120)),
        last_autoanalyze: None,
        oldest_row_age: Some(Duration::from_millis(1500)),
    };
    assert_eq!(
        table_line(&Ok(t.clone())),
        "public.outbox: 12 live, 4 dead tuples, 48.0 KiB, 3 partitions, vacuumed 2m 0s ago, \
         oldest row 1.5s"
    );
    let plain = TableHealth {
        partitions: 1,
        last_vacuum_age: None,
        oldest_row_age: None,
        ..t
    };
    assert_eq!(
        table_line(&Ok(plain)),
        "public.outbox: 12 live, 4 dead tuples, 48.0 KiB, never vacuumed"
    );
    assert_eq!(table_line(&Err("boom".into())), "UNREADABLE: boom");
    let mut r = report(None, Err("off".into()));
    r.outbox = vec![Err("cannot read".into())];
    assert!(
        r.render()
            .contains("  outbox table     UNREADABLE: cannot read\n")
    );
}

/// A multi-source relay labels every series by source: a source's view reads only its own.
#[test]
fn a_source_reads_only_its_own_series() {
    let text = "outbox_relay_streaming{source=\"a\"} 1\n\
                outbox_relay_streaming{source=\"ab\"} 0\n\
                outbox_relay_events_produced_total{topic=\"t\",source=\"a\"} 5\n\
                outbox_relay_events_produced_total{topic=\"t\",source=\"ab\"} 7\n";
    let a = relay_view(text, Some("a"));
    assert_eq!((a.streaming, a.events_produced), (Some(true), Some(5.0)));
    let ab = relay_view(text, Some("ab"));
    assert_eq!((ab.streaming, ab.events_produced), (Some(false), Some(7.0)));
    assert_eq!(relay_view(text, None).events_produced, Some(12.0));
}

/// The report after its first line, which must start `outbox-relay status: <start>` (the rest
/// of that line is the time).
fn after_header<'a>(text: &'a str, start: &str) -> &'a str {
    let (first, rest) = text.split_once('\n').unwrap();
    assert!(
        first.starts_with(&format!("outbox-relay status: {start}")),
        "{first}"
    );
    rest
}

/// The whole report, line by line but its first (which carries the time), for a slot with every
/// figure, outbox tables and the relay's view; and for a slot the server hides its safe WAL
/// size of, with no relay: each section's text is pinned here.
#[test]
fn the_whole_report_reads_the_same_section_by_section() {
    let mut s = slot("extended", 0x3000000 - 8192);
    s.stats = Some(crate::postgres::slot::SpillStats {
        spill_txns: 2,
        spill_count: 3,
        spill_bytes: 4096,
        total_txns: 10,
        total_bytes: 1 << 20,
    });
    let view = RelayView {
        streaming: Some(true),
        ready: Some(false),
        time_lag_secs: Some(1.5),
        heartbeat_age_secs: None,
        alert_levels: vec![("time_lag".into(), 1.0), ("retained_wal".into(), 0.0)],
        ..RelayView::default()
    };
    let mut r = report(Some(s), Ok(view));
    r.source = Some("a".into());
    r.outbox = vec![
        Ok(TableHealth {
            table: "public.outbox".into(),
            partitions: 1,
            live_tuples: 1,
            dead_tuples: 2,
            size_bytes: 8192,
            last_autovacuum: None,
            last_vacuum_age: None,
            last_autoanalyze: None,
            oldest_row_age: None,
        }),
        Err("denied".into()),
    ];
    let text = r.render();
    assert_eq!(
        after_header(&text, "source a, slot \"s\" on h:1 database d at "),
        [
            "  server           primary, WAL at 0/3000000, max_slot_wal_keep_size 64.0 MiB",
            "  publishes        no outbox table; message prefixes \"outbox\"",
            "  slot             active (pid 42), wal_status extended, safe_wal_size 40.0 MiB",
            "  last confirmed   0/2FFFF9C (lag 100 B)",
            "  restart_lsn      0/2FFE000 (retains 8.0 KiB of WAL)",
            "  decoding         10 txns decoded, 2 spilled to disk (3 writes, 4.0 KiB)",
            "  outbox table     public.outbox: 1 live, 2 dead tuples, 8.0 KiB, never vacuumed",
            "  outbox table     UNREADABLE: denied",
            "  relay            streaming, not ready, time lag 1.5s, heartbeat age n/a",
            "  alerts           see below",
            "                   WARNING wal_status: wal_status = extended",
            "                     what to do: the slot holds WAL beyond max_wal_size; restore the relay's throughput before PostgreSQL marks it unreserved (docs/operations.md#wal-status)",
            "                   WARNING time_lag (reported by the relay; see its log for alert_firing)",
            "result: WARNING",
        ]
        .map(|l| format!("{l}\n"))
        .concat()
    );

    let mut hidden = slot("reserved", 0x3000000 - 4096);
    hidden.safe_wal_size = None;
    hidden.active = false;
    let text = report(Some(hidden), Err("off".into())).render();
    assert_eq!(
        after_header(&text, "slot \"s\" on h:1 database d at "),
        [
            "  server           primary, WAL at 0/3000000, max_slot_wal_keep_size 64.0 MiB",
            "  publishes        no outbox table; message prefixes \"outbox\"",
            "  slot             inactive (no relay streams from it), wal_status reserved, safe_wal_size not shown by the server (about 64.0 MiB left under max_slot_wal_keep_size)",
            "  last confirmed   0/2FFFF9C (lag 100 B)",
            "  restart_lsn      0/2FFF000 (retains 4.0 KiB of WAL)",
            "  relay            no report (off); time lag not evaluated",
            "  alerts           none",
            "result: OK",
        ]
        .map(|l| format!("{l}\n"))
        .concat()
    );
}
