//! Kafka Connect's data encodings, as Debezium's Outbox Event Router + a Connect converter put a
//! column on the wire: the Connect schema Debezium's PostgreSQL connector gives a column type,
//! and the bytes `StringConverter`, `JsonConverter` (`schemas.enable` true or false),
//! `ByteArrayConverter`, `SimpleHeaderConverter` make of a value.
//!
//! Every rule here was read off real Debezium 3.6.1 on Kafka Connect 4.3.1 (the side-by-side
//! test `tests/e2e/debezium_compat/` keeps it so). Invariant: an encoding either reproduces
//! Debezium's bytes or is refused when the plan is compiled ([`ColumnSchema::of`],
//! [`Converter::check`]); nothing is encoded "approximately".

use std::fmt::Write as _;

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;

/// PostgreSQL type OIDs the encodings know.
pub(crate) mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const JSON: u32 = 114;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
}

/// A Kafka Connect key/value converter (`key.converter`, `value.converter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum Converter {
    #[default]
    #[serde(
        rename = "org.apache.kafka.connect.storage.StringConverter",
        alias = "StringConverter"
    )]
    String,
    #[serde(
        rename = "org.apache.kafka.connect.json.JsonConverter",
        alias = "JsonConverter"
    )]
    Json,
    #[serde(
        rename = "org.apache.kafka.connect.converters.ByteArrayConverter",
        alias = "ByteArrayConverter"
    )]
    ByteArray,
}

/// A Kafka Connect header converter (`header.converter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum HeaderConverter {
    #[default]
    #[serde(
        rename = "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        alias = "SimpleHeaderConverter"
    )]
    Simple,
    #[serde(
        rename = "org.apache.kafka.connect.json.JsonConverter",
        alias = "JsonConverter"
    )]
    Json,
}

/// The Connect type of a column as Debezium's PostgreSQL connector maps it (default
/// `binary.handling.mode=bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectType {
    String,
    Bytes,
    Int16,
    Int32,
    Int64,
    Boolean,
}

/// A column's Connect schema: type, optionality (the column is nullable) and logical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSchema {
    pub kind: ConnectType,
    pub optional: bool,
    /// `io.debezium.data.Json` (json, jsonb) or `io.debezium.data.Uuid` (uuid), version 1.
    pub name: Option<&'static str>,
}

impl ColumnSchema {
    /// The schema of a column of type `type_oid`; `None` for a type whose Debezium encoding the
    /// relay does not reproduce (numeric, dates, arrays...): cast such a column to text.
    pub fn of(type_oid: u32, not_null: bool) -> Option<ColumnSchema> {
        let (kind, name) = match type_oid {
            oid::TEXT | oid::VARCHAR | oid::BPCHAR => (ConnectType::String, None),
            oid::JSON | oid::JSONB => (ConnectType::String, Some("io.debezium.data.Json")),
            oid::UUID => (ConnectType::String, Some("io.debezium.data.Uuid")),
            oid::BYTEA => (ConnectType::Bytes, None),
            oid::INT2 => (ConnectType::Int16, None),
            oid::INT4 => (ConnectType::Int32, None),
            oid::INT8 => (ConnectType::Int64, None),
            oid::BOOL => (ConnectType::Boolean, None),
            _ => return None,
        };
        Some(ColumnSchema {
            kind,
            optional: !not_null,
            name,
        })
    }

