//! JsonConverter's bytes for an inferred schema and its value, through Jackson's generator:
//! its nesting limit, its string escapes, Java's `Double.toString`.

use std::fmt::Write as _;

use super::{Failed, Schema, Value, type_name};
use crate::route::{connect, debezium::jackson::JStr};

/// Jackson's `StreamWriteConstraints` nesting limit.
const MAX_WRITE_DEPTH: usize = 1000;

fn deeper(depth: usize) -> Result<(), Failed> {
    if depth > MAX_WRITE_DEPTH {
        return Err(Failed(
            "a document nested deeper than Jackson writes (1000 levels)".into(),
        ));
    }
    Ok(())
}

/// JsonConverter's `asJsonSchema`; `field` is the struct field name it appends.
pub(super) fn write_schema(
    out: &mut String,
    s: &Schema,
    field: Option<&JStr>,
    depth: usize,
) -> Result<(), Failed> {
    deeper(depth)?;
    let _ = write!(out, r#"{{"type":"#);
    match s {
        Schema::Array(inner) => {
            out.push_str(r#""array","items":"#);
            write_schema(out, inner, None, depth + 1)?;
        }
        Schema::Struct { fields, .. } => {
            out.push_str(r#""struct","fields":["#);
            deeper(depth + 1)?;
            for (i, (name, fs)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_schema(out, fs, Some(name), depth + 2)?;
            }
            out.push(']');
        }
        other => {
            let _ = write!(out, r#""{}""#, type_name(other));
        }
    }
    out.push_str(r#","optional":true"#);
    if let Schema::Struct { name: Some(n), .. } = s {
        out.push_str(r#","name":"#);
        write_jstr(out, n);
    }
    if let Some(f) = field {
        out.push_str(r#","field":"#);
        write_jstr(out, f);
    }
    out.push('}');
    Ok(())
}

/// A scalar value as Jackson writes its node.
fn write_scalar(out: &mut String, v: &Value) {
    match v {
        Value::Str(s) => write_jstr(out, s),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::I32(i) => {
            let _ = write!(out, "{i}");
        }
        Value::I64(l) => {
            let _ = write!(out, "{l}");
        }
        Value::F64(d) => java_double(out, *d),
        Value::Null => out.push_str("null"),
        Value::List(_) | Value::Struct(_) => unreachable!("containers are written by write_any"),
    }
}

fn write_jstr(out: &mut String, s: &[u16]) {
    connect::write_json_units(out, s.iter().copied());
}

/// Java's `Double.toString` (the shortest digits that read back, as Java 19+ prints them):
/// plain notation with at least one decimal for 10^-3 <= |d| < 10^7, else `d.dddE±n`.
pub(crate) fn java_double(out: &mut String, d: f64) {
    if d == 0.0 {
        out.push_str(if d.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let sci = format!("{:e}", d.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if d < 0.0 {
        out.push('-');
    }
    if (-3..7).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        out.push('.');
        out.push_str(if digits.len() > 1 { &digits[1..] } else { "0" });
        let _ = write!(out, "E{exp}");
    }
}

/// Writes a struct with its schema's field names (the only way a [`Value::Struct`] is written).
fn write_struct(
    out: &mut String,
    schema: &Schema,
    values: &[Value],
    depth: usize,
) -> Result<(), Failed> {
    deeper(depth)?;
    let Schema::Struct { fields, .. } = schema else {
        unreachable!("a struct value has a struct schema");
    };
    out.push('{');
    for (i, ((name, fs), v)) in fields.iter().zip(values).enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_jstr(out, name);
        out.push(':');
        write_any(out, fs, v, depth + 1)?;
    }
    out.push('}');
    Ok(())
}

pub(super) fn write_any(
    out: &mut String,
    schema: &Schema,
    v: &Value,
    depth: usize,
) -> Result<(), Failed> {
    match (v, schema) {
        (Value::Struct(values), _) => write_struct(out, schema, values, depth),
        (Value::List(items), Schema::Array(inner)) => {
            deeper(depth)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_any(out, inner, item, depth + 1)?;
            }
            out.push(']');
            Ok(())
        }
        (Value::List(_), _) => unreachable!("a list value has an array schema"),
        _ => {
            write_scalar(out, v);
            Ok(())
        }
    }
}
