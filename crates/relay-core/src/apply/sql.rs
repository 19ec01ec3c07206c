//! A handler's SQL: named parameters (`:value`, `:event_id`, …) turned into positional ones
//! with the casts that give each its SQL type.
//!
//! Invariant: a handler statement receives only what the record carries, through bound
//! parameters, never through text pasted into the SQL, so no event can inject SQL. Parameters
//! travel as text, bytes or integers and are cast in SQL (`($1::jsonb)`), so a value that is not
//! of the configured type fails inside the transaction with a SQLSTATE (a definite failure of
//! that record) instead of in the client. String literals, quoted identifiers, dollar-quoted
//! bodies, comments and `::` casts are left as they are.

/// One named parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
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

/// The SQL type a handler gets for `:value`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ValueType {
    #[default]
    Jsonb,
    Text,
    Bytea,
}

/// How a parameter travels on the wire (the statement is prepared with these types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Text,
    Bytea,
    Int4,
    Int8,
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
pub enum SqlError {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<Param>,
    pub value: ValueType,
}

impl Statement {
    /// Rewrites `:name` to `$n` (with a cast where the wire type is not the SQL type), leaving
    /// string literals, quoted identifiers, dollar-quoted bodies, comments and `::` casts alone.
    pub fn parse(sql: &str, value: ValueType) -> Result<Statement, SqlError> {
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

    /// The wire types of `$1..$n`, for preparing the statement.
    pub fn wire_types(&self) -> Vec<Wire> {
        self.params
            .iter()
            .map(|p| match p {
                Param::Partition => Wire::Int4,
                Param::Offset | Param::Timestamp => Wire::Int8,
                Param::Value if self.value == ValueType::Bytea => Wire::Bytea,
                _ => Wire::Text,
            })
            .collect()
    }
}

fn placeholder(p: Param, n: usize, value: ValueType) -> String {
    match p {
        Param::Value if value == ValueType::Jsonb => format!("(${n}::jsonb)"),
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
        Statement::parse(s, ValueType::Jsonb).unwrap().sql
    }

    #[test]
    fn named_parameters_become_positional_ones_in_first_use_order() {
        let s = Statement::parse(
            "SELECT f(:value, :event_id, :value->>'x', :timestamp, :partition)",
            ValueType::Jsonb,
        )
        .unwrap();
        assert_eq!(
            s.sql,
            "SELECT f(($1::jsonb), $2, ($1::jsonb)->>'x', (to_timestamp($3::float8 / 1000)), $4)"
        );
        assert_eq!(
            s.wire_types(),
            vec![Wire::Text, Wire::Text, Wire::Int8, Wire::Int4]
        );
        let b = Statement::parse("SELECT :value", ValueType::Bytea).unwrap();
        assert_eq!(
            (b.sql.as_str(), b.wire_types()),
            ("SELECT $1", vec![Wire::Bytea])
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
            Statement::parse("SELECT :vaule", ValueType::Text).unwrap_err(),
            SqlError::Unknown("vaule".into())
        );
        assert_eq!(
            Statement::parse("SELECT $1", ValueType::Text).unwrap_err(),
            SqlError::Positional("1".into())
        );
        assert_eq!(
            Statement::parse(" ", ValueType::Text).unwrap_err(),
            SqlError::Empty
        );
    }

    proptest::proptest! {
        /// Whatever mix of literals, identifiers, comments, casts and parameters a statement
        /// has, every parameter becomes a placeholder, everything else is kept byte for byte,
        /// and a parameter used twice is one placeholder.
        #[test]
        fn only_parameters_change(parts in proptest::collection::vec(0usize..8, 0..20)) {
            const KEPT: [&str; 5] = [" 'a :value '' :key' ", " \"col:x\" ", " -- :key\n", " 1::int ", " $t$ :topic $t$ "];
            const PARAMS: [&str; 3] = [":value", ":key", ":event_id"];
            let mut sql = String::from("SELECT");
            let mut expected = String::from("SELECT");
            let mut seen: Vec<&str> = Vec::new();
            for p in parts {
                if p < KEPT.len() {
                    sql.push_str(KEPT[p]);
                    expected.push_str(KEPT[p]);
                } else {
                    let name = PARAMS[p - KEPT.len()];
                    let n = match seen.iter().position(|s| *s == name) {
                        Some(i) => i + 1,
                        None => { seen.push(name); seen.len() }
                    };
                    sql.push(' ');
                    sql.push_str(name);
                    expected.push(' ');
                    expected.push_str(&if name == ":value" { format!("(${n}::jsonb)") } else { format!("${n}") });
                }
            }
            let s = Statement::parse(&sql, ValueType::Jsonb).unwrap();
            proptest::prop_assert_eq!(&s.sql, &expected);
            proptest::prop_assert_eq!(s.params.len(), seen.len());
        }
    }
}
