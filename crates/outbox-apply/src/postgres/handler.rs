//! Binding a record to a handler statement (`relay_core::apply::sql` parses it): the values of
//! `$1..$n` and their wire types.

use relay_core::apply::sql::{Param, Statement, ValueType, Wire};
use tokio_postgres::types::{ToSql, Type};

use crate::record::Record;

/// The wire types of `s`'s parameters, for `prepare_typed`.
pub(crate) fn types(s: &Statement) -> Vec<Type> {
    s.wire_types()
        .into_iter()
        .map(|w| match w {
            Wire::Text => Type::TEXT,
            Wire::Bytea => Type::BYTEA,
            Wire::Int4 => Type::INT4,
            Wire::Int8 => Type::INT8,
        })
        .collect()
}

/// The values of `$1..$n` of `s` for `r`. A value that must be text and is not UTF-8 is an
/// error (a definite failure of the record).
pub(crate) fn bind<'r>(
    s: &Statement,
    r: &'r Record,
) -> Result<Vec<Box<dyn ToSql + Sync + Send + 'r>>, String> {
    let text = |bytes: Option<&'r [u8]>, what: &str| -> Result<Option<&'r str>, String> {
        bytes
            .map(|b| {
                std::str::from_utf8(b).map_err(|_| format!("the record's {what} is not UTF-8 text"))
            })
            .transpose()
    };
    let mut out: Vec<Box<dyn ToSql + Sync + Send + 'r>> = Vec::with_capacity(s.params.len());
    for p in &s.params {
        out.push(match p {
            Param::Key => Box::new(text(r.key.as_deref(), "key")?),
            Param::Value if s.value == ValueType::Bytea => Box::new(r.value.as_deref()),
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
