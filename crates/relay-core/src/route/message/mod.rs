//! Routing of logical messages (`pg_logical_emit_message(true, prefix, content)`): a table-less
//! outbox. One `[[message]]` section per prefix.
//!
//! The content is a JSON object whose fields play the part of an outbox row's columns; the
//! defaults mirror the Debezium layout (`id`, `aggregatetype`, `aggregateid`, `type`,
//! `payload`). The record value is the **payload field's JSON text exactly as emitted** (the
//! bytes of the content between the field's first and last character, kept with serde_json's
//! `raw_value`: nothing is re-serialised, so spacing, key order and number spelling are the
//! writer's). A string field `<payload_column>_base64` carries a binary value instead (the value
//! is the decoded bytes). Key, topic fields and headers take a field as text: a JSON string's
//! contents, any other value's JSON text; `null` is no value.
//!
//! Invariant: a message with a configured prefix becomes a record or a [`MessagePoison`], never
//! nothing; a non-transactional one is poison (it is atomic with nothing).

use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    ConfigError, HeaderName, Position, Record,
    record::{push_relay_headers, valid_topic},
    table::{
        Part, default_headers, default_key_column, default_payload_column, default_topic,
        parse_template, validate_mapping,
    },
};
use crate::checkpoint::Fingerprint;

/// How messages with one prefix map to Kafka records. One `[[message]]` section in the config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRoute {
    /// The message prefix, matched exactly (the second argument of `pg_logical_emit_message`).
    pub prefix: String,
    /// Topic template. `{field}` is replaced by that field's text; anything else is literal.
    /// Default: `outbox.event.{aggregatetype}`.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Field whose text becomes the record key. Must be present and not null.
    #[serde(default = "default_key_column")]
    pub key_column: String,
    /// Field whose JSON text becomes the record value (null: no value). A string field named
    /// `<payload_column>_base64` carries a binary value instead.
    #[serde(default = "default_payload_column")]
    pub payload_column: String,
    /// Kafka header name → field. Default: `id` = `id`, plus `eventType` = `type`. The field
    /// must be present; null gives a header without a value.
    #[serde(default = "default_headers")]
    pub headers: BTreeMap<String, String>,
}

/// How [`MessageRoute::routed_name`] starts.
const ROUTED_NAME_START: &str = "message:";

/// The prefix in a name [`MessageRoute::routed_name`] made; `None` for an `[[outbox]]` table's
/// `schema.table`.
pub fn routed_prefix(routed: &str) -> Option<&str> {
    routed.strip_prefix(ROUTED_NAME_START)
}

impl MessageRoute {
    /// The name the checkpoint and the skip know these messages by: `message:<prefix>`.
    pub fn routed_name(&self) -> String {
        format!("{ROUTED_NAME_START}{}", self.prefix)
    }

    /// Checks the mapping itself. Returns the first problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.prefix.is_empty() {
            return Err(ConfigError::EmptyColumn("prefix"));
        }
        validate_mapping(&self.topic, &self.key_column, &self.payload_column)
    }
}

/// A message with a configured prefix that cannot become a record. Actionable: each names the
/// prefix, the field and the source position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error(
        "a non-transactional logical message with prefix {prefix:?} (at LSN {lsn}) is atomic with \
         no transaction, so it cannot be published in commit order; emit it with \
         pg_logical_emit_message(true, ...)"
    )]
    NotTransactional { prefix: String, lsn: crate::Lsn },
    #[error(
        "the logical message with prefix {prefix:?} committed at {commit_lsn} (position {seq}) is \
         not a JSON object ({detail}); emit e.g. json_build_object('id', ..., 'aggregateid', \
         ..., 'payload', ...)::text"
    )]
    NotAnObject {
        prefix: String,
        detail: String,
        commit_lsn: crate::Lsn,
        seq: u64,
    },
    #[error(
        "the logical message with prefix {prefix:?} committed at {commit_lsn} (position {seq}) \
         has {problem} field {field:?}, which [[message]] configures as {role}; fix the writer or \
         the mapping"
    )]
    Field {
        prefix: String,
        field: String,
        role: String,
        problem: &'static str,
        commit_lsn: crate::Lsn,
        seq: u64,
    },
    #[error(
        "the logical message with prefix {prefix:?} committed at {commit_lsn} (position {seq}) \
         routes to {topic:?}, which is not a valid Kafka topic name (1-249 characters of a-z A-Z \
         0-9 . _ -); fix the writer or the topic template"
    )]
    InvalidTopic {
        prefix: String,
        topic: String,
        commit_lsn: crate::Lsn,
        seq: u64,
    },
}

/// A message that cannot be routed, with everything needed to record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePoison {
    pub prefix: String,
    /// `message:<prefix>`.
    pub routed: Arc<str>,
    pub fingerprint: Fingerprint,
    /// The content as sent.
    pub content: Bytes,
    pub error: MessageError,
}

/// What one logical message means to the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutedMessage {
    /// No `[[message]]` section has this prefix (the heartbeat's, another application's).
    Unrouted,
    Record {
        record: Record,
        /// `message:<prefix>`.
        routed: Arc<str>,
        fingerprint: Fingerprint,
    },
    Poison(MessagePoison),
}

struct Compiled {
    route: MessageRoute,
    routed: Arc<str>,
    topic: Vec<Part>,
    base64_field: String,
    /// `headers`, their names shared by every record.
    headers: Vec<(HeaderName, String)>,
}

/// The configured `[[message]]` sections, by prefix.
pub struct MessageRoutes {
    by_prefix: HashMap<String, Compiled>,
    relay_headers: bool,
}

