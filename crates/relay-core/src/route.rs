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

mod message;

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
        for p in parse_template(&self.topic).unwrap_or_default() {
            if let Part::Column(c) = p {
                cols.push((c, "part of the topic".to_string()));
            }
        }
        cols.push((self.key_column.clone(), "the key".to_string()));
        cols.push((self.payload_column.clone(), "the payload".to_string()));
        for (header, column) in &self.headers {
            cols.push((column.clone(), format!("header {header:?}")));
        }
        cols
    }

    /// Checks the mapping itself (not the table). Returns the first problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (schema, table) = self.qualified_name();
        if schema.is_empty() || table.is_empty() || table.contains('.') {
            return Err(ConfigError::BadTableName(self.table.clone()));
        }
        validate_mapping(&self.topic, &self.key_column, &self.payload_column)
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
         characters of a-z A-Z 0-9 . _ -); fix the writer or the topic template (event at commit \
         LSN {commit_lsn}, position {seq})"
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

/// One Kafka record, ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub topic: String,
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
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
    headers: Vec<(String, usize)>,
    relay_headers: bool,
}

impl Plan {
    /// Resolves the configured column names against the columns the server described.
    pub fn compile(
        cfg: &OutboxTable,
        rel: &Relation,
        relay_headers: bool,
    ) -> Result<Plan, RouteError> {
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
        let parts = parse_template(&cfg.topic).expect("validated at config load");
        let mut topic = Vec::with_capacity(parts.len());
        for p in parts {
            topic.push(match p {
                Part::Literal(s) => (None, s),
                Part::Column(c) => (Some(find(&c, "part of the topic")?), c),
            });
        }
        let key = find(&cfg.key_column, "the key")?;
        let payload = find(&cfg.payload_column, "the payload")?;
        let mut headers = Vec::with_capacity(cfg.headers.len());
        for (header, column) in &cfg.headers {
            headers.push((header.clone(), find(column, &format!("header {header:?}"))?));
        }
        Ok(Plan {
            table,
            relation: rel.clone(),
            columns: rel.columns.len(),
            topic,
            key,
            key_name: cfg.key_column.clone(),
            payload,
            headers,
            relay_headers,
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
            .find(|(name, _)| name == "id")
            .and_then(|(_, i)| tuple.get(*i));
        match id {
            Some(Value::Text(b) | Value::Binary(b)) => Fingerprint::Id(b.clone()),
            _ => Fingerprint::of_row(tuple),
        }
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
        let mut topic = String::new();
        for (col, s) in &self.topic {
            match col {
                None => topic.push_str(s),
                Some(i) => {
                    let v = text(*i)?.ok_or_else(|| null(s, "part of the topic"))?;
                    topic.push_str(&String::from_utf8_lossy(&v));
                }
            }
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
        let value = text(self.payload)?;
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
        })
    }
}

/// `relay.relay_headers`: the commit LSN, commit time and position of the source change.
fn push_relay_headers(headers: &mut Vec<(String, Option<Bytes>)>, pos: Position) {
    headers.push((
        HEADER_COMMIT_LSN.into(),
        Some(pos.commit_lsn.to_string().into()),
    ));
    headers.push((
        HEADER_COMMIT_TIME.into(),
        Some(pos.commit_time_unix_us.to_string().into()),
    ));
    headers.push((HEADER_SEQ.into(), Some(pos.seq.to_string().into())));
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
mod tests {
    use super::*;
    use crate::pgoutput::Column;

    fn rel(cols: &[&str]) -> Relation {
        Relation {
            oid: 1,
            namespace: "public".into(),
            name: "outbox".into(),
            columns: cols
                .iter()
                .map(|c| Column {
                    name: c.to_string(),
                    type_oid: 25,
                })
                .collect(),
        }
    }
    fn t(s: &str) -> Value {
        Value::Text(Bytes::copy_from_slice(s.as_bytes()))
    }
    const POS: Position = Position {
        commit_lsn: Lsn(0x10),
        commit_time_unix_us: 5,
        seq: 2,
    };

    #[test]
    fn debezium_defaults_route_by_aggregate_type() {
        let r = rel(&["id", "aggregatetype", "aggregateid", "type", "payload"]);
        let plan = Plan::compile(&OutboxTable::default(), &r, false).unwrap();
        let rec = plan
            .route(
                &[
                    t("e-1"),
                    t("order"),
                    t("o-7"),
                    t("OrderCreated"),
                    t("{\"a\": 1}"),
                ],
                POS,
            )
            .unwrap();
        assert_eq!(rec.topic, "outbox.event.order");
        assert_eq!(rec.key, "o-7");
        assert_eq!(rec.value.as_deref(), Some(&b"{\"a\": 1}"[..]));
        assert_eq!(
            rec.headers,
            vec![
                ("eventType".to_string(), Some(Bytes::from("OrderCreated"))),
                ("id".to_string(), Some(Bytes::from("e-1"))),
            ]
        );
    }

    #[test]
    fn seed_layout_takes_the_topic_from_a_column_and_adds_relay_headers() {
        let cfg = OutboxTable {
            topic: "{topic}".into(),
            key_column: "aggregate_id".into(),
            headers: BTreeMap::from([("eventType".into(), "event_type".into())]),
            ..OutboxTable::default()
        };
        let r = rel(&["id", "aggregate_id", "topic", "event_type", "payload"]);
        let plan = Plan::compile(&cfg, &r, true).unwrap();
        let rec = plan.route(
            &[t("1"), t("a-1"), t("payments"), t("Paid"), Value::Null],
            POS,
        );
        let rec = rec.unwrap();
        assert_eq!(rec.topic, "payments");
        assert_eq!(rec.key, "a-1");
        assert_eq!(rec.value, None);
        assert_eq!(
            rec.headers[1],
            (HEADER_COMMIT_LSN.to_string(), Some(Bytes::from("0/10")))
        );
        assert_eq!(
            rec.headers[2],
            (HEADER_COMMIT_TIME.to_string(), Some(Bytes::from("5")))
        );
        assert_eq!(
            rec.headers[3],
            (HEADER_SEQ.to_string(), Some(Bytes::from("2")))
        );
    }

    #[test]
    fn columns_are_found_by_name_whatever_their_position() {
        let r = rel(&[
            "payload",
            "extra",
            "type",
            "aggregateid",
            "aggregatetype",
            "id",
        ]);
        let plan = Plan::compile(
            &OutboxTable {
                topic: "fixed".into(),
                ..Default::default()
            },
            &r,
            false,
        )
        .unwrap();
        let rec = plan
            .route(&[t("p"), t("x"), t("T"), t("k"), t("agg"), t("i")], POS)
            .unwrap();
        assert_eq!(
            (rec.topic.as_str(), &rec.key[..], rec.value.as_deref()),
            ("fixed", &b"k"[..], Some(&b"p"[..]))
        );
    }

    #[test]
    fn a_missing_column_names_the_table_the_column_and_its_role() {
        let err = Plan::compile(&OutboxTable::default(), &rel(&["id", "payload"]), false);
        let msg = err.unwrap_err().to_string();
        assert!(
            msg.contains("public.outbox") && msg.contains("aggregatetype"),
            "{msg}"
        );
    }

    #[test]
    fn null_key_bad_topic_and_toast_are_errors_not_skips() {
        let r = rel(&["id", "aggregatetype", "aggregateid", "type", "payload"]);
        let plan = Plan::compile(&OutboxTable::default(), &r, false).unwrap();
        let row = |agg_type: Value, key: Value| vec![t("1"), agg_type, key, t("T"), t("{}")];
        assert!(matches!(
            plan.route(&row(t("o"), Value::Null), POS),
            Err(RouteError::Null { .. })
        ));
        assert!(matches!(
            plan.route(&row(Value::Null, t("k")), POS),
            Err(RouteError::Null { .. })
        ));
        assert!(matches!(
            plan.route(&row(t("bad topic!"), t("k")), POS),
            Err(RouteError::InvalidTopic { .. })
        ));
        assert!(matches!(
            plan.route(&row(t("o"), Value::UnchangedToast), POS),
            Err(RouteError::UnchangedToast { .. })
        ));
        assert!(matches!(
            plan.route(&[t("1")], POS),
            Err(RouteError::Arity { .. })
        ));
    }

    #[test]
    fn templates_are_validated() {
        assert!(parse_template("a{b}c").is_ok());
        for bad in ["", "a{b", "a}b", "{}", "{a{b}}"] {
            assert!(parse_template(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            OutboxTable {
                table: "a.b.c".into(),
                ..Default::default()
            }
            .validate(),
            Err(ConfigError::BadTableName("a.b.c".into()))
        );
    }

    #[test]
    fn kafka_topic_names() {
        assert!(valid_topic("outbox.event.order-v1_x"));
        assert!(
            !valid_topic("a b")
                && !valid_topic("")
                && !valid_topic("..")
                && !valid_topic(&"a".repeat(250))
        );
    }
}
