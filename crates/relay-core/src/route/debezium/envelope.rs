//! The envelope Debezium's router builds when `table.fields.additional.placement` places a
//! column in it: `{"payload": .., <fields>}` under JsonConverter, and its value schema, which
//! Debezium 3.6.1 caches ([`EnvelopeSchemas`]).
//!
//! Invariant: a record's envelope schema is the cached one where Debezium's cache has one (its
//! name then carries the routed value of the first record that built it), and a payload that
//! does not fit the cached schema fails as Debezium's task does.

use std::{collections::HashMap, fmt::Write as _, sync::Mutex};

use bytes::Bytes;

use super::{
    Compat,
    apply::{BadValue, Row, expansion_fails},
    expand::Inferred,
};
use crate::route::connect;

/// Debezium 3.6.1's value-schema cache (`EventRouterDelegate.getValueSchema`): the envelope's
/// value schema is built once per payload schema, or once per schema version when
/// `table.field.event.schema.version` is set, and reused for every later record, name and
/// all: the name carries the routed value of the *first* such record since the task started.
/// The relay keeps one per table for its run, so a table's records get the names Debezium
/// gives them after a start.
#[derive(Debug, Default)]
pub struct EnvelopeSchemas(Mutex<HashMap<EnvelopeKey, EnvelopeEntry>>);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum EnvelopeKey {
    /// The payload's schema: `None` the column's, else the inferred one's identity.
    Payload(Option<String>),
    /// The schema version's text (`None`: NULL).
    Version(Option<String>),
}

#[derive(Debug)]
struct EnvelopeEntry {
    name: String,
    payload: Option<String>,
}

impl Compat {
    /// The envelope schema's name for this record, from Debezium's value-schema cache
    /// ([`super::EnvelopeSchemas`]). A payload whose schema differs from the one cached for its
    /// schema version fails Debezium's task (`Struct.put` validation).
    pub(super) fn envelope_name(
        &self,
        row: Row<'_>,
        inferred: Option<&Inferred>,
        payload_index: usize,
        routed_by: &str,
    ) -> Result<String, BadValue> {
        let payload = inferred.map(Inferred::schema_key);
        let key = match &self.version {
            Some(c) => EnvelopeKey::Version(
                row[c.index]
                    .as_ref()
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
            ),
            None => EnvelopeKey::Payload(payload.clone()),
        };
        let mut cache = self
            .envelope_schemas
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = cache.entry(key).or_insert_with(|| EnvelopeEntry {
            name: format!("{}{routed_by}.Value", self.envelope_name),
            payload: payload.clone(),
        });
        if entry.payload != payload {
            return Err(expansion_fails(
                payload_index,
                "a payload schema other than the first one of its schema version, which \
                 Debezium caches by the version alone",
            ));
        }
        Ok(entry.name.clone())
    }

    /// `{"payload": .., <envelope fields>}` under JsonConverter, with the struct schema
    /// `<topic.prefix>.<schema>.<table>.<routed value>.Value` when schemas are on.
    pub(super) fn envelope_value(
        &self,
        row: Row<'_>,
        payload: Option<&Bytes>,
        payload_index: usize,
        routed_by: &str,
    ) -> Result<Bytes, BadValue> {
        let o = &self.opts;
        let fails = |why: &str| expansion_fails(payload_index, why);
        let inferred =
            self.inferred(payload).map_err(|e| {
                fails(e.as_deref().unwrap_or(
                    "a top-level [], whose null schema Debezium cannot put in the envelope",
                ))
            })?;
        let name = self.envelope_name(row, inferred.as_ref(), payload_index, routed_by)?;
        let mut out = String::with_capacity(256);
        if o.value_schemas {
            out.push_str(r#"{"schema":{"type":"struct","fields":["#);
            match &inferred {
                Some(i) => i
                    .write_schema_field(&mut out, "payload", 4)
                    .map_err(|w| fails(&w))?,
                None => {
                    self.payload.write_open(&mut out);
                    out.push_str(r#","field":"payload"}"#);
                }
            }
            for (name, col) in &self.envelope {
                out.push(',');
                col.schema.write_open(&mut out);
                out.push_str(r#","field":"#);
                connect::write_json_string(&mut out, name);
                out.push('}');
            }
            out.push_str(r#"],"optional":false,"name":"#);
            connect::write_json_string(&mut out, &name);
            if let Some(v) = self.version.as_ref().and_then(|c| row[c.index].as_ref()) {
                let _ = write!(out, r#","version":{}"#, String::from_utf8_lossy(v));
            }
            out.push_str(r#"},"payload":"#);
        }
        out.push_str(r#"{"payload":"#);
        match &inferred {
            Some(i) => i
                .write_value(&mut out, if o.value_schemas { 3 } else { 2 })
                .map_err(|w| fails(&w))?,
            None => connect::write_json_value(&mut out, self.payload.kind, payload.map(|b| &b[..])),
        }
        for (name, col) in &self.envelope {
            out.push(',');
            connect::write_json_string(&mut out, name);
            out.push(':');
            connect::write_json_value(&mut out, col.schema.kind, row[col.index].as_deref());
        }
        out.push('}');
        if o.value_schemas {
            out.push('}');
        }
        Ok(Bytes::from(out))
    }
}
