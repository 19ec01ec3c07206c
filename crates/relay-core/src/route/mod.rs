//! Routing: which Kafka record an outbox row becomes.
//!
//! The defaults reproduce Debezium's Outbox Event Router on the table
//! `public.outbox(id, aggregatetype, aggregateid, type, payload)`, so consumers written against
//! Debezium do not change: topic `outbox.event.<aggregatetype>`, key `aggregateid`, value the
//! payload text, header `id` = the event id (and `eventType` = `type`).
//!
//! Columns are looked up **by name** each time a Relation message arrives ([`Plan::compile`]),
//! because a Relation can be re-sent mid-stream after `ALTER TABLE` with columns added or moved.

use bytes::Bytes;

use crate::{Lsn, checkpoint::Fingerprint, pgoutput::Relation, pgoutput::Value};

pub mod connect;
pub mod debezium;
mod message;
mod record;
mod table;

pub use debezium::{DebeziumOptions, OptionsError, PlanEnv};
pub use message::{
    MessageError, MessagePoison, MessageRoute, MessageRoutes, RoutedMessage, routed_prefix,
};
pub use record::{
    HEADER_COMMIT_LSN, HEADER_COMMIT_TIME, HEADER_SEQ, HeaderName, Position, Record, valid_topic,
};
pub use table::{ConfigError, OutboxTable};

use record::push_relay_headers;
use table::Part;
#[cfg(test)]
use table::parse_template;

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
    /// The columns a row fingerprint hashes when the relation has generated columns (which a
    /// publication may or may not carry); `None`: every column.
    hashed: Option<Vec<usize>>,
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
        let hashed = rel
            .columns
            .iter()
            .any(|c| env.generated.contains(&c.name))
            .then(|| {
                (0..rel.columns.len())
                    .filter(|&i| !env.generated.contains(&rel.columns[i].name))
                    .collect()
            });
        Ok(Plan {
            hashed,
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
    /// header (the event id of the Debezium layout), else a hash of the whole row without its
    /// generated columns (whether those are published is a publication option that may change).
    pub fn fingerprint(&self, tuple: &[Value]) -> Fingerprint {
        let id = self
            .headers
            .iter()
            .find(|(name, _)| &**name == "id")
            .and_then(|(_, i)| tuple.get(*i));
        match (id, &self.hashed) {
            (Some(Value::Text(b) | Value::Binary(b)), _) => Fingerprint::Id(b.clone()),
            (_, None) => Fingerprint::of_row(tuple),
            (_, Some(cols)) => Fingerprint::of_values(cols.iter().filter_map(|&i| tuple.get(i))),
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

#[cfg(test)]
mod tests;
