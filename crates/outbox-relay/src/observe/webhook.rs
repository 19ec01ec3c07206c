//! Webhook notifications of the built-in alerts: a plain JSON object, an Alertmanager
//! `POST /api/v2/alerts` array, or a Slack-style `{"text": ...}`.
//!
//! Invariants:
//! - The monitor never waits for a webhook: notifications go through a bounded queue to one
//!   sender task, in order; when the queue is full a notification is dropped and counted as an
//!   error. Each POST is tried three times.
//! - Every change of an alert's level is sent once; a firing alert is sent again every repeat
//!   interval ([`Repeater`]). For Alertmanager, whose alerts are identified by their labels
//!   (severity included), a change of severity resolves the old alert and fires the new one.
//! - Plain HTTP only (no TLS yet). The URL may carry a token (Slack), so logs name only its
//!   host and port, and the `Authorization` value is never logged.

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{Value, json};
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{
    config::{Config, WebhookFormat},
    observe::alert::{Active, AlertKind, Severity, Transition},
    telemetry::events::{
        WEBHOOK_DISABLED, WEBHOOK_ENABLED, WEBHOOK_FAILED, WEBHOOK_QUEUE_FULL, WEBHOOK_SENT,
    },
    telemetry::http_client::{self, Target},
    telemetry::metrics as m,
};

/// One message to send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Notification {
    pub(crate) kind: AlertKind,
    /// The level now; `None` = resolved.
    pub(crate) severity: Option<Severity>,
    /// The level before this change (`None` for a new alert or a repeat).
    pub(crate) previous: Option<Severity>,
    pub(crate) summary: String,
    pub(crate) action: &'static str,
    /// When the alert started firing.
    pub(crate) since: SystemTime,
    pub(crate) at: SystemTime,
    /// A reminder of an alert that is still firing.
    pub(crate) repeat: bool,
}

/// Decides which notifications are due: every transition, and repeats of firing alerts.
#[derive(Debug)]
pub(crate) struct Repeater {
    interval: Option<Duration>,
    /// Per firing alert: last sent, and when it started firing.
    firing: HashMap<AlertKind, (Instant, SystemTime)>,
}

impl Repeater {
    pub(crate) fn new(interval: Option<Duration>) -> Self {
        Self {
            interval,
            firing: HashMap::new(),
        }
    }

    pub(crate) fn due(
        &mut self,
        transitions: &[Transition],
        active: &[Active],
        now: Instant,
    ) -> Vec<Notification> {
        let at = SystemTime::now();
        let mut out = Vec::new();
        for t in transitions {
            let since = match (t.since, self.firing.get(&t.kind)) {
                (Some(s), _) => s,
                (None, Some(&(_, s))) => s,
                (None, None) => at,
            };
            if t.to.is_some() {
                self.firing.insert(t.kind, (now, since));
            } else {
                self.firing.remove(&t.kind);
            }
            out.push(Notification {
                kind: t.kind,
                severity: t.to,
                previous: t.from,
                summary: t.summary.clone(),
                action: t.action,
                since,
                at,
                repeat: false,
            });
        }
        let Some(every) = self.interval else {
            return out;
        };
        for a in active {
            let Some((last, _)) = self.firing.get_mut(&a.kind) else {
                continue;
            };
            if now.saturating_duration_since(*last) >= every {
                *last = now;
                out.push(Notification {
                    kind: a.kind,
                    severity: Some(a.severity),
                    previous: None,
                    summary: a.summary.clone(),
                    action: a.action,
                    since: a.since,
                    at,
                    repeat: true,
                });
            }
        }
        out
    }
}

/// Identifies the relay in every notification. No secrets.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) slot: String,
    pub(crate) database: String,
    pub(crate) server: String,
}

impl Context {
    pub(crate) fn from_config(cfg: &Config) -> Self {
        let pg = &cfg.postgres;
        Self {
            slot: pg.slot.clone(),
            database: pg.database.clone(),
            server: format!("{}:{}", pg.host, pg.port),
        }
    }
}

