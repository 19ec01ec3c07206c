//! `outbox-relay status --watch`: the status report redrawn every interval until Ctrl-C or
//! SIGTERM, with what a snapshot cannot show: events per second (from the relay's
//! `outbox_relay_events_produced_total` between two frames), records in flight and the
//! monitor's loss forecast (the running relay's `/metrics`), beside the slot, the outbox tables
//! and the alerts read from PostgreSQL.
//!
//! On a terminal each frame replaces the previous one; otherwise (a pipe, a log) each frame is
//! one plain `key=value` line without escape codes. With several sources each frame is one
//! such line per source, prefixed `source=<name>`. A failed reading is shown, never fatal:
//! the view keeps trying, so it can watch a relay (or a server) come back.

use std::{
    fmt::Write,
    future::Future,
    io::{IsTerminal, Write as _},
    time::{Duration, Instant, SystemTime},
};

use super::{StatusReport, collect_on, table_line};
use crate::{
    config::Config,
    observe::alert::{Severity, approx, human_bytes, human_duration},
    observe::webhook::rfc3339,
    postgres::control,
};

/// Events per second between two readings of a counter; `None` on the first reading or after
/// a counter reset (a restarted relay).
pub fn rate(prev: Option<(Instant, f64)>, now: (Instant, f64)) -> Option<f64> {
    let (t0, v0) = prev?;
    let secs = now.0.saturating_duration_since(t0).as_secs_f64();
    (secs > 0.0 && now.1 >= v0).then(|| (now.1 - v0) / secs)
}

/// Every firing alert: the local findings, then the relay's others, one text each.
fn alerts(r: &StatusReport) -> Vec<(Severity, String, String)> {
    let mut out: Vec<(Severity, String, String)> = r
        .findings
        .iter()
        .filter_map(|f| f.level.map(|l| (l, f.kind.to_string(), f.summary.clone())))
        .collect();
    if let Ok(v) = &r.relay {
        for (alert, level) in &v.alert_levels {
            if *level >= 1.0 && !out.iter().any(|(_, k, _)| k == alert) {
                let l = if *level >= 2.0 {
                    Severity::Critical
                } else {
                    Severity::Warning
                };
                out.push((l, alert.clone(), "reported by the relay".into()));
            }
        }
    }
    out
}

fn forecast_text(r: &StatusReport) -> String {
    let what = if r.snapshot.max_slot_wal_keep_size.is_some() {
        "the slot is invalidated"
    } else {
        "retained WAL reaches alerts.retained_wal_critical_bytes"
    };
    match r.relay.as_ref().ok().and_then(|v| v.loss_forecast_secs) {
        Some(s) if s >= 0.0 => format!("at the current WAL rate {what} in {}", approx(s)),
        Some(_) => "none: the slot's headroom does not shrink".into(),
        None => "unknown (no report from the relay)".into(),
    }
}

/// One frame for a terminal.
pub fn render_frame(r: &StatusReport, events_per_sec: Option<f64>, every: Duration) -> String {
    let mut o = String::new();
    let snap = &r.snapshot;
    let _ = writeln!(
        o,
        "outbox-relay status --watch: slot {:?} on {}  {}  (every {}, Ctrl-C quits)",
        r.slot_name,
        r.server,
        rfc3339(SystemTime::now()),
        human_duration(every)
    );
    let (relay, events) = match &r.relay {
        Ok(v) => {
            let state = match (v.streaming, v.ready) {
                (Some(true), Some(true)) => "streaming, ready",
                (Some(true), _) => "streaming, NOT ready",
                (Some(false), _) => "NOT streaming",
                _ => "unknown",
            };
            let rate = events_per_sec.map_or("n/a".into(), |e| format!("{e:.1}"));
            let total = v
                .events_produced
                .map_or("n/a".into(), |e| format!("{e:.0}"));
            let inflight = v
                .inflight_events
                .map_or("n/a".into(), |e| format!("{e:.0}"));
            (
                state.to_string(),
                format!("{rate} events/s, {total} acknowledged, {inflight} in flight"),
            )
        }
        Err(e) => (
            format!("no report ({e})"),
            "n/a (no report from the relay)".into(),
        ),
    };
    let _ = writeln!(o, "  relay          {relay}");
    let _ = writeln!(o, "  events         {events}");
    let lag_bytes = snap.lag_bytes().map_or("unknown".into(), human_bytes);
    let lag_secs = r
        .relay
        .as_ref()
        .ok()
        .and_then(|v| v.time_lag_secs)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or("unknown".into(), |s| {
            human_duration(Duration::from_secs_f64(s))
        });
    let _ = writeln!(o, "  lag            {lag_bytes}, {lag_secs} behind");
    let slot = snap.slot.as_ref();
    let confirmed = slot
        .and_then(|s| s.confirmed_flush)
        .map_or("none".into(), |l| l.to_string());
    let wal = snap.server_lsn.map_or("unknown".into(), |l| l.to_string());
    let _ = writeln!(o, "  confirmed      {confirmed} (server WAL at {wal})");
    let retained = snap
        .retained_wal_bytes()
        .map_or("unknown".into(), human_bytes);
    let max = snap
        .max_slot_wal_keep_size
        .map_or("unlimited".into(), human_bytes);
    let status = slot.and_then(|s| s.wal_status.as_ref()).map_or(
        if slot.is_none() {
            "MISSING slot".into()
        } else {
            "unknown".into()
        },
        |w| format!("wal_status {w}"),
    );
    let _ = writeln!(
        o,
        "  retained WAL   {retained} (max_slot_wal_keep_size {max}), {status}"
    );
    let _ = writeln!(o, "  forecast       {}", forecast_text(r));
    for t in &r.outbox {
        let _ = writeln!(o, "  outbox table   {}", table_line(t));
    }
    let firing = alerts(r);
    if firing.is_empty() {
        let _ = writeln!(o, "  alerts         none");
    }
    for (l, kind, summary) in firing {
        let _ = writeln!(
            o,
            "  alert          {} {kind}: {summary}",
            l.as_str().to_uppercase()
        );
    }
    o
}

