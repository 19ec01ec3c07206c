//! The one-screen report of `outbox-relay status` ([`StatusReport::render`]): one function a
//! section, in the order they print (the header, the server, the slot, the outbox tables, the
//! relay's view, the alerts, the result).
//!
//! Invariant: the text is a contract with people and scripts that grep it (the tests pin it
//! line by line): a section's labels keep their column, 17 characters from the line's start.

use std::{fmt::Write, time::Duration};

use super::{RelayView, StatusReport, table_line};
use crate::{
    observe::alert::{Severity, human_bytes, human_duration},
    observe::webhook::rfc3339,
    postgres::slot::{SlotSnapshot, SlotState},
};

impl StatusReport {
    /// The one-screen report.
    pub fn render(&self) -> String {
        let mut o = String::new();
        self.header(&mut o);
        self.server(&mut o);
        match &self.snapshot.slot {
            None => missing_slot(&mut o),
            Some(s) => slot(&mut o, &self.snapshot, s),
        }
        for t in &self.outbox {
            let _ = writeln!(o, "  outbox table     {}", table_line(t));
        }
        match &self.relay {
            Ok(v) => relay(&mut o, v),
            Err(e) => {
                let _ = writeln!(
                    o,
                    "  relay            no report ({e}); time lag not evaluated"
                );
            }
        }
        self.alerts(&mut o);
        o
    }

    /// `outbox-relay status: [source …, ]slot "…" on … at <now>`.
    fn header(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "outbox-relay status: {}slot {:?} on {} at {}",
            self.source
                .as_ref()
                .map(|s| format!("source {s}, "))
                .unwrap_or_default(),
            self.slot_name,
            self.server,
            rfc3339(std::time::SystemTime::now())
        );
    }

    /// The server's role, WAL position and `max_slot_wal_keep_size`; what is published.
    fn server(&self, o: &mut String) {
        let snap = &self.snapshot;
        let role = if snap.in_recovery {
            "standby"
        } else {
            "primary"
        };
        let max = snap
            .max_slot_wal_keep_size
            .map_or("unlimited".to_string(), human_bytes);
        let wal = snap.server_lsn.map_or("unknown".into(), |l| l.to_string());
        let _ = writeln!(
            o,
            "  server           {role}, WAL at {wal}, max_slot_wal_keep_size {max}"
        );
        let _ = writeln!(o, "  publishes        {}", self.sources);
    }

    /// Every alert found here or reported by the relay, then the result (the worst level).
    fn alerts(&self, o: &mut String) {
        let lines = self.alert_lines();
        let worst = self.worst();
        let _ = writeln!(
            o,
            "  alerts           {}",
            if lines.is_empty() {
                "none"
            } else {
                "see below"
            }
        );
        for l in lines {
            let _ = writeln!(o, "{l}");
        }
        let _ = writeln!(
            o,
            "result: {}",
            match worst {
                None => "OK",
                Some(Severity::Warning) => "WARNING",
                Some(Severity::Critical) => "CRITICAL",
            }
        );
    }

    /// The local findings with what to do, then the relay's alerts the local view does not
    /// have (`time_lag` needs the monitor's history).
    fn alert_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for f in &self.findings {
            if let Some(l) = f.level {
                lines.push(format!(
                    "  {:<16} {} {}: {}\n  {:<16}   what to do: {}",
                    "",
                    l.as_str().to_uppercase(),
                    f.kind,
                    f.summary,
                    "",
                    f.action
                ));
            }
        }
        if let Ok(v) = &self.relay {
            for (alert, level) in &v.alert_levels {
                let local = self
                    .findings
                    .iter()
                    .any(|f| f.kind.as_str() == alert && f.level.is_some());
                if *level >= 1.0 && !local {
                    let l = if *level >= 2.0 { "CRITICAL" } else { "WARNING" };
                    lines.push(format!(
                        "  {:<16} {l} {alert} (reported by the relay; see its log for alert_firing)",
                        ""
                    ));
                }
            }
        }
        lines
    }
}

