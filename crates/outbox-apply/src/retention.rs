//! The inbox cleanup of the applier's consumer: claims older than the retention are deleted in
//! small batches (outbox-inbox's `RetentionJob`), and only with the permission of the crate's
//! rule (`outbox_inbox::decide`: the topics' `retention.ms + segment.ms` + a margin; compacted
//! or unbounded topics refused unless a replay window is stated).
//!
//! Invariant: the rule is checked again before every cleanup, against the consumer's topics as
//! they are then: the configured ones and every topic in its positions table (so topics that a
//! pattern added, on any instance, count), with their settings read from Kafka then (so a raised
//! `retention.ms` counts). A claim is never deleted while its event can still be replayed.

use std::time::Duration;

use outbox_inbox::{Allowed, Refusal, RetentionJob, TopicRetention, decide};
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::{
    config::ApplyConfig,
    error::ApplyError,
    postgres::store,
    telemetry::{
        events::{APPLY_INBOX_CLEANED, APPLY_INBOX_RETENTION_REFUSED},
        metrics as m,
    },
};

/// What the rule says now.
#[derive(Debug)]
pub(crate) enum Verdict {
    Clean(Allowed),
    /// No cleanup, and nothing is wrong (no interval, no topic yet, unbounded topics without a
    /// stated window and no explicit retention).
    Keep(String),
    /// The configured retention is shorter than a topic can replay.
    Refused(Refusal),
}

/// The retention to ask for: the configured one, else the longest replay bound (or the stated
/// window, for unbounded topics).
fn wanted(cfg: &ApplyConfig, topics: &[TopicRetention]) -> Result<Duration, String> {
    if let Some(ms) = cfg.retention.inbox_ms {
        return Ok(Duration::from_millis(ms));
    }
    let window = cfg.retention.replay_window_ms.map(Duration::from_millis);
    let mut longest = window.unwrap_or_default();
    for t in topics {
        match (t.replay_bound(), window) {
            (Some(b), _) => longest = longest.max(b),
            (None, Some(_)) => {}
            (None, None) => {
                return Err(format!(
                    "topic {:?} keeps records without a time bound: its claims are kept (set \
                     retention.replay_window_ms to the replay window you guarantee to clean them)",
                    t.topic
                ));
            }
        }
    }
    Ok(longest)
}