fn alertname(kind: AlertKind) -> &'static str {
    match kind {
        AlertKind::RetainedWal => "OutboxRelaySlotRetainedWal",
        AlertKind::TimeLag => "OutboxRelaySlotTimeLag",
        AlertKind::WalStatus => "OutboxRelaySlotWalStatus",
        AlertKind::SlotForecast => "OutboxRelaySlotForecast",
        AlertKind::Stalled => "OutboxRelayStalled",
        AlertKind::OutboxDeadTuples => "OutboxRelayOutboxDeadTuples",
    }
}

/// The request body for `format`.
pub(crate) fn body(format: WebhookFormat, ctx: &Context, n: &Notification) -> Value {
    let status = if n.severity.is_some() {
        "firing"
    } else {
        "resolved"
    };
    let severity = n.severity.or(n.previous).unwrap_or(Severity::Warning);
    match format {
        WebhookFormat::Json => json!({
            "source": "outbox-relay",
            "alert": n.kind.as_str(),
            "status": status,
            "severity": severity.as_str(),
            "previous_severity": n.previous.map(Severity::as_str),
            "repeat": n.repeat,
            "slot": ctx.slot,
            "database": ctx.database,
            "server": ctx.server,
            "summary": n.summary,
            "action": if n.severity.is_some() { n.action } else { "" },
            "started_at": rfc3339(n.since),
            "sent_at": rfc3339(n.at),
        }),
        WebhookFormat::Alertmanager => {
            let one = |sev: Severity, resolved: bool| {
                let mut a = json!({
                    "labels": {
                        "alertname": alertname(n.kind),
                        "alert": n.kind.as_str(),
                        "severity": sev.as_str(),
                        "service": "outbox-relay",
                        "slot": ctx.slot,
                        "database": ctx.database,
                        "server": ctx.server,
                    },
                    "annotations": {
                        "summary": n.summary,
                        "description": format!("{}. What to do: {}", n.summary, n.action),
                        "runbook": format!("docs/operations.md#{}", n.kind.as_str().replace('_', "-")),
                    },
                    "startsAt": rfc3339(n.since),
                });
                if resolved {
                    a["endsAt"] = json!(rfc3339(n.at));
                }
                a
            };
            let mut alerts = Vec::new();
            if let Some(prev) = n.previous
                && n.severity != Some(prev)
            {
                alerts.push(one(prev, true));
            }
            if let Some(sev) = n.severity {
                alerts.push(one(sev, false));
            }
            Value::Array(alerts)
        }
        WebhookFormat::Slack => {
            let head = match n.severity {
                Some(Severity::Critical) => ":rotating_light: *CRITICAL*",
                Some(Severity::Warning) => ":warning: *WARNING*",
                None => ":white_check_mark: *RESOLVED*",
            };
            let again = if n.repeat { " (still firing)" } else { "" };
            let mut text = format!(
                "{head} outbox-relay `{}`{again}: slot `{}` (database {} on {}): {}",
                n.kind.as_str(),
                ctx.slot,
                ctx.database,
                ctx.server,
                n.summary
            );
            if n.severity.is_some() {
                text.push_str(&format!("\n*What to do:* {}", n.action));
            }
            json!({ "text": text })
        }
    }
}

/// The sender task and its queue.
pub(crate) struct Dispatcher {
    tx: mpsc::Sender<Notification>,
    task: JoinHandle<()>,
}

const QUEUE: usize = 64;
const ATTEMPTS: u32 = 3;

