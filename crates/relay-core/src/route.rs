//! Routing: which Kafka record an outbox row becomes.
//!
//! The defaults reproduce Debezium's Outbox Event Router on the table
//! `public.outbox(id, aggregatetype, aggregateid, type, payload)`, so consumers written against
//! Debezium do not change: topic `outbox.event.<aggregatetype>`, key `aggregateid`, value the
//! payload text, header `id` = the event id (and `eventType` = `type`).
//!
//! Columns are looked up **by name** each time a Relation message arrives ([`Plan::compile`]),
//! because a Relation can be re-sent mid-stream after `ALTER TABLE` with columns added or moved.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Deserialize;

use crate::{Lsn, checkpoint::Fingerprint, pgoutput::Relation, pgoutput::Value};

pub mod connect;
pub mod debezium;
mod message;

pub use debezium::{DebeziumOptions, OptionsError, PlanEnv};
pub use message::{MessageError, MessagePoison, MessageRoute, MessageRoutes, RoutedMessage};

/// Header carrying the LSN of the source transaction's commit record (`X/Y` text).
pub const HEADER_COMMIT_LSN: &str = "outbox-relay.commit-lsn";
/// Header carrying the source commit time, in microseconds since the Unix epoch (decimal text).
pub const HEADER_COMMIT_TIME: &str = "outbox-relay.commit-time-us";
/// Header carrying the position of the row in its transaction, from 0 (decimal text).
/// Together with the commit LSN it identifies an event across re-deliveries.
pub const HEADER_SEQ: &str = "outbox-relay.seq";

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

fn default_table() -> String {
    "public.outbox".into()
}
fn default_topic() -> String {
    "outbox.event.{aggregatetype}".into()
}
fn default_key_column() -> String {
    "aggregateid".into()
}
fn default_payload_column() -> String {
    "payload".into()
}
fn default_headers() -> BTreeMap<String, String> {
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
    fn topic_parts(&self) -> (Result<Vec<Part>, ConfigError>, &'static str) {
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
pub(crate) fn validate_mapping(topic: &str, key: &str, payload: &str) -> Result<(), ConfigError> {
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
enum Part {
    Literal(String),
    Column(String),
}

fn parse_template(t: &str) -> Result<Vec<Part>, ConfigError> {
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

/// A row that cannot become a Kafka record. The pipeline stops on it; nothing is skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error(
        "table {table} has no column {column:?} (configured as {role}); add the column or change \
         the [[outbox]] mapping for this table"
    )]
    MissingColumn {
        table: String,
        column: String,
        role: String,
    },
    #[error(
        "an event in {table} has NULL in {column:?}, which is configured as {role}; fix the writer \
         or the mapping (event at commit LSN {commit_lsn}, position {seq})"
    )]
    Null {
        table: String,
        column: String,
        role: String,
        commit_lsn: Lsn,
        seq: u64,
    },
    #[error(
        "an event in {table} routes to {topic:?}, which is not a valid Kafka topic name (1-249 \
         characters of a-z A-Z 0-9 . _ -); fix the writer, the topic template or the route.* \
         options (event at commit LSN {commit_lsn}, position {seq})"
    )]
    InvalidTopic {
        table: String,
        topic: String,
        commit_lsn: Lsn,
        seq: u64,
    },
    #[error(
        "an INSERT into {table} arrived with an unchanged-TOAST placeholder in {column:?}; \
         PostgreSQL always sends INSERT values in full, so the stream is corrupt: refusing to \
         publish a partial event"
    )]
    UnchangedToast { table: String, column: String },
    #[error(
        "outbox table {table} does not fit its [outbox.debezium] options: {detail}; fix the \
         column or the options"
    )]
    Debezium { table: String, detail: String },
    #[error(
        "an event in {table} has {detail} in {column:?}, which [outbox.debezium] uses as {role}; \
         fix the writer or the options (event at commit LSN {commit_lsn}, position {seq})"
    )]
    BadValue {
        table: String,
        column: String,
        role: &'static str,
        detail: String,
        commit_lsn: Lsn,
        seq: u64,
    },
    #[error(
        "an INSERT into {table} has {got} values but its Relation message described {expected} \
         columns; the stream is corrupt"
    )]
    Arity {
        table: String,
        expected: usize,
        got: usize,
    },
}

