//! The `[[outbox]]` section: which table, and how its columns become a record's topic, key,
//! value and headers; checked when the config is loaded, before connecting to anything.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{DebeziumOptions, OptionsError};

/// How one outbox table maps to Kafka records. One `[[outbox]]` section in the config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxTable {
    /// Schema-qualified table name, e.g. `public.outbox`. Only INSERTs into it are published.
    #[serde(default = "default_table")]
    pub table: String,
    /// Topic template. `{column}` is replaced by that column's value; anything else is literal.
    /// Debezium default: `outbox.event.{aggregatetype}`. A topic column: `{topic}`. Fixed: `orders`.
    /// Left at its default when `[outbox.debezium]` routes (`route.by.field`, `route.topic.*`).
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Column whose text becomes the record key (and so picks the partition). Must not be NULL.
    #[serde(default = "default_key_column")]
    pub key_column: String,
    /// Column whose text becomes the record value. NULL becomes a record with no value.
    #[serde(default = "default_payload_column")]
    pub payload_column: String,
    /// Kafka header name → column. Debezium default: `id` = `id`, plus `eventType` = `type`.
    #[serde(default = "default_headers")]
    pub headers: BTreeMap<String, String>,
    /// `[outbox.debezium]`: Debezium's converter and Outbox Event Router options, verbatim
    /// ([`DebeziumOptions`]). Absent: the records as before (StringConverter-compatible).
    #[serde(default)]
    pub debezium: Option<DebeziumOptions>,
    /// A timestamp column of the table (e.g. `created_at`). Only for monitoring: the slot
    /// monitor reports the age of the oldest row (`outbox_relay_outbox_oldest_row_age_seconds`),
    /// which shows a cleanup job that stopped. Unset (default): not measured. Index it: the
    /// monitor reads `min(column)` every `monitor.outbox_stats_interval_ms`.
    #[serde(default)]
    pub created_at_column: Option<String>,
}

pub(super) fn default_table() -> String {
    "public.outbox".into()
}
pub(super) fn default_topic() -> String {
    "outbox.event.{aggregatetype}".into()
}
pub(super) fn default_key_column() -> String {
    "aggregateid".into()
}
pub(super) fn default_payload_column() -> String {
    "payload".into()
}
pub(super) fn default_headers() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("id".into(), "id".into()),
        ("eventType".into(), "type".into()),
    ])
}

impl Default for OutboxTable {
    fn default() -> Self {
        Self {
            table: default_table(),
            topic: default_topic(),
            key_column: default_key_column(),
            payload_column: default_payload_column(),
            headers: default_headers(),
            debezium: None,
            created_at_column: None,
        }
    }
}

impl OutboxTable {
    /// `(schema, table)`; a name without a schema means `public`.
    pub fn qualified_name(&self) -> (String, String) {
        match self.table.split_once('.') {
            Some((s, t)) => (s.to_string(), t.to_string()),
            None => ("public".to_string(), self.table.clone()),
        }
    }

    /// Every column the mapping reads, with its role (for error messages): the topic
    /// template's columns, the key, the payload and the header columns. `setup` and the
    /// preflight check them against the table, so a typo fails before the first row.
    pub fn mapped_columns(&self) -> Vec<(String, String)> {
        let mut cols = Vec::new();
        let (parts, role) = self.topic_parts();
        for p in parts.unwrap_or_default() {
            if let Part::Column(c) = p {
                cols.push((c, role.to_string()));
            }
        }
        cols.push((self.key_column.clone(), "the key".to_string()));
        cols.push((self.payload_column.clone(), "the payload".to_string()));
        for (header, column) in &self.headers {
            cols.push((column.clone(), format!("header {header:?}")));
        }
        if let Some(d) = &self.debezium {
            cols.extend(d.mapped_columns());
        }
        cols
    }

    /// Checks the mapping itself (not the table). Returns the first problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (schema, table) = self.qualified_name();
        if schema.is_empty() || table.is_empty() || table.contains('.') {
            return Err(ConfigError::BadTableName(self.table.clone()));
        }
        if let Some(d) = &self.debezium {
            d.validate()?;
            if d.route_by_field().is_some() && self.topic != default_topic() {
                return Err(ConfigError::TopicAndRoute(self.topic.clone()));
            }
        }
        validate_mapping(&self.topic, &self.key_column, &self.payload_column)
    }

    /// The topic's parts and their role: the `route.by.field` column when `[outbox.debezium]`
    /// routes (its value then goes through `route.topic.regex`), else the `topic` template.
    pub(super) fn topic_parts(&self) -> (Result<Vec<Part>, ConfigError>, &'static str) {
        match self.debezium.as_ref().and_then(|d| d.route_by_field()) {
            Some(c) => (
                Ok(vec![Part::Column(c.to_string())]),
                "[outbox.debezium] \"route.by.field\"",
            ),
            None => (parse_template(&self.topic), "part of the topic"),
        }
    }
}

/// The checks shared by `[[outbox]]` and `[[message]]`: a valid topic template and named key
/// and payload columns (fields).
pub(super) fn validate_mapping(topic: &str, key: &str, payload: &str) -> Result<(), ConfigError> {
    parse_template(topic)?;
    for (name, what) in [(key, "key_column"), (payload, "payload_column")] {
        if name.is_empty() {
            return Err(ConfigError::EmptyColumn(what));
        }
    }
    Ok(())
}

/// A mistake in the routing configuration, found before connecting to anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("outbox table name {0:?} is not of the form schema.table")]
    BadTableName(String),
    #[error("outbox topic template {0:?} has an unbalanced '{{' or '}}'")]
    BadTemplate(String),
    #[error("outbox {0} is empty")]
    EmptyColumn(&'static str),
    #[error(transparent)]
    Debezium(#[from] OptionsError),
    #[error(
        "outbox topic = {0:?} and [outbox.debezium] \"route.by.field\" / \"route.topic.regex\" / \
         \"route.topic.replacement\" both choose the topic: remove `topic` to route as Debezium \
         does, or the route.* keys to use the template"
    )]
    TopicAndRoute(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Part {
    Literal(String),
    Column(String),
}

pub(super) fn parse_template(t: &str) -> Result<Vec<Part>, ConfigError> {
    let bad = || ConfigError::BadTemplate(t.to_string());
    let mut parts = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(bad());
        }
        if open > 0 {
            parts.push(Part::Literal(rest[..open].to_string()));
        }
        let close = rest[open..].find('}').ok_or_else(bad)? + open;
        let col = &rest[open + 1..close];
        if col.is_empty() || col.contains('{') {
            return Err(bad());
        }
        parts.push(Part::Column(col.to_string()));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest.to_string()));
    }
    if parts.is_empty() {
        return Err(bad());
    }
    Ok(parts)
}