impl MessageRoutes {
    /// `routes` must have been validated.
    pub fn new(routes: &[MessageRoute], relay_headers: bool) -> Self {
        let by_prefix = routes
            .iter()
            .map(|r| {
                let c = Compiled {
                    route: r.clone(),
                    routed: r.routed_name().into(),
                    topic: parse_template(&r.topic).expect("validated at config load"),
                    base64_field: format!("{}_base64", r.payload_column),
                    headers: r
                        .headers
                        .iter()
                        .map(|(name, field)| (HeaderName::from(name.as_str()), field.clone()))
                        .collect(),
                };
                (r.prefix.clone(), c)
            })
            .collect();
        Self {
            by_prefix,
            relay_headers,
        }
    }

    /// Routes one message; `pos` is its transaction's position (`seq`: the next record's).
    pub fn route(
        &self,
        transactional: bool,
        lsn: crate::Lsn,
        prefix: &str,
        content: &Bytes,
        pos: Position,
    ) -> RoutedMessage {
        let Some(c) = self.by_prefix.get(prefix) else {
            return RoutedMessage::Unrouted;
        };
        let fields = serde_json::from_slice::<BTreeMap<String, Box<RawValue>>>(content);
        let fingerprint = match &fields {
            Ok(f) => fingerprint_of(c, f, prefix, content),
            Err(_) => Fingerprint::of_message(prefix, content),
        };
        let poison = |error| {
            RoutedMessage::Poison(MessagePoison {
                prefix: prefix.to_string(),
                routed: c.routed.clone(),
                fingerprint: fingerprint.clone(),
                content: content.clone(),
                error,
            })
        };
        if !transactional {
            return poison(MessageError::NotTransactional {
                prefix: prefix.to_string(),
                lsn,
            });
        }
        let fields = match fields {
            Ok(f) => f,
            Err(e) => {
                return poison(MessageError::NotAnObject {
                    prefix: prefix.to_string(),
                    detail: e.to_string(),
                    commit_lsn: pos.commit_lsn,
                    seq: pos.seq,
                });
            }
        };
        match self.record(c, &fields, prefix, pos) {
            Ok(record) => RoutedMessage::Record {
                record,
                routed: c.routed.clone(),
                fingerprint,
            },
            Err(e) => poison(e),
        }
    }

    fn record(
        &self,
        c: &Compiled,
        fields: &BTreeMap<String, Box<RawValue>>,
        prefix: &str,
        pos: Position,
    ) -> Result<Record, MessageError> {
        let err = |field: &str, role: &str, problem| MessageError::Field {
            prefix: prefix.to_string(),
            field: field.to_string(),
            role: role.to_string(),
            problem,
            commit_lsn: pos.commit_lsn,
            seq: pos.seq,
        };
        // Present (possibly null) or an error naming the field's role.
        let present = |field: &str, role: &str| {
            fields
                .get(field)
                .map(|raw| text(raw))
                .ok_or_else(|| err(field, role, "no"))
        };
        let required = |field: &str, role: &str| {
            present(field, role)?.ok_or_else(|| err(field, role, "null in"))
        };
        let mut topic = String::new();
        for p in &c.topic {
            match p {
                Part::Literal(s) => topic.push_str(s),
                Part::Column(f) => {
                    topic.push_str(&String::from_utf8_lossy(&required(f, "part of the topic")?))
                }
            }
        }
        if !valid_topic(&topic) {
            return Err(MessageError::InvalidTopic {
                prefix: prefix.to_string(),
                topic,
                commit_lsn: pos.commit_lsn,
                seq: pos.seq,
            });
        }
        let key = required(&c.route.key_column, "the key")?;
        let payload = &c.route.payload_column;
        let value = match (fields.get(payload), fields.get(&c.base64_field)) {
            (Some(_), Some(_)) => return Err(err(&c.base64_field, "the payload", "a second")),
            (None, None) => return Err(err(payload, "the payload", "no")),
            (Some(raw), None) => (raw.get() != "null").then(|| Bytes::from(raw.get().to_owned())),
            (None, Some(raw)) => {
                let s: Option<String> = serde_json::from_str(raw.get())
                    .map_err(|_| err(&c.base64_field, "the payload", "a non-string"))?;
                match s {
                    None => None,
                    Some(s) => Some(Bytes::from(
                        base64::engine::general_purpose::STANDARD
                            .decode(s.as_bytes())
                            .map_err(|_| {
                                err(&c.base64_field, "the payload", "invalid base64 in")
                            })?,
                    )),
                }
            }
        };
        let mut headers = Vec::with_capacity(c.headers.len() + 3);
        for (name, field) in &c.headers {
            headers.push((name.clone(), present(field, &format!("header {name:?}"))?));
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
}

/// What identifies the message in a checkpoint: the text of the field mapped to the `id` header
/// (the event id), else a hash of prefix and content.
fn fingerprint_of(
    c: &Compiled,
    fields: &BTreeMap<String, Box<RawValue>>,
    prefix: &str,
    content: &[u8],
) -> Fingerprint {
    let id = c
        .route
        .headers
        .get("id")
        .and_then(|f| fields.get(f))
        .and_then(|raw| text(raw));
    match id {
        Some(b) => Fingerprint::Id(b),
        None => Fingerprint::of_message(prefix, content),
    }
}

/// A field as text: a JSON string's contents, any other value's JSON text, `None` for null.
fn text(raw: &RawValue) -> Option<Bytes> {
    let s = raw.get();
    if s == "null" {
        return None;
    }
    match serde_json::from_str::<String>(s) {
        Ok(unquoted) => Some(Bytes::from(unquoted)),
        Err(_) => Some(Bytes::from(s.to_owned())),
    }
}

#[cfg(test)]
mod tests;
