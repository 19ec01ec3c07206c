//! Compiling `[outbox.debezium]` against a Relation, and turning a row into Debezium's bytes.

use bytes::Bytes;

use super::{
    AdditionalMissing, Col, Compat, CompatError, DebeziumOptions, Placement, PlanEnv,
    expand::{self, Expansion, Inferred},
    timestamp_ms,
};
use crate::{
    pgoutput::Relation,
    route::{
        HeaderName,
        connect::{self, ColumnSchema, ConnectType, Converter, HeaderConverter},
    },
};

/// Where the plan found the columns it maps itself (key, payload, configured headers).
pub(crate) struct Mapped<'a> {
    pub key: usize,
    pub payload: usize,
    /// `headers` of `[[outbox]]`, `id` first (Debezium writes the event id header first).
    pub headers: &'a [(HeaderName, usize)],
}

/// A row's values that the compat layer encodes, already checked by the plan (no TOAST
/// placeholder). `None` is NULL.
pub(crate) type Row<'a> = &'a [Option<Bytes>];

/// What the compat layer adds to or changes in a record.
pub(crate) struct Encoded {
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub headers: Vec<(HeaderName, Option<Bytes>)>,
    pub partition: Option<i32>,
    pub timestamp_ms: Option<i64>,
}

/// A value the options cannot use (a partition that is not a number...).
#[derive(Debug)]
pub(crate) struct BadValue {
    pub column: String,
    pub role: &'static str,
    pub detail: String,
}

/// A column's schema where its converter needs none (StringConverter keys and values,
/// SimpleHeaderConverter headers pass the text on): unknown types pass as strings there.
fn lenient(
    rel: &Relation,
    env: &PlanEnv,
    index: usize,
    role: &str,
    strict: bool,
) -> Result<Col, CompatError> {
    match Compat::column(rel, env, index, role) {
        Err(CompatError::Type { .. }) if !strict => Ok(Col {
            index,
            schema: ColumnSchema {
                kind: ConnectType::String,
                optional: true,
                name: None,
            },
        }),
        r => r,
    }
}

impl Compat {
    pub(crate) fn compile(
        opts: &DebeziumOptions,
        rel: &Relation,
        env: &PlanEnv,
        mapped: &Mapped<'_>,
        find: &dyn Fn(&str, &str) -> Result<usize, crate::route::RouteError>,
    ) -> Result<Compat, CompileError> {
        let table = format!("{}.{}", rel.namespace, rel.name);
        let key = lenient(
            rel,
            env,
            mapped.key,
            "the key",
            opts.key_converter != Converter::String,
        )?;
        opts.key_converter.check(&key.schema, "the key")?;
        let payload = lenient(
            rel,
            env,
            mapped.payload,
            "the payload",
            opts.value_converter != Converter::String,
        )?;
        opts.value_converter.check(&payload.schema, "the payload")?;
        let json_headers = opts.header_converter == HeaderConverter::Json;
        let mut headers = Vec::new();
        for (name, i) in mapped.headers {
            headers.push((
                name.clone(),
                lenient(rel, env, *i, "a header", json_headers)?,
            ));
        }
        let mut envelope = Vec::new();
        let mut partition = None;
        for p in Placement::parse(&opts.additional_placement).expect("validated at config load") {
            let i = match find(&p.column, "an additional placement") {
                Ok(i) => i,
                Err(_) if opts.additional_missing == AdditionalMissing::Ignore => continue,
                Err(e) => return Err(e.into()),
            };
            match p.placement {
                Placement::Header => headers.push((
                    p.alias.into(),
                    lenient(rel, env, i, "a header", json_headers)?,
                )),
                Placement::Envelope => {
                    envelope.push((p.alias, Compat::column(rel, env, i, "an envelope field")?))
                }
                Placement::Partition => {
                    partition = Some(Col {
                        index: i,
                        schema: Compat::column(rel, env, i, "the partition")?.schema,
                    })
                }
            }
        }
        let mut timestamp = None;
        if let Some(c) = &opts.event_timestamp {
            let i = find(c, "the event timestamp")?;
            let tz = Compat::is_timestamp(rel.columns[i].type_oid).ok_or_else(|| {
                CompileError::Compat(CompatError::Type {
                    column: c.clone(),
                    role: "the event timestamp (a timestamp column)".into(),
                    type_oid: rel.columns[i].type_oid,
                })
            })?;
            timestamp = Some((lenient(rel, env, i, "the event timestamp", false)?, tz));
        }
        let version = match &opts.schema_version {
            Some(c) => Some(Compat::column(
                rel,
                env,
                find(c, "the schema version")?,
                "the schema version",
            )?),
            None => None,
        };
        let tracing = match &opts.tracing_span_context_field {
            Some(c) => Some(lenient(
                rel,
                env,
                find(c, "the tracing span context")?,
                "the tracing span context",
                false,
            )?),
            None => None,
        };
        Ok(Compat {
            opts: opts.clone(),
            key: key.schema,
            payload: payload.schema,
            payload_field: rel.columns[mapped.payload].name.clone(),
            headers,
            envelope,
            envelope_name: format!(
                "{}.{table}.",
                opts.topic_prefix.as_deref().unwrap_or_default()
            ),
            partition,
            timestamp,
            version,
            tracing,
            context: Compat::context_headers(opts, &env.run_id),
            envelope_schemas: env.envelope_schemas.clone(),
        })
    }

