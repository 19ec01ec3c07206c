//! Debezium compatibility of one `[[outbox]]` table: the `[outbox.debezium]` table takes the
//! Outbox Event Router's and Kafka Connect's option names verbatim, and [`Compat`] applies them
//! to a row, so the key, value, headers, partition and timestamp are the bytes Debezium 3.6.1
//! writes under the same settings.
//!
//! Invariant: without an `[outbox.debezium]` table nothing here runs (the plan's fast path is
//! unchanged); with one, every option either reproduces Debezium or fails the plan's
//! compilation with the reason ([`CompatError`]) — there is no silent approximation.

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;

use super::connect::{
    self, ColumnSchema, ConnectType, Converter, EncodingError, HeaderConverter, oid,
};
use crate::{pgoutput::Relation, route::HeaderName};

mod apply;
mod envelope;
mod expand;
mod jackson;
mod placement;
mod timestamp;
mod topic;

pub(crate) use apply::{CompileError, Mapped};
pub use envelope::EnvelopeSchemas;
pub use expand::NullBehavior;

pub use placement::{Placed, Placement, PlacementError};
pub(crate) use timestamp::timestamp_ms;
pub use topic::TopicError;
pub(crate) use topic::TopicRouter;

/// `[outbox.debezium]`: Debezium's option names, verbatim. Defaults are Debezium's, except
/// `extended.headers.enabled` (off here: current output stays as it is).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebeziumOptions {
    /// Connect's `key.converter` (full class name or simple name).
    #[serde(rename = "key.converter", default)]
    pub key_converter: Converter,
    #[serde(rename = "key.converter.schemas.enable", default = "yes")]
    pub key_schemas: bool,
    #[serde(rename = "value.converter", default)]
    pub value_converter: Converter,
    #[serde(rename = "value.converter.schemas.enable", default = "yes")]
    pub value_schemas: bool,
    #[serde(rename = "header.converter", default)]
    pub header_converter: HeaderConverter,
    #[serde(rename = "header.converter.schemas.enable", default = "yes")]
    pub header_schemas: bool,
    /// A string payload (text, varchar, json, jsonb) that is a JSON object goes out as the
    /// struct Debezium infers from it, not as a JSON string. Needs JsonConverter values
    /// (Debezium writes Java debug text or fails its task under the others).
    #[serde(rename = "table.expand.json.payload", default)]
    pub expand_json_payload: bool,
    /// With `table.expand.json.payload`: a JSON `null` field is left out of the inferred
    /// schema (`ignore`, the default) or becomes an optional bytes field (`optional_bytes`).
    #[serde(rename = "table.json.payload.null.behavior", default)]
    pub json_payload_null_behavior: NullBehavior,
    /// `column:header|envelope|partition[:alias]`, comma-separated.
    #[serde(rename = "table.fields.additional.placement", default)]
    pub additional_placement: String,
    /// A placed column the table lacks: `error` (the table's events are poison events, and
    /// `setup` refuses it) or `ignore` (the placement is left out, as Debezium does).
    #[serde(rename = "table.field.additional.missing", default)]
    pub additional_missing: AdditionalMissing,
    /// A `timestamp` (or `timestamptz`) column whose value becomes the record timestamp.
    #[serde(rename = "table.field.event.timestamp", default)]
    pub event_timestamp: Option<String>,
    /// An integer column: the `version` of the envelope's value schema.
    #[serde(rename = "table.field.event.schema.version", default)]
    pub schema_version: Option<String>,
    /// A NULL payload becomes a tombstone (no value) under every converter.
    #[serde(rename = "route.tombstone.on.empty.payload", default)]
    pub tombstone_on_empty_payload: bool,
    /// The column holding a `java.util.Properties` span context; its `traceparent` (and
    /// `tracestate`) become headers. Unset: no tracing headers.
    #[serde(rename = "tracing.span.context.field", default)]
    pub tracing_span_context_field: Option<String>,
    /// An UPDATE of an outbox row (only a publication that publishes updates sends one):
    /// `warn` or `error` logs it at that level and carries on, `fatal` stops the relay.
    #[serde(rename = "table.op.invalid.behavior", default)]
    pub op_invalid_behavior: OpInvalidBehavior,
    /// Debezium 3.x's four `__debezium.context.*` headers (Debezium's default is true).
    #[serde(rename = "extended.headers.enabled", default)]
    pub extended_headers: bool,
    /// The connector's `topic.prefix`: the `connectorLogicalName` header and the envelope
    /// schema name's first part.
    #[serde(rename = "topic.prefix", default)]
    pub topic_prefix: Option<String>,
    /// The column whose value routes the event (Debezium's `routedByValue`; default
    /// `aggregatetype`). Setting this or a `route.topic.*` key routes Debezium's way instead of
    /// the `[[outbox]]` `topic` template, which must then be left at its default.
    #[serde(rename = "route.by.field", default)]
    pub route_by_field: Option<String>,
    /// A Java regex the whole `route.by.field` value must match for the replacement to apply
    /// (default `(?<routedByValue>.*)`); no match: the value itself is the topic. Java
    /// constructs the relay cannot reproduce (lookaround, backreferences...) are refused.
    #[serde(rename = "route.topic.regex", default)]
    pub route_topic_regex: Option<String>,
    /// The topic, in Java's replacement syntax: `$n`, `${name}`, `\` escapes the next
    /// character (default `outbox.event.${routedByValue}`).
    #[serde(rename = "route.topic.replacement", default)]
    pub route_topic_replacement: Option<String>,
}