impl Dispatcher {
    /// Starts the sender task; `None` when `alerts.webhook.url` is unset.
    pub(crate) fn spawn(cfg: &Config) -> Option<Dispatcher> {
        let w = &cfg.alerts.webhook;
        let url = w.url.as_ref()?;
        let target = match Target::parse(url.expose()) {
            Ok(t) => t,
            Err(e) => {
                // Config validation already rejected this; keep the relay running regardless.
                tracing::error!(error = %e, "{WEBHOOK_DISABLED}: alerts.webhook.url is invalid");
                return None;
            }
        };
        let (tx, mut rx) = mpsc::channel::<Notification>(QUEUE);
        let format = w.format;
        let timeout = Duration::from_millis(w.timeout_ms.max(1));
        let auth = w.authorization.as_ref().map(|s| s.expose().to_string());
        let ctx = Context::from_config(cfg);
        tracing::info!(target = %target.redacted(), format = ?format, "{WEBHOOK_ENABLED}");
        let task = crate::telemetry::source_scope::spawn(async move {
            while let Some(n) = rx.recv().await {
                let payload = body(format, &ctx, &n).to_string();
                let mut result = Err(String::new());
                for attempt in 1..=ATTEMPTS {
                    result =
                        http_client::post_json(&target, payload.clone(), auth.as_deref(), timeout)
                            .await
                            .map_err(|e| e.to_string());
                    if result.is_ok() {
                        break;
                    }
                    if attempt < ATTEMPTS {
                        tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
                    }
                }
                match result {
                    Ok(()) => {
                        metrics::counter!(m::WEBHOOK_NOTIFICATIONS, "result" => "ok").increment(1);
                        tracing::debug!(alert = n.kind.as_str(), "{WEBHOOK_SENT}");
                    }
                    Err(e) => {
                        metrics::counter!(m::WEBHOOK_NOTIFICATIONS, "result" => "error")
                            .increment(1);
                        tracing::warn!(
                            alert = n.kind.as_str(), target = %target.redacted(), error = %e,
                            "{WEBHOOK_FAILED}: notification dropped after {ATTEMPTS} attempts"
                        );
                    }
                }
            }
        });
        Some(Dispatcher { tx, task })
    }

    /// Queues `n`; never waits.
    pub(crate) fn send(&self, n: Notification) {
        if self.tx.try_send(n).is_err() {
            metrics::counter!(m::WEBHOOK_NOTIFICATIONS, "result" => "error").increment(1);
            tracing::warn!("{WEBHOOK_QUEUE_FULL}: a notification was dropped");
        }
    }

    /// Sends what is queued (bounded by `timeout`), then stops the task.
    pub(crate) async fn flush(self, timeout: Duration) {
        let Dispatcher { tx, mut task } = self;
        drop(tx);
        if tokio::time::timeout(timeout, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// `2026-01-02T03:04:05Z`, UTC.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context {
            slot: "s1".into(),
            database: "app".into(),
            server: "db:5432".into(),
        }
    }

    fn transition(from: Option<Severity>, to: Option<Severity>) -> Transition {
        Transition {
            kind: AlertKind::RetainedWal,
            from,
            to,
            summary: "the slot retains 2.0 GiB of WAL".into(),
            action: "do this",
            since: to.map(|_| UNIX_EPOCH + Duration::from_secs(86_400)),
        }
    }

    fn active(sev: Severity) -> Active {
        Active {
            kind: AlertKind::RetainedWal,
            severity: sev,
            summary: "the slot retains 3.0 GiB of WAL".into(),
            action: "do this",
            since: UNIX_EPOCH + Duration::from_secs(86_400),
            state: String::new(),
        }
    }

    #[test]
    fn transitions_are_sent_once_and_firing_alerts_repeat_on_the_interval() {
        let mut r = Repeater::new(Some(Duration::from_secs(60)));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let fire = [transition(None, Some(Severity::Warning))];
        let a = [active(Severity::Warning)];
        let n = r.due(&fire, &a, at(0));
        assert_eq!(n.len(), 1);
        assert!(!n[0].repeat && n[0].severity == Some(Severity::Warning));
        assert!(r.due(&[], &a, at(59)).is_empty());
        let n = r.due(&[], &a, at(60));
        assert_eq!(n.len(), 1);
        assert!(n[0].repeat && n[0].summary.contains("3.0 GiB"));
        assert!(r.due(&[], &a, at(100)).is_empty());
        let n = r.due(&[transition(Some(Severity::Warning), None)], &[], at(101));
        assert_eq!(n.len(), 1);
        assert_eq!(
            (n[0].severity, n[0].previous),
            (None, Some(Severity::Warning))
        );
        assert_eq!(
            n[0].since,
            UNIX_EPOCH + Duration::from_secs(86_400),
            "start kept"
        );
        assert!(r.due(&[], &[], at(500)).is_empty());

        let mut never = Repeater::new(None);
        assert_eq!(never.due(&fire, &a, at(0)).len(), 1);
        assert!(never.due(&[], &a, at(10_000)).is_empty());
    }