    /// Debezium's record for one row. `routed_by` is the value of the routing column (the
    /// topic template's first column), for the envelope schema's name.
    pub(crate) fn encode(
        &self,
        key_raw: &Bytes,
        row: Row<'_>,
        payload_index: usize,
        routed_by: &str,
    ) -> Result<Encoded, BadValue> {
        let o = &self.opts;
        let key = connect::encode(o.key_converter, o.key_schemas, &self.key, Some(key_raw))
            .expect("a key is never NULL");
        let payload = row[payload_index].as_ref();
        // Debezium's test: `payload == null || payload.toString().trim().isEmpty()`.
        let empty = payload.is_none_or(|p| {
            self.payload.kind == ConnectType::String && p.iter().all(|b| *b <= b' ')
        });
        let value = if empty && o.tombstone_on_empty_payload {
            None
        } else if self.envelope.is_empty() {
            self.plain_value(payload, payload_index)?
        } else {
            Some(self.envelope_value(row, payload, payload_index, routed_by)?)
        };
        let mut headers = Vec::with_capacity(self.context.len() + self.headers.len() + 2);
        headers.extend(self.context.iter().cloned());
        for (name, col) in &self.headers {
            let v = row[col.index].as_ref();
            headers.push((
                name.clone(),
                connect::encode_header(o.header_converter, o.header_schemas, &col.schema, v),
            ));
        }
        if let Some(col) = &self.tracing {
            self.trace_headers(&mut headers, row[col.index].as_ref());
        }
        let partition = match &self.partition {
            None => None,
            Some(col) => Some(self.int(row, col, "the partition")?),
        };
        let timestamp_ms =
            match &self.timestamp {
                None => None,
                Some((col, _)) => match &row[col.index] {
                    None => None,
                    Some(t) => Some(timestamp_ms(&String::from_utf8_lossy(t)).ok_or_else(
                        || BadValue {
                            column: format!("#{}", col.index),
                            role: "the event timestamp",
                            detail: "not a finite timestamp".into(),
                        },
                    )?),
                },
            };
        Ok(Encoded {
            key,
            value,
            headers,
            partition,
            timestamp_ms,
        })
    }

