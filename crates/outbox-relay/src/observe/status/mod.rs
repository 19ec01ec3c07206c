//! `outbox-relay status`: the slot's health on one screen, for people, cron and probes.
//!
//! It reads the slot directly from PostgreSQL (so it works while the relay is down) and
//! evaluates the alerts that need no history (retained WAL, `wal_status`). When the relay's
//! HTTP endpoint answers, its view (its `/status.json`, the document its console draws) is added: streaming, time lag, heartbeat age and the level
//! of every alert, including `time_lag`, which needs the monitor's history.
//!
//! What is collected is here; the screen it makes is `screen`'s, the `--watch` frames `watch`'s.
//!
//! Invariant: the worst level among both views decides the exit code, and a missing or lost
//! slot is always critical, so `status` never reports healthy for a relay that cannot run.

use std::time::Duration;

use crate::{
    config::Config,
    error::{RelayError, Transient},
    observe::alert::{self, Finding, Observation, Severity, human_bytes, human_duration},
    observe::console::{RelayStatus, SourceStatus},
    observe::outbox_tables::{self, TableHealth},
    postgres::control::{self, describe_pg},
    postgres::slot::{self, SlotSnapshot},
    telemetry::http_client::{self as http, Target},
};

/// What the running relay reports about itself (from its `/status.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RelayView {
    pub streaming: Option<bool>,
    pub ready: Option<bool>,
    pub time_lag_secs: Option<f64>,
    pub heartbeat_age_secs: Option<f64>,
    /// `(alert, level)` with level 0 ok, 1 warning, 2 critical.
    pub alert_levels: Vec<(String, f64)>,
    /// Events Kafka acknowledged since the relay started, all topics.
    pub events_produced: Option<f64>,
    /// Records handed to Kafka, not yet acknowledged.
    pub inflight_events: Option<f64>,
    /// The monitor's forecast; negative: the headroom does not shrink.
    pub loss_forecast_secs: Option<f64>,
}

#[derive(Debug)]
pub struct StatusReport {
    /// The source's name, in a multi-source config.
    pub source: Option<String>,
    pub slot_name: String,
    pub server: String,
    /// What is published: the outbox tables and message prefixes ([`sources`]).
    pub sources: String,
    pub snapshot: SlotSnapshot,
    pub findings: [Finding; alert::ALERTS],
    pub relay: Result<RelayView, String>,
    /// The health of each outbox table (empty in the table-less mode).
    pub outbox: Vec<Result<TableHealth, String>>,
}

/// Queries PostgreSQL (required) and the relay's endpoint (optional).
pub async fn collect(cfg: &Config) -> Result<StatusReport, RelayError> {
    let client = control::connect(cfg).await?;
    collect_on(&client, cfg).await
}

/// [`collect`] on an open connection (`--watch` keeps one).
pub(crate) async fn collect_on(
    client: &tokio_postgres::Client,
    cfg: &Config,
) -> Result<StatusReport, RelayError> {
    let err = |e: tokio_postgres::Error| Transient::Postgres {
        context: "read the replication slot",
        detail: describe_pg(&e),
        source: e,
    };
    let version = slot::server_version(client).await.map_err(err)?;
    let snapshot = slot::query(client, &cfg.postgres.slot, version)
        .await
        .map_err(err)?;
    let outbox = outbox_tables::query(client, &cfg.outbox).await;
    let good: Vec<TableHealth> = outbox
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .cloned()
        .collect();
    let obs = Observation {
        outbox_worst: outbox_tables::worst(&good).cloned(),
        ..Observation::of(&snapshot, None)
    };
    let findings = alert::evaluate(&cfg.alerts, &obs);
    let relay = if !cfg.http.enabled || cfg.http.listen.port() == 0 {
        Err("http endpoint disabled or on a random port".to_string())
    } else {
        relay_report(cfg).await
    };
    Ok(StatusReport {
        source: cfg.source.clone(),
        slot_name: cfg.postgres.slot.clone(),
        server: format!(
            "{}:{} database {}",
            cfg.postgres.host, cfg.postgres.port, cfg.postgres.database
        ),
        sources: sources(cfg),
        snapshot,
        findings,
        relay,
        outbox,
    })
}

