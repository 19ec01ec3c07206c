//! `table.expand.json.payload = true`: Debezium 3.6.1's router parses a string payload that
//! starts with `{` or `[` ([`jackson`]), infers a Connect schema from it (`JsonSchemaData`),
//! builds the value, and JsonConverter writes that instead of the JSON string.
//!
//! Invariant: [`expand`] gives one of Debezium's three outcomes, never a fourth. Where Debezium's
//! parse or schema inference throws, it logs "JSON expansion failed" and keeps the string
//! ([`Expansion::Unchanged`]). Where the schema was built but the value does not fit it (an
//! integer beyond `long`, array elements of another type than the first, a top-level array),
//! Debezium has already replaced the schema and its converter fails the task
//! ([`Expansion::Fails`]: the relay's poison policy decides). A top-level `[]` leaves a null
//! schema over the string ([`Expansion::NullSchema`]).

use bytes::Bytes;
use serde::Deserialize;

use super::jackson::{self, JStr, Node};

mod write;

#[cfg(test)]
use write::java_double;
use write::write_any;

/// `table.json.payload.null.behavior`: what a JSON `null` field's schema is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum NullBehavior {
    /// The field is left out of the schema.
    #[default]
    #[serde(rename = "ignore")]
    Ignore,
    /// The field is an optional `bytes` field holding null.
    #[serde(rename = "optional_bytes")]
    OptionalBytes,
}

/// What Debezium makes of one string payload.
#[derive(Debug, PartialEq)]
pub(crate) enum Expansion {
    /// The inferred struct replaces the string.
    Expanded(Inferred),
    /// The string goes out as without expansion.
    Unchanged,
    /// The string goes out with no schema (`"schema":null` when schemas are on).
    NullSchema,
    /// Debezium's converter fails the task on this payload; why.
    Fails(String),
}

/// A Connect schema the inference builds; every one is optional.
#[derive(Debug, Clone, PartialEq)]
enum Schema {
    Str,
    Bool,
    I32,
    I64,
    F64,
    Bytes,
    Array(Box<Schema>),
    Struct {
        name: Option<JStr>,
        fields: Vec<(JStr, Schema)>,
    },
}

/// A value that passed Connect's validation against its schema.
#[derive(Debug, PartialEq)]
enum Value {
    Null,
    Str(JStr),
    Bool(bool),
    I32(i32),
    I64(i64),
    F64(f64),
    List(Vec<Value>),
    /// One entry per schema field, in schema order.
    Struct(Vec<Value>),
}

struct Failed(String);

/// The struct Debezium inferred from a payload, and its value.
#[derive(Debug, PartialEq)]
pub(crate) struct Inferred {
    schema: Schema,
    value: Value,
}

