//! `outbox-relay apply status`: the consumer's positions against the logs' bounds (lag, and
//! positions outside the log), its dead letters and its oldest claim, on one screen, from the
//! database and Kafka (no running applier needed); when the local applier's endpoint answers, its
//! `/status.json` (the console's data) adds the partitions it halted, with their reason.

use std::{fmt::Write, time::Duration};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::document::{
    ApplierStatus, DeadLetter, DeadLetterTopic, NEWEST_DEAD_LETTERS, StoreView, redrive_command,
};
use outbox_service::http_client::{self as http, Target};

use crate::{config::ApplyConfig, error::ApplyError, postgres::store};

/// One partition's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    pub topic: String,
    pub partition: i32,
    pub position: i64,
    /// The log's start and end, when Kafka answered.
    pub log: Option<(i64, i64)>,
}

impl PartitionStatus {
    pub fn lag(&self) -> Option<i64> {
        self.log.map(|(_, end)| (end - self.position).max(0))
    }

    /// The stored position is outside the log (the applier does not start the partition).
    pub fn out_of_log(&self) -> bool {
        self.log
            .is_some_and(|(start, end)| self.position < start || self.position > end)
    }
}

#[derive(Debug, Clone)]
pub struct Report {
    pub consumer: String,
    pub partitions: Vec<PartitionStatus>,
    /// Dead-lettered records per topic.
    pub dead_letters: Vec<(String, i64)>,
    /// Claims of this consumer and the age of the oldest, in seconds.
    pub claims: i64,
    pub oldest_claim_s: Option<f64>,
    /// The local applier's own view (its `/status.json`, the console's data), when its
    /// endpoint answers: the partitions it applies, halted ones with their reason.
    pub running: Result<ApplierStatus, String>,
}

impl Report {
    /// Anything an operator must act on: a position outside the log.
    pub fn alarming(&self) -> bool {
        self.partitions.iter().any(PartitionStatus::out_of_log)
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "consumer {:?}", self.consumer);
        let _ = writeln!(
            s,
            "{:<48} {:>12} {:>12} {:>12} {:>10}",
            "partition", "position", "log start", "log end", "lag"
        );
        for p in &self.partitions {
            let (start, end) = p.log.map_or(("?".into(), "?".into()), |(a, b)| {
                (a.to_string(), b.to_string())
            });
            let lag = p.lag().map_or("?".into(), |l| l.to_string());
            let flag = if p.out_of_log() {
                "  OUTSIDE THE LOG: see docs/inbox.md"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "{:<48} {:>12} {:>12} {:>12} {:>10}{flag}",
                format!("{}[{}]", p.topic, p.partition),
                p.position,
                start,
                end,
                lag
            );
        }
        if self.partitions.is_empty() {
            let _ = writeln!(s, "(no position stored yet)");
        }
        let total: i64 = self.dead_letters.iter().map(|(_, n)| n).sum();
        let by_topic: Vec<String> = self
            .dead_letters
            .iter()
            .map(|(t, n)| format!("{t}: {n}"))
            .collect();
        let _ = writeln!(
            s,
            "dead letters: {total}{}",
            if by_topic.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_topic.join(", "))
            }
        );
        let oldest = self
            .oldest_claim_s
            .map_or("none".into(), |a| format!("{:.0} s ago", a));
        let _ = writeln!(s, "claims: {} (oldest {oldest})", self.claims);
        match &self.running {
            Ok(r) => {
                let halted: Vec<String> = r
                    .partitions
                    .iter()
                    .filter_map(|p| {
                        let why = p.halted.as_ref()?;
                        Some(format!("{}[{}] HALTED: {why}", p.topic, p.partition))
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "running applier: {} partitions assigned, {} halted",
                    r.partitions.len(),
                    halted.len()
                );
                for h in halted {
                    let _ = writeln!(s, "  {h}");
                }
                for p in r
                    .partitions
                    .iter()
                    .filter(|p| p.retrying && p.halted.is_none())
                {
                    let why = p.last_error.as_deref().unwrap_or("?");
                    let _ = writeln!(s, "  {}[{}] retrying: {why}", p.topic, p.partition);
                }
            }
            Err(e) => {
                let _ = writeln!(s, "running applier: no report ({e})");
            }
        }
        s
    }
}