/// The running relay's view of this source, from its `/status.json` (the document its console
/// draws: [`crate::observe::console`]).
async fn relay_report(cfg: &Config) -> Result<RelayView, String> {
    let t = Target::local(cfg.http.listen, "/status.json");
    match http::get(&t, Duration::from_secs(2)).await {
        Ok((s, body)) if s.is_success() => {
            let doc: RelayStatus = serde_json::from_str(&body)
                .map_err(|e| format!("{} answered a document it cannot read: {e}", t.redacted()))?;
            let want = cfg.source.as_deref();
            doc.sources
                .iter()
                .find(|s| want.is_none() || s.name.as_deref() == want)
                .map(RelayView::from)
                .ok_or_else(|| {
                    format!(
                        "{} does not relay source {}",
                        t.redacted(),
                        want.unwrap_or("?")
                    )
                })
        }
        Ok((s, _)) => Err(format!("{} answered {s}", t.redacted())),
        Err(e) => Err(format!("{} not reachable: {e}", t.redacted())),
    }
}

/// `tables public.outbox; message prefixes "a"`, or `no outbox table` when only `[[message]]`
/// sections are configured.
pub fn sources(cfg: &Config) -> String {
    let tables = if cfg.outbox.is_empty() {
        "no outbox table".to_string()
    } else {
        let names: Vec<String> = cfg
            .outbox
            .iter()
            .map(|t| {
                let (s, n) = t.qualified_name();
                format!("{s}.{n}")
            })
            .collect();
        format!("tables {}", names.join(", "))
    };
    if cfg.message.is_empty() {
        return tables;
    }
    let prefixes: Vec<String> = cfg
        .message
        .iter()
        .map(|m| format!("{:?}", m.prefix))
        .collect();
    format!("{tables}; message prefixes {}", prefixes.join(", "))
}

/// Reads the relay's own metrics from Prometheus text; with `source`, only that source's series
/// (a multi-source relay labels every series with `source`).
pub fn relay_view(text: &str, source: Option<&str>) -> RelayView {
    RelayView::from(&SourceStatus::from_metrics(text, source))
}

impl From<&SourceStatus> for RelayView {
    /// The terminal view's part of the relay's document.
    fn from(s: &SourceStatus) -> RelayView {
        RelayView {
            streaming: s.streaming,
            ready: s.ready,
            time_lag_secs: s.lag_secs,
            heartbeat_age_secs: s.heartbeat_age_secs,
            alert_levels: s
                .alerts
                .iter()
                .map(|a| (a.alert.clone(), a.level))
                .collect(),
            events_produced: s.events_produced,
            inflight_events: s.inflight_events,
            loss_forecast_secs: s.loss_forecast_secs,
        }
    }
}

impl StatusReport {
    /// The worst level found: the local findings, the relay's alerts, missing or lost slots.
    pub fn worst(&self) -> Option<Severity> {
        let slot_critical = match &self.snapshot.slot {
            None => true,
            Some(s) => s.is_lost(),
        };
        let relay = self
            .relay
            .as_ref()
            .ok()
            .map(|v| v.alert_levels.iter().map(|(_, l)| *l).fold(0.0, f64::max));
        let relay = match relay {
            Some(l) if l >= 2.0 => Some(Severity::Critical),
            Some(l) if l >= 1.0 => Some(Severity::Warning),
            _ => None,
        };
        let local = self.findings.iter().filter_map(|f| f.level).max();
        let slot = slot_critical.then_some(Severity::Critical);
        [local, relay, slot].into_iter().flatten().max()
    }
}

/// `public.outbox: 12 live, 3 dead tuples, 48.0 KiB, vacuumed 2m 0s ago, oldest row 1.5s`.
pub fn table_line(t: &Result<TableHealth, String>) -> String {
    let t = match t {
        Ok(t) => t,
        Err(e) => return format!("UNREADABLE: {e}"),
    };
    let parts = if t.partitions == 1 {
        String::new()
    } else {
        format!(", {} partitions", t.partitions)
    };
    let vacuumed = t.last_vacuum_age.map_or("never vacuumed".into(), |a| {
        format!("vacuumed {} ago", human_duration(a))
    });
    let oldest = t.oldest_row_age.map_or(String::new(), |a| {
        format!(", oldest row {}", human_duration(a))
    });
    format!(
        "{}: {} live, {} dead tuples, {}{parts}, {vacuumed}{oldest}",
        t.table,
        t.live_tuples,
        t.dead_tuples,
        human_bytes(t.size_bytes.max(0) as u64)
    )
}

mod screen;
pub mod watch;

#[cfg(test)]
mod tests;
