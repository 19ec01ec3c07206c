//! A handler's SQL: named parameters (`:value`, `:event_id`, …) turned into positional ones,
//! typed, and bound from a record.
//!
//! Invariant: a handler statement receives only what the record carries, through bound
//! parameters, never through text pasted into the SQL, so no event can inject SQL. Parameters
//! are sent as text, bytes or integers and cast in SQL (`($1::jsonb)`), so a value that is not
//! of the configured type fails inside the transaction with a SQLSTATE (a definite failure of
//! that record) instead of in the client.

use tokio_postgres::types::{ToSql, Type};

use super::record::Record;
use crate::config::ValueAs;

/// One named parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    Key,
    Value,
    Headers,
    Topic,
    Partition,
    Offset,
    Timestamp,
    EventId,
    EventType,
}

const NAMES: [(&str, Param); 9] = [
    ("key", Param::Key),
    ("value", Param::Value),
    ("headers", Param::Headers),
    ("topic", Param::Topic),
    ("partition", Param::Partition),
    ("offset", Param::Offset),
    ("timestamp", Param::Timestamp),
    ("event_id", Param::EventId),
    ("event_type", Param::EventType),
];

/// A handler's SQL is not usable as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SqlError {
    #[error(
        "unknown parameter :{0}; the parameters are :key, :value, :headers, :topic, :partition, \
         :offset, :timestamp, :event_id and :event_type"
    )]
    Unknown(String),
    #[error("positional parameter ${0} is not supported; use the named ones (:value, :key, ...)")]
    Positional(String),
    #[error("the statement is empty")]
    Empty,
}

/// A handler statement with its parameters in `$n` order.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    pub(crate) sql: String,
    params: Vec<Param>,
    value: ValueAs,
}

impl Statement {
    /// Rewrites `:name` to `$n` (with a cast where the wire type is not the SQL type), leaving
    /// string literals, quoted identifiers, dollar-quoted bodies, comments and `::` casts alone.
    pub(crate) fn parse(sql: &str, value: ValueAs) -> Result<Statement, SqlError> {
        if sql.trim().is_empty() {
            return Err(SqlError::Empty);
        }
        let b = sql.as_bytes();
        let (mut out, mut params) = (String::with_capacity(sql.len() + 16), Vec::new());
        let mut i = 0;
        let mut copied = 0;
        while i < b.len() {
            match b[i] {
                b'\'' | b'"' => i = skip_quoted(b, i, b[i]),
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    i = b[i..]
                        .iter()
                        .position(|&c| c == b'\n')
                        .map_or(b.len(), |p| i + p)
                }
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    i = sql[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2)
                }
                b'$' => {
                    let tag_end = b[i + 1..]
                        .iter()
                        .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'));
                    match tag_end.map(|p| i + 1 + p) {
                        Some(e)
                            if b[e] == b'$'
                                && !b[i + 1..e].first().is_some_and(u8::is_ascii_digit) =>
                        {
                            let tag = &sql[i..=e];
                            i = sql[e + 1..]
                                .find(tag)
                                .map_or(b.len(), |p| e + 1 + p + tag.len());
                        }
                        _ if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                            let digits: String = sql[i + 1..]
                                .chars()
                                .take_while(char::is_ascii_digit)
                                .collect();
                            return Err(SqlError::Positional(digits));
                        }
                        _ => i += 1,
                    }
                }
                b':' if b.get(i + 1) == Some(&b':') => i += 2,
                b':' if b
                    .get(i + 1)
                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') =>
                {
                    let len = b[i + 1..]
                        .iter()
                        .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                        .unwrap_or(b.len() - i - 1);
                    let name = &sql[i + 1..i + 1 + len];
                    let param = NAMES
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, p)| *p)
                        .ok_or_else(|| SqlError::Unknown(name.to_string()))?;
                    let n = match params.iter().position(|p| *p == param) {
                        Some(k) => k + 1,
                        None => {
                            params.push(param);
                            params.len()
                        }
                    };
                    out.push_str(&sql[copied..i]);
                    out.push_str(&placeholder(param, n, value));
                    i += 1 + len;
                    copied = i;
                }
                _ => i += 1,
            }
        }
        out.push_str(&sql[copied..]);
        Ok(Statement {
            sql: out,
            params,
            value,
        })
    }

    /// The wire types of `$1..$n`, for `prepare_typed`.
    pub(crate) fn types(&self) -> Vec<Type> {
        self.params
            .iter()
            .map(|p| match p {
                Param::Partition => Type::INT4,
                Param::Offset | Param::Timestamp => Type::INT8,
                Param::Value if self.value == ValueAs::Bytea => Type::BYTEA,
                _ => Type::TEXT,
            })
            .collect()
    }

    /// The values of `$1..$n` for `r`. A value that must be text and is not UTF-8 is an error
    /// (a definite failure of the record).
    pub(crate) fn bind<'r>(
        &self,
        r: &'r Record,
    ) -> Result<Vec<Box<dyn ToSql + Sync + Send + 'r>>, String> {
        let text = |bytes: Option<&'r [u8]>, what: &str| -> Result<Option<&'r str>, String> {
            bytes
                .map(|b| {
                    std::str::from_utf8(b)
                        .map_err(|_| format!("the record's {what} is not UTF-8 text"))
                })
                .transpose()
        };
        let mut out: Vec<Box<dyn ToSql + Sync + Send + 'r>> = Vec::with_capacity(self.params.len());
        for p in &self.params {
            out.push(match p {
                Param::Key => Box::new(text(r.key.as_deref(), "key")?),
                Param::Value if self.value == ValueAs::Bytea => Box::new(r.value.as_deref()),
                Param::Value => Box::new(text(r.value.as_deref(), "value")?),
                Param::Headers => Box::new(r.headers_json()),
                Param::Topic => Box::new(r.topic.as_str()),
                Param::Partition => Box::new(r.partition),
                Param::Offset => Box::new(r.offset),
                Param::Timestamp => Box::new(r.timestamp_ms),
                Param::EventId => Box::new(r.event_id.as_deref()),
                Param::EventType => Box::new(r.event_type.as_deref()),
            });
        }
        Ok(out)
    }
}