fn quoted(name: &str) -> String {
    let (schema, table) = name.split_once('.').expect("validated");
    format!(
        "{}.{}",
        outbox_service::postgres::quote_ident(schema),
        outbox_service::postgres::quote_ident(table)
    )
}

/// Collects the report.
pub async fn collect(cfg: &ApplyConfig) -> Result<Report, ApplyError> {
    let client = store::connect(cfg, "status").await?;
    let a = &cfg.apply;
    let rows = client
        .query(
            &format!(
                "SELECT topic, partition, next_offset FROM {} WHERE consumer = $1 ORDER BY 1, 2",
                quoted(&a.offsets_table)
            ),
            &[&a.consumer],
        )
        .await
        .map_err(ApplyError::pg(format!("reading {}", a.offsets_table)))?;
    let stored: Vec<(String, i32, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let kafka_cfg = crate::kafka::reader::client_config(cfg);
    // librdkafka's calls block: off the runtime's only thread.
    let partitions = tokio::task::spawn_blocking(move || {
        let kafka: BaseConsumer = kafka_cfg
            .create()
            .map_err(ApplyError::kafka("creating a Kafka client"))?;
        Ok::<_, ApplyError>(
            stored
                .into_iter()
                .map(|(topic, partition, position)| {
                    let log = kafka
                        .fetch_watermarks(&topic, partition, Duration::from_secs(5))
                        .ok();
                    PartitionStatus {
                        topic,
                        partition,
                        position,
                        log,
                    }
                })
                .collect::<Vec<_>>(),
        )
    })
    .await
    .map_err(|e| ApplyError::Precondition(format!("the Kafka client's thread failed: {e}")))??;
    let store = store_report(&client, cfg).await?;
    let running = running(cfg).await;
    Ok(Report {
        consumer: a.consumer.clone(),
        partitions,
        dead_letters: store
            .dead_letters
            .iter()
            .map(|d| (d.topic.clone(), d.count))
            .collect(),
        claims: store.claims,
        oldest_claim_s: store.oldest_claim_secs,
        running,
    })
}

/// The local applier's `/status.json`, if its endpoint is on a fixed port and answers.
async fn running(cfg: &ApplyConfig) -> Result<ApplierStatus, String> {
    if !cfg.http.enabled || cfg.http.listen.port() == 0 {
        return Err("http endpoint disabled or on a random port".into());
    }
    let t = Target::local(cfg.http.listen, "/status.json");
    match http::get(&t, Duration::from_secs(2)).await {
        Ok((s, body)) if s.is_success() => serde_json::from_str(&body)
            .map_err(|e| format!("{} answered a document it cannot read: {e}", t.redacted())),
        Ok((s, _)) => Err(format!("{} answered {s}", t.redacted())),
        Err(e) => Err(format!("{} not reachable: {e}", t.redacted())),
    }
}

/// The consumer's dead letters (count and newest few per topic) and claims: what `apply
/// status` prints and the applier's console shows.
pub(crate) async fn store_report(
    client: &tokio_postgres::Client,
    cfg: &ApplyConfig,
) -> Result<StoreView, ApplyError> {
    let a = &cfg.apply;
    let dead = quoted(&a.dead_letter_table);
    let mut dead_letters: Vec<DeadLetterTopic> = client
        .query(
            &format!(
                "SELECT topic, count(*) FROM {dead} WHERE consumer = $1 GROUP BY 1 ORDER BY 1"
            ),
            &[&a.consumer],
        )
        .await
        .map_err(ApplyError::pg(format!("reading {}", a.dead_letter_table)))?
        .iter()
        .map(|r| DeadLetterTopic {
            topic: r.get(0),
            count: r.get(1),
            newest: Vec::new(),
            redrive: redrive_command(r.get(0)),
        })
        .collect();
    let newest = client
        .query(
            &format!(
                "SELECT topic, partition, \"offset\", event_type, error, failed_at::text FROM \
                 (SELECT *, row_number() OVER (PARTITION BY topic ORDER BY failed_at DESC, \
                 \"offset\" DESC) AS n FROM {dead} WHERE consumer = $1) d WHERE n <= $2 \
                 ORDER BY topic, failed_at DESC, \"offset\" DESC"
            ),
            &[&a.consumer, &NEWEST_DEAD_LETTERS],
        )
        .await
        .map_err(ApplyError::pg(format!("reading {}", a.dead_letter_table)))?;
    for r in newest {
        let topic: String = r.get(0);
        if let Some(t) = dead_letters.iter_mut().find(|t| t.topic == topic) {
            t.newest.push(DeadLetter {
                partition: r.get(1),
                offset: r.get(2),
                event_type: r.get(3),
                error: r.get(4),
                failed_at: r.get(5),
            });
        }
    }
    let claims = client
        .query_one(
            &format!(
                "SELECT count(*), extract(epoch from now() - min(processed_at))::float8 FROM {} \
                 WHERE consumer = $1",
                quoted(&a.inbox_table)
            ),
            &[&a.consumer],
        )
        .await
        .map_err(ApplyError::pg(format!("reading {}", a.inbox_table)))?;
    Ok(StoreView {
        read_at: outbox_service::console::unix(std::time::SystemTime::now()),
        dead_letters,
        claims: claims.get(0),
        oldest_claim_secs: claims.get(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(position: i64, log: Option<(i64, i64)>) -> PartitionStatus {
        PartitionStatus {
            topic: "t".into(),
            partition: 0,
            position,
            log,
        }
    }

    #[test]
    fn lag_and_positions_outside_the_log() {
        assert_eq!(p(7, Some((0, 10))).lag(), Some(3));
        assert!(!p(7, Some((0, 10))).out_of_log());
        assert!(p(3, Some((5, 10))).out_of_log(), "below the log start");
        assert!(p(12, Some((5, 10))).out_of_log(), "beyond the end");
        assert_eq!(p(7, None).lag(), None);
        let r = Report {
            consumer: "c".into(),
            partitions: vec![p(3, Some((5, 10)))],
            dead_letters: vec![("t".into(), 2)],
            claims: 4,
            oldest_claim_s: Some(60.0),
            running: Err("not reachable".into()),
        };
        assert!(r.alarming());
        let text = r.render();
        assert!(
            text.contains("t[0]") && text.contains("OUTSIDE THE LOG"),
            "{text}"
        );
        assert!(
            text.contains("dead letters: 2 (t: 2)") && text.contains("claims: 4 (oldest 60 s ago)"),
            "{text}"
        );
        assert!(
            text.contains("running applier: no report (not reachable)"),
            "{text}"
        );
    }

    #[test]
    fn the_running_appliers_halted_and_retrying_partitions_are_listed() {
        let view = |partition, halted: Option<&str>, retrying, last_error: Option<&str>| {
            crate::operate::document::PartitionView {
                topic: "t".into(),
                partition,
                position: Some(1),
                log_end: Some(2),
                lag: Some(1),
                halted: halted.map(str::to_string),
                retrying,
                last_error: last_error.map(str::to_string),
                last_error_at: last_error.map(|_| 1.8e9),
            }
        };
        let running = ApplierStatus {
            kind: "applier".into(),
            at: 1.8e9,
            version: "0".into(),
            consumer: "c".into(),
            group: "g".into(),
            joined: true,
            partitions: vec![
                view(0, Some("handler failed"), false, None),
                view(1, None, true, Some("connection refused")),
                view(2, None, false, Some("deadlock detected")),
            ],
            records_per_sec: Some(0.0),
            store: None,
            store_error: None,
        };
        let r = Report {
            consumer: "c".into(),
            partitions: vec![],
            dead_letters: vec![],
            claims: 0,
            oldest_claim_s: None,
            running: Ok(running),
        };
        let text = r.render();
        assert!(text.contains("3 partitions assigned, 1 halted"), "{text}");
        assert!(text.contains("t[0] HALTED: handler failed"), "{text}");
        assert!(text.contains("t[1] retrying: connection refused"), "{text}");
        assert!(
            !text.contains("t[2]"),
            "moved on since its last error: {text}"
        );
    }
}