impl Inferred {
    /// JsonConverter's bytes for the payload alone (no envelope placement).
    pub(crate) fn encode(&self, schemas: bool) -> Result<Bytes, String> {
        let mut out = String::with_capacity(256);
        if schemas {
            out.push_str(r#"{"schema":"#);
            write::write_schema(&mut out, &self.schema, None, 2).map_err(|Failed(w)| w)?;
            out.push_str(r#","payload":"#);
            write_any(&mut out, &self.schema, &self.value, 2).map_err(|Failed(w)| w)?;
            out.push('}');
        } else {
            write_any(&mut out, &self.schema, &self.value, 1).map_err(|Failed(w)| w)?;
        }
        Ok(Bytes::from(out))
    }

    /// The schema as the envelope's `payload` field, written at nesting `depth`.
    pub(crate) fn write_schema_field(
        &self,
        out: &mut String,
        field: &str,
        depth: usize,
    ) -> Result<(), String> {
        let name: JStr = field.encode_utf16().collect();
        write::write_schema(out, &self.schema, Some(&name), depth).map_err(|Failed(w)| w)
    }

    /// The value, written at nesting `depth`.
    pub(crate) fn write_value(&self, out: &mut String, depth: usize) -> Result<(), String> {
        write_any(out, &self.schema, &self.value, depth).map_err(|Failed(w)| w)
    }

    /// The schema's identity (Connect's `Schema.equals`), for Debezium's value-schema cache.
    pub(crate) fn schema_key(&self) -> String {
        let mut out = String::new();
        let _ = write::write_schema(&mut out, &self.schema, None, 0);
        out
    }
}

/// Debezium's expansion of `text`, the payload column `payload_field`'s string.
pub(crate) fn expand(text: &str, payload_field: &str, nulls: NullBehavior) -> Expansion {
    if !(text.starts_with('{') || text.starts_with('[')) {
        return Expansion::Unchanged;
    }
    let Some(node) = jackson::read(text) else {
        return Expansion::Unchanged;
    };
    let infer = Infer { nulls };
    let key: JStr = payload_field.encode_utf16().collect();
    let schema = match infer.schema(Some(&key), &node) {
        Err(()) => return Expansion::Unchanged,
        Ok(None) => return Expansion::NullSchema,
        Ok(Some(s)) => s,
    };
    if !matches!(node, Node::Object(_)) {
        return Expansion::Fails("a top-level JSON array, which is not a struct".into());
    }
    match value(&node, &schema) {
        Ok(value) => Expansion::Expanded(Inferred { schema, value }),
        Err(Failed(why)) => Expansion::Fails(why),
    }
}

struct Infer {
    nulls: NullBehavior,
}

/// Java's `Strings.isNullOrBlank`: `trim()` drops every character up to U+0020.
fn blank(key: Option<&JStr>) -> bool {
    key.is_none_or(|k| k.iter().all(|u| *u <= 0x20))
}

impl Infer {
    /// `JsonSchemaData.toConnectSchema`; `Err` where it throws, `Ok(None)` where it returns null.
    fn schema(&self, key: Option<&JStr>, node: &Node) -> Result<Option<Schema>, ()> {
        Ok(Some(match node {
            Node::Str(_) => Schema::Str,
            Node::Bool(_) => Schema::Bool,
            Node::Int(_) => Schema::I32,
            Node::Long(_) => Schema::I64,
            Node::BigInt | Node::Double(_) => Schema::F64,
            Node::Null => match self.nulls {
                NullBehavior::OptionalBytes => Schema::Bytes,
                NullBehavior::Ignore => return Ok(None),
            },
            Node::Array(items) if items.is_empty() => return Ok(None),
            Node::Array(items) => Schema::Array(Box::new(self.element(key, items)?)),
            Node::Object(entries) => {
                let mut fields: Vec<(JStr, Schema)> = Vec::new();
                for (name, v) in entries {
                    let mut field_key = if blank(key) {
                        Vec::new()
                    } else {
                        let mut k = key.cloned().unwrap_or_default();
                        k.push(u16::from(b'.'));
                        k
                    };
                    field_key.extend_from_slice(name);
                    let Some(s) = self.schema(Some(&field_key), v)? else {
                        continue;
                    };
                    if fields.iter().any(|(n, _)| n == name) {
                        continue;
                    }
                    // SchemaBuilder.field refuses an empty name.
                    if name.is_empty() {
                        return Err(());
                    }
                    fields.push((name.clone(), s));
                }
                Schema::Struct {
                    name: key.cloned(),
                    fields,
                }
            }
        }))
    }

    /// `toConnectSchemaWithCycles`: the element schema of a non-empty array.
    fn element(&self, key: Option<&JStr>, items: &[Node]) -> Result<Schema, ()> {
        let sample = first_element(items)?;
        if !matches!(sample, Node::Object(_)) {
            return self.schema(None, sample)?.ok_or(());
        }
        // Debezium merges the distinct element schemas in a HashSet's order, which varies
        // between JVM runs when there are several; first-seen order here (see the guide).
        let mut distinct: Vec<Schema> = Vec::new();
        for item in items.iter().filter(|i| matches!(i, Node::Object(_))) {
            let s = self.schema(key, item)?.ok_or(())?;
            if !distinct.contains(&s) {
                distinct.push(s);
            }
        }
        let mut merged = distinct.remove(0);
        for s in distinct {
            merge(&mut merged, s);
        }
        Ok(merged)
    }
}

/// `getFirstArrayElement`: the first non-null element (or null), refusing arrays of mixed node
/// types or of mixed number kinds.
fn first_element(items: &[Node]) -> Result<&Node, ()> {
    let kind = |n: &Node| match n {
        Node::Int(_) => 1,
        Node::Long(_) => 2,
        Node::BigInt | Node::Double(_) => 3,
        Node::Bool(_) => 4,
        Node::Str(_) => 5,
        Node::Array(_) => 6,
        Node::Object(_) => 7,
        Node::Null => 0,
    };
    let mut first: Option<&Node> = None;
    for item in items.iter().filter(|i| !matches!(i, Node::Null)) {
        match first {
            None => first = Some(item),
            Some(f) if kind(f) != kind(item) => return Err(()),
            Some(_) => {}
        }
    }
    Ok(first.unwrap_or(&Node::Null))
}

/// `mergeSchema`: the right side's new fields are appended; a field already there is replaced
/// only where it was `bytes` (a null) and the other is not.
fn merge(left: &mut Schema, right: Schema) {
    let (Schema::Struct { fields: l, .. }, Schema::Struct { fields: r, .. }) = (left, right) else {
        return;
    };
    for (name, s) in r {
        match l.iter_mut().find(|(n, _)| *n == name) {
            None => l.push((name, s)),
            Some(old) if old.1 == Schema::Bytes && s != Schema::Bytes => old.1 = s,
            Some(_) => {}
        }
    }
}

/// `toConnectData` and Connect's `Struct.put` validation: the value by node type, checked
/// against the schema.
fn value(node: &Node, schema: &Schema) -> Result<Value, Failed> {
    let v = match node {
        Node::Null => return Ok(Value::Null),
        Node::Str(s) => Value::Str(s.clone()),
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::I32(*i),
        Node::Long(l) => Value::I64(*l),
        Node::Double(d) if d.is_finite() => Value::F64(*d),
        Node::Double(_) => {
            return Err(Failed(
                "a number beyond the range of a double (the relay does not reproduce \
                 Jackson's non-finite output)"
                    .into(),
            ));
        }
        Node::BigInt => {
            return Err(Failed(
                "an integer beyond 64 bits, which Debezium puts in a float64 field as a \
                 BigDecimal"
                    .into(),
            ));
        }
        Node::Array(items) => {
            let Schema::Array(inner) = schema else {
                return Err(mismatch(schema, "an array"));
            };
            Value::List(
                items
                    .iter()
                    .map(|i| value(i, inner))
                    .collect::<Result<_, _>>()?,
            )
        }
        Node::Object(entries) => {
            let Schema::Struct { fields, .. } = schema else {
                return Err(mismatch(schema, "an object"));
            };
            let mut values = Vec::with_capacity(fields.len());
            for (name, s) in fields {
                values.push(match entries.iter().find(|(n, _)| n == name) {
                    Some((_, n)) => value(n, s)?,
                    None => Value::Null,
                });
            }
            return Ok(Value::Struct(values));
        }
    };
    let fits = matches!(
        (&v, schema),
        (Value::Str(_), Schema::Str)
            | (Value::Bool(_), Schema::Bool)
            | (Value::I32(_), Schema::I32)
            | (Value::I64(_), Schema::I64)
            | (Value::F64(_), Schema::F64)
            | (Value::List(_), Schema::Array(_))
    );
    if fits {
        Ok(v)
    } else {
        Err(mismatch(schema, "a value of another JSON type"))
    }
}

fn mismatch(schema: &Schema, got: &str) -> Failed {
    Failed(format!(
        "{got} where the schema Debezium inferred from the first element holds {}",
        type_name(schema)
    ))
}

fn type_name(s: &Schema) -> &'static str {
    match s {
        Schema::Str => "string",
        Schema::Bool => "boolean",
        Schema::I32 => "int32",
        Schema::I64 => "int64",
        Schema::F64 => "double",
        Schema::Bytes => "bytes",
        Schema::Array(_) => "array",
        Schema::Struct { .. } => "struct",
    }
}

#[cfg(test)]
mod tests;