/// One plain line for a pipe or a log.
pub fn render_line(r: &StatusReport, events_per_sec: Option<f64>) -> String {
    let snap = &r.snapshot;
    let v = r.relay.as_ref().ok();
    let num = |x: Option<f64>, digits: usize| {
        x.filter(|x| x.is_finite())
            .map_or("n/a".to_string(), |x| format!("{x:.digits$}"))
    };
    let opt = |x: Option<u64>| x.map_or("n/a".to_string(), |x| x.to_string());
    let streaming = match v.and_then(|v| v.streaming) {
        Some(true) => "yes",
        Some(false) => "no",
        None => "n/a",
    };
    let forecast = match v.and_then(|v| v.loss_forecast_secs) {
        Some(s) if s >= 0.0 => format!("{s:.0}"),
        Some(_) => "none".into(),
        None => "n/a".into(),
    };
    let tables: Vec<String> = r
        .outbox
        .iter()
        .map(|t| match t {
            Ok(t) => format!("{}(live={},dead={})", t.table, t.live_tuples, t.dead_tuples),
            Err(_) => "unreadable".into(),
        })
        .collect();
    let firing: Vec<String> = alerts(r)
        .into_iter()
        .map(|(l, k, _)| format!("{k}:{}", l.as_str()))
        .collect();
    format!(
        "{} streaming={streaming} events_per_sec={} inflight={} lag_bytes={} lag_secs={} \
         confirmed={} retained_bytes={} forecast_secs={forecast} tables={} alerts={}",
        rfc3339(SystemTime::now()),
        num(events_per_sec, 1),
        num(v.and_then(|v| v.inflight_events), 0),
        opt(snap.lag_bytes()),
        num(v.and_then(|v| v.time_lag_secs), 1),
        snap.slot
            .as_ref()
            .and_then(|s| s.confirmed_flush)
            .map_or("none".into(), |l| l.to_string()),
        opt(snap.retained_wal_bytes()),
        if tables.is_empty() {
            "none".into()
        } else {
            tables.join(",")
        },
        if firing.is_empty() {
            "none".into()
        } else {
            firing.join(",")
        },
    )
}

/// One source's connection and last counter reading, kept from frame to frame.
#[derive(Default)]
struct Watched {
    client: Option<tokio_postgres::Client>,
    prev: Option<(Instant, f64)>,
}

impl Watched {
    /// The source's report and events per second now, or why there is none.
    async fn read(
        &mut self,
        cfg: &Config,
        now: Instant,
    ) -> Result<(StatusReport, Option<f64>), String> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.client = control::connect(cfg).await.ok();
        }
        let Some(c) = &self.client else {
            return Err(format!(
                "PostgreSQL at {}:{} not reachable",
                cfg.postgres.host, cfg.postgres.port
            ));
        };
        match collect_on(c, cfg).await {
            Ok(r) => {
                let total = r.relay.as_ref().ok().and_then(|v| v.events_produced);
                let eps = total.and_then(|t| rate(self.prev, (now, t)));
                self.prev = total.map(|t| (now, t));
                Ok((r, eps))
            }
            Err(e) => {
                self.client = None;
                Err(format!("cannot read the slot: {e}"))
            }
        }
    }
}

/// Redraws every `every` until `stop` completes: one source's full view, or with several
/// sources (`[source.<name>]`) one line per source.
pub async fn run(sources: &[&Config], every: Duration, stop: impl Future<Output = ()>) {
    let tty = std::io::stdout().is_terminal();
    let mut watched: Vec<Watched> = sources.iter().map(|_| Watched::default()).collect();
    tokio::pin!(stop);
    loop {
        let now = Instant::now();
        let mut text = String::new();
        if let [cfg] = sources {
            text = match watched[0].read(cfg, now).await {
                Ok((r, eps)) if tty => render_frame(&r, eps, every),
                Ok((r, eps)) => render_line(&r, eps) + "\n",
                Err(e) => format!(
                    "{} {e}; retrying every {}\n",
                    rfc3339(SystemTime::now()),
                    human_duration(every)
                ),
            };
        } else {
            if tty {
                let _ = writeln!(
                    text,
                    "outbox-relay status --watch: {} sources  (every {}, Ctrl-C quits; \
                     --source <name> for one in full)",
                    sources.len(),
                    human_duration(every)
                );
            }
            for (cfg, w) in sources.iter().zip(&mut watched) {
                let name = cfg.source.as_deref().unwrap_or_default();
                let line = match w.read(cfg, now).await {
                    Ok((r, eps)) => render_line(&r, eps),
                    Err(e) => format!("{} {e}", rfc3339(SystemTime::now())),
                };
                let _ = writeln!(text, "source={name} {line}");
            }
        }
        let mut out = std::io::stdout().lock();
        let _ = if tty {
            // Home, clear the screen, draw.
            write!(out, "\x1b[H\x1b[2J{text}")
        } else {
            write!(out, "{text}")
        };
        let _ = out.flush();
        drop(out);
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep_until((now + every).into()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_needs_two_readings_and_survives_a_counter_reset() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(rate(None, (t1, 10.0)), None);
        assert_eq!(rate(Some((t0, 10.0)), (t1, 30.0)), Some(10.0));
        assert_eq!(rate(Some((t0, 10.0)), (t1, 3.0)), None, "relay restarted");
        assert_eq!(rate(Some((t1, 10.0)), (t1, 30.0)), None, "no time passed");
    }
}