    /// The schema as JsonConverter writes it (`{"type":..,"optional":..[,"name":..,"version":1]`
    /// without the closing brace, so a struct field can append `"field"`).
    pub(crate) fn write_open(&self, out: &mut String) {
        let kind = match self.kind {
            ConnectType::String => "string",
            ConnectType::Bytes => "bytes",
            ConnectType::Int16 => "int16",
            ConnectType::Int32 => "int32",
            ConnectType::Int64 => "int64",
            ConnectType::Boolean => "boolean",
        };
        let _ = write!(out, r#"{{"type":"{kind}","optional":{}"#, self.optional);
        if let Some(name) = self.name {
            let _ = write!(out, r#","name":"{name}","version":1"#);
        }
    }

    #[cfg(test)]
    pub(crate) fn json(&self) -> String {
        let mut s = String::with_capacity(64);
        self.write_open(&mut s);
        s.push('}');
        s
    }
}

/// What cannot be encoded, found when the plan is compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EncodingError(pub String);

impl Converter {
    /// Refuses what Debezium refuses too (ByteArrayConverter on a non-bytes column fails its
    /// task with a DataException) or what it renders as Java debug text (StringConverter on a
    /// bytea column gives `java.nio.HeapByteBuffer[...]`).
    pub fn check(self, schema: &ColumnSchema, what: &str) -> Result<(), EncodingError> {
        match (self, schema.kind) {
            (Converter::ByteArray, k) if k != ConnectType::Bytes => Err(EncodingError(format!(
                "{what} is not a bytea column, and ByteArrayConverter only takes bytes (Debezium \
                 fails the task); use StringConverter or JsonConverter for it"
            ))),
            (Converter::String, ConnectType::Bytes) => Err(EncodingError(format!(
                "{what} is a bytea column, which StringConverter turns into Java debug text \
                 (java.nio.HeapByteBuffer[...]) under Debezium; use ByteArrayConverter or \
                 JsonConverter (base64) for it"
            ))),
            _ => Ok(()),
        }
    }
}

/// The raw bytes of a column value as pgoutput sent it in text form: bytea's `\x<hex>` is
/// decoded, everything else is its text. `None` if a bytea value is not valid hex.
pub fn raw_bytes(kind: ConnectType, text: &Bytes) -> Option<Bytes> {
    if kind != ConnectType::Bytes {
        return Some(text.clone());
    }
    let hex = text.strip_prefix(b"\\x")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = BytesMut::with_capacity(hex.len() / 2);
    for pair in hex.chunks_exact(2) {
        out.put_u8(digit(pair[0])? << 4 | digit(pair[1])?);
    }
    Some(out.freeze())
}

/// Appends a value as JsonConverter writes it (no schema): a JSON string (Jackson's escaping),
/// base64 for bytes, a number or boolean as such; `null` for NULL. `value` is the raw bytes
/// ([`raw_bytes`]).
pub(crate) fn write_json_value(out: &mut String, kind: ConnectType, value: Option<&[u8]>) {
    let Some(v) = value else {
        out.push_str("null");
        return;
    };
    match kind {
        ConnectType::String => write_json_string(out, &String::from_utf8_lossy(v)),
        ConnectType::Bytes => {
            out.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(v, out);
            out.push('"');
        }
        ConnectType::Int16 | ConnectType::Int32 | ConnectType::Int64 => {
            out.push_str(&String::from_utf8_lossy(v))
        }
        ConnectType::Boolean => out.push_str(if v == b"t" { "true" } else { "false" }),
    }
}

/// A JSON string as Kafka Connect's Jackson writes it: `"` and `\` escaped, control characters
/// as `\b \t \n \f \r` or `\u00XX`, characters beyond the BMP as an escaped UTF-16 surrogate
/// pair, everything else raw UTF-8 (hex digits uppercase: `WRITE_HEX_UPPER_CASE`, read off
/// Debezium's output).
pub fn write_json_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    write_json_units(out, s.encode_utf16());
}

/// [`write_json_string`] for a Java string's UTF-16 units; a lone surrogate is escaped as a
/// pair's halves are.
pub(crate) fn write_json_units(out: &mut String, units: impl IntoIterator<Item = u16>) {
    out.push('"');
    for u in units {
        match u {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x09 => out.push_str("\\t"),
            0x0a => out.push_str("\\n"),
            0x0c => out.push_str("\\f"),
            0x0d => out.push_str("\\r"),
            u if u < 0x20 || (0xD800..=0xDFFF).contains(&u) => {
                let _ = write!(out, "\\u{u:04X}");
            }
            u => out.push(char::from_u32(u32::from(u)).expect("not a surrogate")),
        }
    }
    out.push('"');
}

/// One value under a key/value converter. `raw` is the raw bytes ([`raw_bytes`]), `None` NULL.
/// StringConverter and ByteArrayConverter pass NULL on as no value; JsonConverter writes
/// `null` (schemas off) or `{"schema":..,"payload":null}` (schemas on).
pub fn encode(
    conv: Converter,
    schemas: bool,
    schema: &ColumnSchema,
    raw: Option<&Bytes>,
) -> Option<Bytes> {
    match conv {
        Converter::String | Converter::ByteArray => raw.cloned(),
        Converter::Json => {
            let mut out = String::with_capacity(raw.map_or(4, |r| r.len() + 16));
            if schemas {
                out.push_str(r#"{"schema":"#);
                schema.write_open(&mut out);
                out.push_str(r#"},"payload":"#);
            }
            write_json_value(&mut out, schema.kind, raw.map(|b| &b[..]));
            if schemas {
                out.push('}');
            }
            Some(Bytes::from(out))
        }
    }
}

/// One header value under a header converter: SimpleHeaderConverter writes the text (no
/// header value for NULL), JsonConverter the JSON with or without its schema.
pub fn encode_header(
    conv: HeaderConverter,
    schemas: bool,
    schema: &ColumnSchema,
    raw: Option<&Bytes>,
) -> Option<Bytes> {
    match conv {
        HeaderConverter::Simple => raw.cloned(),
        HeaderConverter::Json => encode(Converter::Json, schemas, schema, raw),
    }
}

/// A Java `Properties` text (what Debezium's tracing reads from the span-context column):
/// the value of `key`, or `None`. Handles `=`, `:` and whitespace separators, `#`/`!` comment
/// lines and the common backslash escapes; line continuations are not needed by W3C values.
pub fn property<'a>(text: &'a str, key: &str) -> Option<std::borrow::Cow<'a, str>> {
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let split = line
            .find(|c: char| c == '=' || c == ':' || c.is_whitespace())
            .unwrap_or(line.len());
        if &line[..split] != key {
            continue;
        }
        let rest = line[split..].trim_start();
        let rest = rest
            .strip_prefix(['=', ':'])
            .map_or(rest, |r| r.trim_start());
        if !rest.contains('\\') {
            return Some(rest.into());
        }
        let mut out = String::with_capacity(rest.len());
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(other) => out.push(other),
                None => {}
            }
        }
        return Some(out.into());
    }
    None
}

/// W3C trace-context `traceparent`: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`,
/// ids not all zero.
pub fn valid_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    parts.len() == 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}

#[cfg(test)]
mod tests;