/// Where a row sits in the source stream: what the relay headers and error messages report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub commit_lsn: Lsn,
    pub commit_time_unix_us: i64,
    pub seq: u64,
}

/// A header's name. Names come from the configuration or are the relay's own, so each is
/// allocated once and every record shares it: a record's copy is a reference count.
pub type HeaderName = std::sync::Arc<str>;

/// One Kafka record, ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub topic: String,
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub headers: Vec<(HeaderName, Option<Bytes>)>,
    /// The partition, when `table.fields.additional.placement` sets it; else the key's.
    pub partition: Option<i32>,
    /// The record timestamp (ms), when `table.field.event.timestamp` sets it; else the
    /// producer's time.
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// Key and value bytes: what the in-flight byte limit counts.
    pub fn bytes(&self) -> u64 {
        (self.key.len() + self.value.as_ref().map_or(0, |v| v.len())) as u64
    }
}

/// The mapping of one outbox table compiled against one Relation message (column indexes).
#[derive(Debug, Clone)]
pub struct Plan {
    table: String,
    relation: Relation,
    columns: usize,
    topic: Vec<(Option<usize>, String)>,
    key: usize,
    key_name: String,
    payload: usize,
    /// The payload column is bytea: its `\\x<hex>` text goes out as the raw bytes.
    payload_bytea: bool,
    headers: Vec<(HeaderName, usize)>,
    relay_headers: bool,
    /// `[outbox.debezium]`, compiled; `None` is the plain (fast) path.
    compat: Option<Box<debezium::Compat>>,
    /// Index of the topic template's first column (or `route.by.field`): Debezium's
    /// `routedByValue`.
    routed_by: Option<usize>,
    /// What the topic's columns are configured as (for the NULL error).
    topic_role: &'static str,
    /// `route.topic.regex` + `route.topic.replacement`, applied to the `route.by.field` value.
    router: Option<debezium::TopicRouter>,
}

impl Plan {
    /// Resolves the configured column names against the columns the server described.
    pub fn compile(
        cfg: &OutboxTable,
        rel: &Relation,
        relay_headers: bool,
    ) -> Result<Plan, RouteError> {
        let env = PlanEnv {
            relay_headers,
            ..PlanEnv::default()
        };
        Plan::compile_in(cfg, rel, &env)
    }