/// `table.field.additional.missing`: a placed column the table lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum AdditionalMissing {
    #[default]
    #[serde(rename = "error")]
    Error,
    #[serde(rename = "ignore")]
    Ignore,
}

/// `table.op.invalid.behavior`: what an UPDATE of an outbox row does (DELETEs are always
/// skipped, as Debezium's router skips them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum OpInvalidBehavior {
    #[default]
    #[serde(rename = "warn")]
    Warn,
    #[serde(rename = "error")]
    Error,
    #[serde(rename = "fatal")]
    Fatal,
}

fn yes() -> bool {
    true
}

impl Default for DebeziumOptions {
    fn default() -> Self {
        Self {
            key_converter: Converter::String,
            key_schemas: true,
            value_converter: Converter::String,
            value_schemas: true,
            header_converter: HeaderConverter::Simple,
            header_schemas: true,
            expand_json_payload: false,
            json_payload_null_behavior: NullBehavior::Ignore,
            additional_placement: String::new(),
            additional_missing: AdditionalMissing::Error,
            event_timestamp: None,
            schema_version: None,
            tombstone_on_empty_payload: false,
            tracing_span_context_field: None,
            op_invalid_behavior: OpInvalidBehavior::Warn,
            extended_headers: false,
            topic_prefix: None,
            route_by_field: None,
            route_topic_regex: None,
            route_topic_replacement: None,
        }
    }
}

/// A mistake in `[outbox.debezium]`, found at config load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error(
        "debezium.\"table.expand.json.payload\" = true needs \"value.converter\" = JsonConverter: \
         Debezium's StringConverter writes Java debug text (Struct{{...}}) for an expanded \
         payload and ByteArrayConverter fails the task"
    )]
    ExpandNeedsJson,
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error(
        "debezium.\"table.fields.additional.placement\" places {0:?} in the envelope, which only \
         JsonConverter values can carry (Debezium's StringConverter writes Java debug text, \
         ByteArrayConverter fails): set \"value.converter\" to JsonConverter"
    )]
    EnvelopeNeedsJson(String),
    #[error("debezium.\"{0}\" needs debezium.\"topic.prefix\" (the connector's topic.prefix)")]
    NeedsTopicPrefix(&'static str),
    #[error(transparent)]
    Topic(#[from] TopicError),
}

impl DebeziumOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        let placed = Placement::parse(&self.additional_placement)?;
        if self.expand_json_payload && self.value_converter != Converter::Json {
            return Err(OptionsError::ExpandNeedsJson);
        }
        if let Some(p) = placed.iter().find(|p| p.placement == Placement::Envelope) {
            if self.value_converter != Converter::Json {
                return Err(OptionsError::EnvelopeNeedsJson(p.column.clone()));
            }
            if self.value_schemas && self.topic_prefix.is_none() {
                return Err(OptionsError::NeedsTopicPrefix(
                    "table.fields.additional.placement",
                ));
            }
        }
        if self.extended_headers && self.topic_prefix.is_none() {
            return Err(OptionsError::NeedsTopicPrefix("extended.headers.enabled"));
        }
        self.topic_router()?;
        Ok(())
    }

    /// Every column these options read, with its role.
    pub(crate) fn mapped_columns(&self) -> Vec<(String, String)> {
        let mut cols = Vec::new();
        if self.additional_missing == AdditionalMissing::Error {
            for p in Placement::parse(&self.additional_placement).unwrap_or_default() {
                cols.push((p.column, "an additional placement".to_string()));
            }
        }
        for (c, role) in [
            (&self.event_timestamp, "the event timestamp"),
            (&self.schema_version, "the schema version"),
            (&self.tracing_span_context_field, "the tracing span context"),
        ] {
            if let Some(c) = c {
                cols.push((c.clone(), role.to_string()));
            }
        }
        cols
    }
}