/// No slot: what to do on a first start, and what it means otherwise.
fn missing_slot(o: &mut String) {
    let _ = writeln!(
        o,
        "  slot             MISSING: run `outbox-relay setup` on a first start; if it \
         existed before, events since it was dropped are missing (docs/operations.md#slot-lost)"
    );
}

/// The slot's lines: its holder and WAL state, why it was invalidated, how long it is idle,
/// its confirmed position, the WAL it retains, its decoding statistics.
fn slot(o: &mut String, snap: &SlotSnapshot, s: &SlotState) {
    let holder = match (s.active, s.active_pid) {
        (true, Some(pid)) => format!("active (pid {pid})"),
        (true, None) => "active".into(),
        _ => "inactive (no relay streams from it)".into(),
    };
    let status = s
        .wal_status
        .as_ref()
        .map_or("unknown".into(), |w| w.to_string());
    let safe = safe_wal_size(snap, s);
    let _ = writeln!(
        o,
        "  slot             {holder}, wal_status {status}, safe_wal_size {safe}"
    );
    if let Some(why) = s.invalidation() {
        let _ = writeln!(
            o,
            "  invalidated      {why}: {}; {}",
            why.what_happened(),
            why.prevention()
        );
    }
    if let Some(since) = s.inactive_since {
        let idle = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |now| (now.as_secs_f64() - since as f64).max(0.0));
        let _ = writeln!(o, "  inactive for     {idle:.0} s (inactive_since)");
    }
    let lag = snap.lag_bytes().map_or("unknown".into(), human_bytes);
    let confirmed = s.confirmed_flush.map_or("none".into(), |l| l.to_string());
    let _ = writeln!(o, "  last confirmed   {confirmed} (lag {lag})");
    match (s.restart_lsn, snap.retained_wal_bytes()) {
        (Some(r), Some(b)) => {
            let b = human_bytes(b);
            let _ = writeln!(o, "  restart_lsn      {r} (retains {b} of WAL)");
        }
        (r, _) => {
            let r = r.map_or("none".to_string(), |l| l.to_string());
            let _ = writeln!(o, "  restart_lsn      {r} (retained WAL unknown)");
        }
    }
    if let Some(st) = s.stats {
        let _ = writeln!(
            o,
            "  decoding         {} txns decoded, {} spilled to disk ({} writes, {})",
            st.total_txns,
            st.spill_txns,
            st.spill_count,
            human_bytes(st.spill_bytes.max(0) as u64)
        );
    }
}

/// How much more WAL the slot may retain before PostgreSQL invalidates it (`safe_wal_size`),
/// or why that is not known.
fn safe_wal_size(snap: &SlotSnapshot, s: &SlotState) -> String {
    match s.safe_wal_size {
        Some(b) if b < 0 => format!("-{}", human_bytes(b.unsigned_abs())),
        Some(b) => human_bytes(b as u64),
        None if s.is_lost() => "none (lost)".into(),
        None if snap.max_slot_wal_keep_size.is_none() => "unlimited".into(),
        None => match (snap.max_slot_wal_keep_size, snap.retained_wal_bytes()) {
            // A managed server that hides it: the same estimate as the forecast's.
            (Some(keep), Some(r)) if keep >= r => format!(
                "not shown by the server (about {} left under \
                 max_slot_wal_keep_size)",
                human_bytes(keep - r)
            ),
            _ => "not shown by the server".into(),
        },
    }
}

/// The relay's own view: streaming, ready, time lag, heartbeat age.
fn relay(o: &mut String, v: &RelayView) {
    let yes_no = |b: Option<bool>, y: &str, n: &str| match b {
        Some(true) => y.to_string(),
        Some(false) => n.to_string(),
        None => "unknown".to_string(),
    };
    let secs = |s: Option<f64>| {
        s.filter(|s| s.is_finite() && *s >= 0.0)
            .map_or("n/a".into(), |s| human_duration(Duration::from_secs_f64(s)))
    };
    let _ = writeln!(
        o,
        "  relay            {}, {}, time lag {}, heartbeat age {}",
        yes_no(v.streaming, "streaming", "NOT streaming"),
        yes_no(v.ready, "ready", "not ready"),
        secs(v.time_lag_secs),
        secs(v.heartbeat_age_secs)
    );
}