    #[test]
    fn plain_json_body() {
        let n = Repeater::new(None).due(
            &[transition(None, Some(Severity::Critical))],
            &[],
            Instant::now(),
        );
        let b = body(WebhookFormat::Json, &ctx(), &n[0]);
        assert_eq!(b["source"], "outbox-relay");
        assert_eq!(b["alert"], "retained_wal");
        assert_eq!(b["status"], "firing");
        assert_eq!(b["severity"], "critical");
        assert_eq!(b["slot"], "s1");
        assert_eq!(b["action"], "do this");
        assert_eq!(b["started_at"], "1970-01-02T00:00:00Z");
    }

    #[test]
    fn alertmanager_body_resolves_the_old_severity_on_escalation() {
        let n = Repeater::new(None).due(
            &[transition(
                Some(Severity::Warning),
                Some(Severity::Critical),
            )],
            &[],
            Instant::now(),
        );
        let b = body(WebhookFormat::Alertmanager, &ctx(), &n[0]);
        let alerts = b.as_array().unwrap();
        assert_eq!(alerts.len(), 2);
        assert_eq!(alerts[0]["labels"]["severity"], "warning");
        assert!(alerts[0]["endsAt"].is_string(), "old severity resolved");
        assert_eq!(alerts[1]["labels"]["severity"], "critical");
        assert_eq!(
            alerts[1]["labels"]["alertname"],
            "OutboxRelaySlotRetainedWal"
        );
        assert!(alerts[1].get("endsAt").is_none(), "firing: no end");
        assert!(
            alerts[1]["annotations"]["description"]
                .as_str()
                .unwrap()
                .contains("What to do: do this")
        );

        let n = Repeater::new(None).due(
            &[transition(Some(Severity::Critical), None)],
            &[],
            Instant::now(),
        );
        let b = body(WebhookFormat::Alertmanager, &ctx(), &n[0]);
        let alerts = b.as_array().unwrap();
        assert_eq!(alerts.len(), 1);
        assert_eq!(
            alerts[0]["labels"]["severity"], "critical",
            "same labels as when firing"
        );
        assert!(alerts[0]["endsAt"].as_str().unwrap() >= alerts[0]["startsAt"].as_str().unwrap());
    }

    #[test]
    fn slack_body_is_one_text_field() {
        let mut r = Repeater::new(None);
        let n = r.due(
            &[transition(None, Some(Severity::Warning))],
            &[],
            Instant::now(),
        );
        let b = body(WebhookFormat::Slack, &ctx(), &n[0]);
        let text = b["text"].as_str().unwrap();
        assert!(
            text.starts_with(":warning: *WARNING* outbox-relay `retained_wal`"),
            "{text}"
        );
        assert!(text.contains("*What to do:* do this"));
        assert_eq!(b.as_object().unwrap().len(), 1);
        let n = r.due(
            &[transition(Some(Severity::Warning), None)],
            &[],
            Instant::now(),
        );
        let text = body(WebhookFormat::Slack, &ctx(), &n[0])["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(text.starts_with(":white_check_mark: *RESOLVED*") && !text.contains("What to do"));
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // leap day 2024
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(4_102_444_799);
        assert_eq!(rfc3339(t), "2099-12-31T23:59:59Z");
    }
}