fn placeholder(p: Param, n: usize, value: ValueAs) -> String {
    match p {
        Param::Value if value == ValueAs::Jsonb => format!("(${n}::jsonb)"),
        Param::Headers => format!("(${n}::jsonb)"),
        Param::Timestamp => format!("(to_timestamp(${n}::float8 / 1000))"),
        _ => format!("${n}"),
    }
}

/// The index after the closing quote of the literal or identifier opened at `start` (a doubled
/// quote inside is an escaped one).
fn skip_quoted(b: &[u8], start: usize, quote: u8) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(s: &str) -> String {
        Statement::parse(s, ValueAs::Jsonb).unwrap().sql
    }

    #[test]
    fn named_parameters_become_positional_ones_in_first_use_order() {
        let s = Statement::parse(
            "SELECT f(:value, :event_id, :value->>'x', :timestamp, :partition)",
            ValueAs::Jsonb,
        )
        .unwrap();
        assert_eq!(
            s.sql,
            "SELECT f(($1::jsonb), $2, ($1::jsonb)->>'x', (to_timestamp($3::float8 / 1000)), $4)"
        );
        assert_eq!(
            s.types(),
            vec![Type::TEXT, Type::TEXT, Type::INT8, Type::INT4]
        );
        let b = Statement::parse("SELECT :value", ValueAs::Bytea).unwrap();
        assert_eq!(
            (b.sql.as_str(), b.types()),
            ("SELECT $1", vec![Type::BYTEA])
        );
    }

    #[test]
    fn literals_identifiers_comments_casts_and_dollar_bodies_are_left_alone() {
        assert_eq!(
            sql("SELECT ':value', \"a:key\", 1::int, :key"),
            "SELECT ':value', \"a:key\", 1::int, $1"
        );
        assert_eq!(
            sql("SELECT 'it''s :x' -- :nope\n, :key"),
            "SELECT 'it''s :x' -- :nope\n, $1"
        );
        assert_eq!(
            sql("SELECT /* :no */ $f$ :no $f$, :key"),
            "SELECT /* :no */ $f$ :no $f$, $1"
        );
        assert_eq!(sql("SELECT $$ :no $$ || :key"), "SELECT $$ :no $$ || $1");
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(
            Statement::parse("SELECT :vaule", ValueAs::Text).unwrap_err(),
            SqlError::Unknown("vaule".into())
        );
        assert_eq!(
            Statement::parse("SELECT $1", ValueAs::Text).unwrap_err(),
            SqlError::Positional("1".into())
        );
        assert_eq!(
            Statement::parse(" ", ValueAs::Text).unwrap_err(),
            SqlError::Empty
        );
    }
}