    /// [`Plan::compile`] with the column facts `[outbox.debezium]` needs (NOT NULL columns, the
    /// run id).
    pub fn compile_in(
        cfg: &OutboxTable,
        rel: &Relation,
        env: &PlanEnv,
    ) -> Result<Plan, RouteError> {
        let relay_headers = env.relay_headers;
        let table = format!("{}.{}", rel.namespace, rel.name);
        let find = |column: &str, role: &str| {
            rel.columns
                .iter()
                .position(|c| c.name == column)
                .ok_or_else(|| RouteError::MissingColumn {
                    table: table.clone(),
                    column: column.to_string(),
                    role: role.to_string(),
                })
        };
        let (parts, topic_role) = cfg.topic_parts();
        let mut topic = Vec::new();
        for p in parts.expect("validated at config load") {
            topic.push(match p {
                Part::Literal(s) => (None, s),
                Part::Column(c) => (Some(find(&c, topic_role)?), c),
            });
        }
        let router = match &cfg.debezium {
            None => None,
            Some(d) => d.topic_router().map_err(|e| RouteError::Debezium {
                table: table.clone(),
                detail: e.to_string(),
            })?,
        };
        let key = find(&cfg.key_column, "the key")?;
        let payload = find(&cfg.payload_column, "the payload")?;
        let mut headers = Vec::with_capacity(cfg.headers.len());
        for (header, column) in &cfg.headers {
            headers.push((
                HeaderName::from(header.as_str()),
                find(column, &format!("header {header:?}"))?,
            ));
        }
        let routed_by = topic.iter().find_map(|(i, _)| *i);
        let compat = match &cfg.debezium {
            None => None,
            Some(opts) => {
                // Debezium writes the event id header first.
                let mut ordered = headers.clone();
                ordered.sort_by_key(|(name, _)| &**name != "id");
                let mapped = debezium::Mapped {
                    key,
                    payload,
                    headers: &ordered,
                };
                let compiled = debezium::Compat::compile(opts, rel, env, &mapped, &find).map_err(
                    |e| match e {
                        debezium::CompileError::Route(r) => r,
                        debezium::CompileError::Compat(c) => RouteError::Debezium {
                            table: table.clone(),
                            detail: c.to_string(),
                        },
                    },
                )?;
                Some(Box::new(compiled))
            }
        };
        Ok(Plan {
            table,
            relation: rel.clone(),
            columns: rel.columns.len(),
            topic,
            key,
            key_name: cfg.key_column.clone(),
            payload,
            payload_bytea: rel.columns[payload].type_oid == connect::oid::BYTEA,
            headers,
            relay_headers,
            compat,
            routed_by,
            topic_role,
            router,
        })
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// The table description this plan was compiled against.
    pub fn relation(&self) -> &Relation {
        &self.relation
    }

    /// What identifies the row in a checkpoint: the value of the column mapped to the `id`
    /// header (the event id of the Debezium layout), else a hash of the whole row.
    pub fn fingerprint(&self, tuple: &[Value]) -> Fingerprint {
        let id = self
            .headers
            .iter()
            .find(|(name, _)| &**name == "id")
            .and_then(|(_, i)| tuple.get(*i));
        match id {
            Some(Value::Text(b) | Value::Binary(b)) => Fingerprint::Id(b.clone()),
            _ => Fingerprint::of_row(tuple),
        }
    }

    /// The length of the topic name of `tuple` (valid UTF-8 as it always is): one allocation
    /// per record instead of one per growth.
    fn topic_len(&self, tuple: &[Value]) -> usize {
        let part = |(col, s): &(Option<usize>, String)| match col.map(|i| tuple.get(i)) {
            None => s.len(),
            Some(Some(Value::Text(b) | Value::Binary(b))) => b.len(),
            Some(_) => 0,
        };
        self.topic.iter().map(part).sum()
    }

    /// Builds the record for one inserted row.
    pub fn route(&self, tuple: &[Value], pos: Position) -> Result<Record, RouteError> {
        if tuple.len() != self.columns {
            return Err(RouteError::Arity {
                table: self.table.clone(),
                expected: self.columns,
                got: tuple.len(),
            });
        }
        let text = |i: usize| -> Result<Option<Bytes>, RouteError> {
            match &tuple[i] {
                Value::Null => Ok(None),
                Value::Text(b) | Value::Binary(b) => Ok(Some(b.clone())),
                Value::UnchangedToast => Err(RouteError::UnchangedToast {
                    table: self.table.clone(),
                    column: format!("#{i}"),
                }),
            }
        };
        let null = |column: &str, role: &str| RouteError::Null {
            table: self.table.clone(),
            column: column.to_string(),
            role: role.to_string(),
            commit_lsn: pos.commit_lsn,
            seq: pos.seq,
        };
        let mut topic = String::with_capacity(self.topic_len(tuple));
        for (col, s) in &self.topic {
            match col {
                None => topic.push_str(s),
                Some(i) => {
                    let v = text(*i)?.ok_or_else(|| null(s, self.topic_role))?;
                    topic.push_str(&String::from_utf8_lossy(&v));
                }
            }
        }
        if let Some(router) = &self.router {
            topic = router.route(topic);
        }
        if !valid_topic(&topic) {
            return Err(RouteError::InvalidTopic {
                table: self.table.clone(),
                topic,
                commit_lsn: pos.commit_lsn,
                seq: pos.seq,
            });
        }
        let key = text(self.key)?.ok_or_else(|| null(&self.key_name, "the key"))?;
        let mut value = text(self.payload)?;
        if self.payload_bytea {
            value = match value {
                None => None,
                Some(hex) => Some(
                    connect::raw_bytes(connect::ConnectType::Bytes, &hex).ok_or_else(|| {
                        self.bad_value(self.payload, "the payload", "not bytea hex text", pos)
                    })?,
                ),
            };
        }
        if let Some(compat) = &self.compat {
            return self.route_compat(compat, tuple, topic, key, value, pos);
        }
        let mut headers = Vec::with_capacity(self.headers.len() + 3);
        for (name, i) in &self.headers {
            headers.push((name.clone(), text(*i)?));
        }
        if self.relay_headers {
            push_relay_headers(&mut headers, pos);
        }
        Ok(Record {
            topic,
            key,
            value,
            headers,
            partition: None,
            timestamp_ms: None,
        })
    }

    fn bad_value(&self, i: usize, role: &'static str, detail: &str, pos: Position) -> RouteError {
        RouteError::BadValue {
            table: self.table.clone(),
            column: self.relation.columns[i].name.clone(),
            role,
            detail: detail.to_string(),
            commit_lsn: pos.commit_lsn,
            seq: pos.seq,
        }
    }

    /// The `[outbox.debezium]` path: every value as Debezium's converters encode it.
    fn route_compat(
        &self,
        compat: &debezium::Compat,
        tuple: &[Value],
        topic: String,
        key: Bytes,
        payload: Option<Bytes>,
        pos: Position,
    ) -> Result<Record, RouteError> {
        let mut row: Vec<Option<Bytes>> = Vec::with_capacity(tuple.len());
        for (i, v) in tuple.iter().enumerate() {
            row.push(match v {
                Value::Null => None,
                Value::Text(_) | Value::Binary(_) if i == self.payload => payload.clone(),
                Value::Text(b) | Value::Binary(b) => Some(b.clone()),
                Value::UnchangedToast => {
                    return Err(RouteError::UnchangedToast {
                        table: self.table.clone(),
                        column: self.relation.columns[i].name.clone(),
                    });
                }
            });
        }
        for (i, c) in self.relation.columns.iter().enumerate() {
            if c.type_oid == connect::oid::BYTEA
                && i != self.payload
                && let Some(hex) = &row[i]
            {
                row[i] = Some(
                    connect::raw_bytes(connect::ConnectType::Bytes, hex).ok_or_else(|| {
                        self.bad_value(i, "a bytea column", "not bytea hex text", pos)
                    })?,
                );
            }
        }
        let routed_by = self
            .routed_by
            .and_then(|i| row[i].as_ref())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let enc = compat
            .encode(&key, &row, self.payload, &routed_by)
            .map_err(|b| RouteError::BadValue {
                table: self.table.clone(),
                column: b
                    .column
                    .strip_prefix('#')
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| self.relation.columns.get(i))
                    .map_or(b.column.clone(), |c| c.name.clone()),
                role: b.role,
                detail: b.detail,
                commit_lsn: pos.commit_lsn,
                seq: pos.seq,
            })?;
        let mut headers = enc.headers;
        if self.relay_headers {
            push_relay_headers(&mut headers, pos);
        }
        Ok(Record {
            topic,
            key: enc.key,
            value: enc.value,
            headers,
            partition: enc.partition,
            timestamp_ms: enc.timestamp_ms,
        })
    }
}