async fn topics(cfg: &ApplyConfig, client: &Client) -> Result<Vec<String>, ApplyError> {
    let (schema, table) = cfg.apply.offsets_table.split_once('.').expect("validated");
    let sql = format!(
        "SELECT DISTINCT topic FROM {}.{} WHERE consumer = $1",
        outbox_service::postgres::quote_ident(schema),
        outbox_service::postgres::quote_ident(table)
    );
    let mut out = cfg.kafka.topics.clone();
    for row in client
        .query(&sql, &[&cfg.apply.consumer])
        .await
        .map_err(ApplyError::pg("reading the consumer's topics"))?
    {
        let t: String = row.get(0);
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

/// Checks the retention against the consumer's topics as they are now.
pub(crate) async fn check(cfg: &ApplyConfig, client: &Client) -> Result<Verdict, ApplyError> {
    if cfg.retention.interval_ms == 0 {
        return Ok(Verdict::Keep("retention.interval_ms = 0".into()));
    }
    let names = topics(cfg, client).await?;
    if names.is_empty() {
        return Ok(Verdict::Keep("no topic applied yet".into()));
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let settings =
        outbox_inbox::kafka::topic_retention(&crate::kafka::reader::client_config(cfg), &refs)
            .await
            .map_err(|e| ApplyError::Precondition(format!("reading the topics' retention: {e}")))?;
    let retention = match wanted(cfg, &settings) {
        Ok(r) => r,
        Err(why) => return Ok(Verdict::Keep(why)),
    };
    let window = cfg.retention.replay_window_ms.map(Duration::from_millis);
    Ok(match decide(retention, &settings, window) {
        Ok(a) => Verdict::Clean(a),
        Err(r) => Verdict::Refused(r),
    })
}

/// Runs the check and the cleanup every `retention.interval_ms` until `stop`.
pub(crate) async fn run(cfg: std::sync::Arc<ApplyConfig>, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_millis(cfg.retention.interval_ms);
    if every.is_zero() {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Err(e) = once(&cfg).await {
            tracing::warn!(error = %e, "{APPLY_INBOX_RETENTION_REFUSED}: no cleanup this time; tried again in {} s", every.as_secs());
        }
    }
}

/// One check and, if allowed, one cleanup.
pub(crate) async fn once(cfg: &ApplyConfig) -> Result<Verdict, ApplyError> {
    let client = store::connect(cfg, "retention").await?;
    let verdict = check(cfg, &client).await?;
    match &verdict {
        Verdict::Clean(allowed) => {
            metrics::gauge!(m::APPLY_INBOX_RETENTION_REFUSED).set(0.0);
            metrics::gauge!(m::APPLY_INBOX_RETENTION_SECONDS)
                .set(allowed.retention().as_secs_f64());
            let job = RetentionJob::new()
                .table(&cfg.apply.inbox_table)
                .map_err(|e| ApplyError::Precondition(e.to_string()))?
                .consumer(&cfg.apply.consumer)
                .batch_rows(cfg.retention.batch_rows);
            let done = job
                .run(&client, allowed)
                .await
                .map_err(|e| ApplyError::Precondition(e.to_string()))?;
            metrics::counter!(m::APPLY_INBOX_DELETED).increment(done.rows);
            tracing::info!(
                rows = done.rows,
                batches = done.batches,
                retention_s = allowed.retention().as_secs(),
                "{APPLY_INBOX_CLEANED}"
            );
        }
        Verdict::Keep(why) => {
            metrics::gauge!(m::APPLY_INBOX_RETENTION_SECONDS).set(0.0);
            tracing::debug!(reason = %why, "{APPLY_INBOX_CLEANED}: nothing deleted");
        }
        Verdict::Refused(r) => {
            metrics::gauge!(m::APPLY_INBOX_RETENTION_REFUSED).set(1.0);
            tracing::error!(reason = %r, "{APPLY_INBOX_RETENTION_REFUSED}: the cleanup stopped; claims are kept");
        }
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, retention_ms: i64) -> TopicRetention {
        TopicRetention {
            topic: name.into(),
            retention_ms,
            segment_ms: 3_600_000,
            compacted: false,
        }
    }

    fn cfg(extra: &str) -> ApplyConfig {
        let toml = format!(
            "[kafka]\ngroup_id = \"g\"\ntopics = [\"t\"]\n[apply]\nconsumer = \"c\"\n\
             ignore_types = [\"x\"]\n{extra}"
        );
        ApplyConfig::from_test_toml(&toml).unwrap()
    }

    #[test]
    fn by_default_the_longest_replay_bound_is_kept() {
        let day = 86_400_000;
        let w = wanted(&cfg(""), &[topic("a", day), topic("b", 7 * day)]).unwrap();
        assert_eq!(
            w,
            Duration::from_millis(7 * day as u64 + 3_600_000) + Duration::from_secs(300)
        );
        assert!(decide(w, &[topic("a", day), topic("b", 7 * day)], None).is_ok());
    }

    #[test]
    fn unbounded_topics_keep_their_claims_unless_a_window_is_stated() {
        let why = wanted(&cfg(""), &[topic("a", -1)]).unwrap_err();
        assert!(why.contains("replay_window_ms"), "{why}");
        let c = cfg("[retention]\nreplay_window_ms = 5000000\n");
        assert_eq!(
            wanted(&c, &[topic("a", -1)]).unwrap(),
            Duration::from_millis(5_000_000)
        );
    }

    #[test]
    fn an_explicit_retention_is_what_the_rule_judges() {
        let c = cfg("[retention]\ninbox_ms = 1000\n");
        let w = wanted(&c, &[topic("a", 86_400_000)]).unwrap();
        assert!(matches!(
            decide(w, &[topic("a", 86_400_000)], None),
            Err(Refusal::ShorterThanTopic { .. })
        ));
    }
}