    /// What Debezium holds as the payload: `None` the column's value as it is, else the struct
    /// `table.expand.json.payload` inferred from it. `Err(None)`: a top-level `[]`, whose
    /// inferred schema is null.
    pub(super) fn inferred(
        &self,
        payload: Option<&Bytes>,
    ) -> Result<Option<Inferred>, Option<String>> {
        let o = &self.opts;
        let (true, ConnectType::String, Some(p)) =
            (o.expand_json_payload, self.payload.kind, payload)
        else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(p);
        match expand::expand(&text, &self.payload_field, o.json_payload_null_behavior) {
            Expansion::Expanded(i) => Ok(Some(i)),
            Expansion::Unchanged => Ok(None),
            Expansion::NullSchema => Err(None),
            Expansion::Fails(why) => Err(Some(why)),
        }
    }

    /// The payload alone under the value converter, expanded where the options say so.
    fn plain_value(
        &self,
        payload: Option<&Bytes>,
        payload_index: usize,
    ) -> Result<Option<Bytes>, BadValue> {
        let o = &self.opts;
        let plain = || connect::encode(o.value_converter, o.value_schemas, &self.payload, payload);
        match self.inferred(payload) {
            Ok(None) => Ok(plain()),
            Ok(Some(i)) => i
                .encode(o.value_schemas)
                .map(Some)
                .map_err(|why| expansion_fails(payload_index, &why)),
            // Debezium writes the string with a null schema.
            Err(None) if !o.value_schemas => Ok(plain()),
            Err(None) => {
                let text = String::from_utf8_lossy(payload.expect("expanded"));
                let mut out = String::with_capacity(text.len() + 32);
                out.push_str(r#"{"schema":null,"payload":"#);
                connect::write_json_string(&mut out, &text);
                out.push('}');
                Ok(Some(Bytes::from(out)))
            }
            Err(Some(why)) => Err(expansion_fails(payload_index, &why)),
        }
    }

    fn int(&self, row: Row<'_>, col: &Col, role: &'static str) -> Result<i32, BadValue> {
        let bad = |detail: &str| BadValue {
            column: format!("#{}", col.index),
            role,
            detail: detail.to_string(),
        };
        let v = row[col.index].as_ref().ok_or_else(|| bad("NULL"))?;
        std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
            .filter(|p| *p >= 0)
            .ok_or_else(|| bad("not a partition number"))
    }

    /// `traceparent` (and `tracestate`) from the span-context column, when it holds a valid
    /// W3C trace context: the writer's span becomes the consumer's parent.
    fn trace_headers(&self, headers: &mut Vec<(HeaderName, Option<Bytes>)>, ctx: Option<&Bytes>) {
        let Some(text) = ctx.map(|b| String::from_utf8_lossy(b)) else {
            return;
        };
        let Some(parent) = connect::property(&text, "traceparent") else {
            return;
        };
        if !connect::valid_traceparent(&parent) {
            return;
        }
        let o = &self.opts;
        let schema = ColumnSchema {
            kind: ConnectType::String,
            optional: false,
            name: None,
        };
        let mut push = |name: &str, v: &str| {
            let raw = Bytes::copy_from_slice(v.as_bytes());
            headers.push((
                name.into(),
                connect::encode_header(o.header_converter, o.header_schemas, &schema, Some(&raw)),
            ));
        };
        push("traceparent", &parent);
        if let Some(state) = connect::property(&text, "tracestate") {
            push("tracestate", &state);
        }
    }
}

/// A payload Debezium's task fails on (the relay's poison policy decides).
pub(super) fn expansion_fails(payload_index: usize, why: &str) -> BadValue {
    BadValue {
        column: format!("#{payload_index}"),
        role: "the payload (table.expand.json.payload)",
        detail: format!("a JSON document Debezium fails its task on ({why})"),
    }
}

/// Why `[outbox.debezium]` does not fit a Relation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompileError {
    #[error(transparent)]
    Compat(#[from] CompatError),
    #[error(transparent)]
    Route(#[from] crate::route::RouteError),
}

impl From<connect::EncodingError> for CompileError {
    fn from(e: connect::EncodingError) -> Self {
        CompileError::Compat(CompatError::Encoding(e))
    }
}