/// `relay.relay_headers`: the commit LSN, commit time and position of the source change.
/// Every record carries them, so they cost one allocation in all: the names are shared, the
/// three values are slices of one buffer, and the numbers are written without the formatting
/// machinery.
fn push_relay_headers(headers: &mut Vec<(HeaderName, Option<Bytes>)>, pos: Position) {
    static NAMES: std::sync::LazyLock<[HeaderName; 3]> = std::sync::LazyLock::new(|| {
        [HEADER_COMMIT_LSN, HEADER_COMMIT_TIME, HEADER_SEQ].map(HeaderName::from)
    });
    let lsn = pos.commit_lsn.to_text_bytes();
    let mut num = itoa::Buffer::new();
    let mut buf = bytes::BytesMut::with_capacity(lsn.len() + 20 + 20);
    buf.extend_from_slice(&lsn);
    buf.extend_from_slice(num.format(pos.commit_time_unix_us).as_bytes());
    let time_end = buf.len();
    buf.extend_from_slice(num.format(pos.seq).as_bytes());
    let all = buf.freeze();
    let [lsn_name, time_name, seq_name] = &*NAMES;
    headers.push((lsn_name.clone(), Some(all.slice(..lsn.len()))));
    headers.push((time_name.clone(), Some(all.slice(lsn.len()..time_end))));
    headers.push((seq_name.clone(), Some(all.slice(time_end..))));
}

/// Kafka's rule for topic names (`Topic.validate` in the Java client).
pub fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests;