/// What the compiled plan needs from outside the row: which columns are NOT NULL (Connect's
/// `optional`), the run id of the `__debezium.context.runId` header, and the table's
/// [`EnvelopeSchemas`], which outlive a recompiled plan.
#[derive(Debug, Clone, Default)]
pub struct PlanEnv {
    pub relay_headers: bool,
    pub not_null: Vec<String>,
    /// The table's generated columns (PostgreSQL 18 publishes stored ones with
    /// `publish_generated_columns = stored`): left out of the row fingerprint, so a change of
    /// that publication option is not a changed history.
    pub generated: Vec<String>,
    pub run_id: Arc<str>,
    pub envelope_schemas: Arc<EnvelopeSchemas>,
}

/// A column that does not fit the options (type, missing), found when a Relation arrives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompatError {
    #[error("{0}")]
    Encoding(#[from] EncodingError),
    #[error(
        "column {column:?} ({role}) has a type (OID {type_oid}) whose Debezium encoding the relay \
         does not reproduce; use text, varchar, uuid, json, jsonb, bytea, int2/4/8 or boolean"
    )]
    Type {
        column: String,
        role: String,
        type_oid: u32,
    },
}

/// One column the compat layer reads: its index and Connect schema.
#[derive(Debug, Clone)]
pub(crate) struct Col {
    pub index: usize,
    pub schema: ColumnSchema,
}

/// `[outbox.debezium]` compiled against one Relation.
#[derive(Debug, Clone)]
pub(crate) struct Compat {
    pub opts: DebeziumOptions,
    pub key: ColumnSchema,
    pub payload: ColumnSchema,
    /// The payload column's name: Debezium names the expanded payload's schema after it.
    pub payload_field: String,
    /// Header name → column, in Debezium's order after the context headers.
    pub headers: Vec<(HeaderName, Col)>,
    pub envelope: Vec<(String, Col)>,
    /// `<topic.prefix>.<schema>.<table>.`: the envelope schema's name before the routed value.
    pub envelope_name: String,
    pub partition: Option<Col>,
    pub timestamp: Option<(Col, bool)>,
    pub version: Option<Col>,
    pub tracing: Option<Col>,
    /// The four `__debezium.context.*` headers, encoded.
    pub context: Vec<(HeaderName, Option<Bytes>)>,
    pub envelope_schemas: Arc<EnvelopeSchemas>,
}

impl Compat {
    pub(crate) fn column(
        rel: &Relation,
        env: &PlanEnv,
        index: usize,
        role: &str,
    ) -> Result<Col, CompatError> {
        let c = &rel.columns[index];
        let schema =
            ColumnSchema::of(c.type_oid, env.not_null.contains(&c.name)).ok_or_else(|| {
                CompatError::Type {
                    column: c.name.clone(),
                    role: role.to_string(),
                    type_oid: c.type_oid,
                }
            })?;
        Ok(Col { index, schema })
    }

    /// The encoded `__debezium.context.*` headers (Debezium 3.x, task 0 of a PostgreSQL
    /// connector), `runId` being this relay run's.
    pub(crate) fn context_headers(
        opts: &DebeziumOptions,
        run_id: &str,
    ) -> Vec<(HeaderName, Option<Bytes>)> {
        if !opts.extended_headers {
            return Vec::new();
        }
        let schema = ColumnSchema {
            kind: ConnectType::String,
            optional: false,
            name: None,
        };
        let prefix = opts.topic_prefix.clone().unwrap_or_default();
        [
            ("connectorLogicalName", prefix.as_str()),
            ("taskId", "0"),
            ("connectorName", "postgresql"),
            ("runId", run_id),
        ]
        .into_iter()
        .map(|(name, v)| {
            let raw = Bytes::copy_from_slice(v.as_bytes());
            (
                HeaderName::from(format!("__debezium.context.{name}")),
                connect::encode_header(
                    opts.header_converter,
                    opts.header_schemas,
                    &schema,
                    Some(&raw),
                ),
            )
        })
        .collect()
    }

    pub(crate) fn is_timestamp(type_oid: u32) -> Option<bool> {
        match type_oid {
            oid::TIMESTAMP => Some(false),
            oid::TIMESTAMPTZ => Some(true),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
