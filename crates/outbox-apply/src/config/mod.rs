//! The applier's configuration (`outbox-relay apply --config applier.toml`): the consumer's
//! PostgreSQL, the Kafka topics and group, the bookkeeping tables, and one `[[handler]]` per
//! event type. Loaded like the relay's (file, then `OUTBOX_RELAY__SECTION__KEY` variables,
//! unknown keys rejected, secrets redacted); documented in docs/configuration.md ("The
//! applier").
mod connections;
mod section;
#[cfg(test)]
mod tests;

use std::time::Duration;

use relay_core::apply::sql::Statement;
use serde::Deserialize;

pub use connections::{ApplyHttp, ApplyKafka, ApplyPostgres};
pub use section::{ApplyRetention, ApplySection, Handler, OnFailure};

use outbox_service::{
    config::load,
    postgres::{PgConnection, valid_identifier},
};

use outbox_service::config::{ConfigError, InvalidOption};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyConfig {
    /// The consumer's database, where the effects, the inbox and the offsets live.
    #[serde(default)]
    pub postgres: ApplyPostgres,
    /// The topics to read and the consumer group.
    pub kafka: ApplyKafka,
    /// Bookkeeping, batching and failure policy.
    pub apply: ApplySection,
    /// One entry per event type (`[[handler]]`).
    #[serde(default)]
    pub handler: Vec<Handler>,
    /// `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub http: ApplyHttp,
    /// Inbox cleanup.
    #[serde(default)]
    pub retention: ApplyRetention,
}

impl ApplyConfig {
    /// Loads `toml` through a file of its own (tests run in parallel: one file per call).
    #[cfg(test)]
    pub(crate) fn from_test_toml(toml: &str) -> Result<ApplyConfig, String> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("apply-config-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, toml).map_err(|e| e.to_string())?;
        let cfg = ApplyConfig::load(Some(&path), std::iter::empty()).map_err(|e| e.to_string());
        let _ = std::fs::remove_file(&path);
        cfg
    }

    /// Loads `path` (if given), applies `OUTBOX_RELAY__*` variables from `env`, validates.
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ApplyConfig, ConfigError> {
        let (mut table, origins) = load::read_table(path, env)?;
        load::check_entries(
            &table,
            &[("handler", |v| v.clone().try_into::<Handler>().map(drop))],
            &origins,
        )?;
        // `[postgres]`'s connection keys are the shared section's; the rest are ApplyPostgres's.
        let connection = PgConnection::take::<ApplyPostgres>(
            &mut table,
            connections::APPLICATION_NAME,
            "",
            &origins,
        )?;
        let mut cfg: ApplyConfig = load::deserialize(table, "", &origins)?;
        cfg.postgres.connection = connection;
        cfg.validate().map_err(ConfigError::Invalid)?;
        Ok(cfg)
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.apply.shutdown_timeout_ms)
    }

    /// The handler of `event_type`, if one is configured.
    pub fn handler_of(&self, event_type: &str) -> Option<(usize, &Handler)> {
        self.handler
            .iter()
            .enumerate()
            .find(|(_, h)| h.event_type == event_type)
    }

    fn validate(&self) -> Result<(), InvalidOption> {
        let bad = |key: &str, why: String| Err(InvalidOption::new(key, format!("{key}: {why}")));
        let k = &self.kafka;
        match (k.topics.is_empty(), &k.topic_pattern) {
            (true, None) => {
                return bad(
                    "kafka.topics",
                    "set kafka.topics or kafka.topic_pattern".into(),
                );
            }
            (false, Some(_)) => {
                return bad(
                    "kafka.topic_pattern",
                    "set kafka.topics or kafka.topic_pattern, not both".into(),
                );
            }
            _ => {}
        }
        if k.group_id.trim().is_empty() {
            return bad("kafka.group_id", "must not be empty".into());
        }
        if self.apply.consumer.trim().is_empty() {
            return bad(
                "apply.consumer",
                "must not be empty: it names the claims in the inbox".into(),
            );
        }
        for (key, table) in [
            ("apply.inbox_table", &self.apply.inbox_table),
            ("apply.offsets_table", &self.apply.offsets_table),
            ("apply.dead_letter_table", &self.apply.dead_letter_table),
        ] {
            let parts: Vec<&str> = table.split('.').collect();
            if parts.len() != 2 || !parts.iter().all(|p| valid_identifier(p)) {
                return bad(
                    key,
                    format!("{table:?}: write schema.table with plain lower-case identifiers"),
                );
            }
        }
        if self.apply.batch_records == 0 {
            return bad("apply.batch_records", "must be at least 1".into());
        }
        if self.postgres.pool_size == 0 {
            return bad("postgres.pool_size", "must be at least 1".into());
        }
        self.postgres.connection.validate()?;
        let mut seen = std::collections::HashSet::new();
        for (i, h) in self.handler.iter().enumerate() {
            if !seen.insert(h.event_type.as_str()) {
                return bad(
                    &format!("handler[{i}].event_type"),
                    format!("{:?} has two handlers; keep one", h.event_type),
                );
            }
            if self.apply.ignore_types.contains(&h.event_type) {
                return bad(
                    &format!("handler[{i}].event_type"),
                    format!(
                        "{:?} is also in apply.ignore_types; it cannot be both",
                        h.event_type
                    ),
                );
            }
            if let Err(e) = Statement::parse(&h.sql, h.value.into()) {
                return bad(&format!("handler[{i}].sql"), e.to_string());
            }
        }
        if self.handler.is_empty() && self.apply.ignore_types.is_empty() {
            return bad("handler", "at least one [[handler]] is needed".into());
        }
        Ok(())
    }
}
