//! Outbox rows read from the table, each with what the stream would have said of it: the
//! table's description as a Relation message gives it (column names and type OIDs in column
//! order, generated columns left out as pgoutput leaves them out), every value as its type's
//! text output in the replication session's settings (ISO dates, UTC, extra_float_digits=3,
//! `source::replication_config`), its inserting transaction and command, and that transaction's
//! commit time.

use bytes::Bytes;
use relay_core::{
    pgoutput::{Column, Relation, Value},
    route::OutboxTable,
};
use tokio_postgres::{Client, types::ToSql};

use crate::{
    error::{Definite, RelayError},
    postgres::control::{query_err, quote_ident},
};

/// Which rows: every condition given must hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// Values of the column mapped to the `id` header.
    pub(crate) ids: Vec<String>,
    /// Values of the key column.
    pub(crate) aggregates: Vec<String>,
    /// Committed at or after this time (any text `timestamptz` reads).
    pub(crate) since: Option<String>,
    /// Committed before this time.
    pub(crate) until: Option<String>,
    /// Inserted by one of these transactions (`xmin`, 32-bit; a commit LSN range's, with their
    /// subtransactions).
    pub(crate) xids: Option<Vec<i64>>,
}

/// One row with its source facts.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The relation it belongs to ([`TableRows::relation`]).
    pub(crate) oid: u32,
    pub(crate) tuple: Vec<Value>,
    /// `xmin`.
    pub(crate) xid: u64,
    /// Commit time in µs since the Unix epoch, when `track_commit_timestamp` knew it.
    pub(crate) commit_time_us: Option<i64>,
    /// The inserting command in its transaction (`cmin`).
    pub(crate) command: u64,
    /// Physical position (block << 16 | line): the order of one statement's rows.
    pub(crate) position: u64,
    /// The event id (the column mapped to the `id` header), for printing.
    pub(crate) id: Option<String>,
}

/// One configured outbox table as the server describes it.
pub(crate) struct TableRows {
    pub(crate) relation: Relation,
    select: String,
    /// NOT NULL columns (`[outbox.debezium]` schemas' `optional`), as the preflight reads them.
    pub(crate) not_null: Vec<String>,
    /// Generated columns (left out of the relation, as pgoutput leaves them out).
    pub(crate) generated: Vec<String>,
    id_column: Option<String>,
    key_column: String,
}

/// Whether commit timestamps are recorded (`track_commit_timestamp`).
pub(crate) async fn commit_timestamps_on(client: &Client) -> Result<bool, RelayError> {
    let on: String = client
        .query_one("SELECT current_setting('track_commit_timestamp')", &[])
        .await
        .map_err(query_err("read track_commit_timestamp"))?
        .get(0);
    Ok(on == "on")
}

/// Pins the session settings that the text of a value depends on to the replication
/// connection's.
pub(crate) async fn pin_session(client: &Client) -> Result<(), RelayError> {
    client
        .batch_execute("SET datestyle = ISO; SET timezone = UTC; SET extra_float_digits = 3")
        .await
        .map_err(query_err(
            "set the session's datestyle, timezone and extra_float_digits",
        ))
}

impl TableRows {
    /// Describes `table` from the catalog.
    pub(crate) async fn describe(
        client: &Client,
        table: &OutboxTable,
        commit_ts: bool,
    ) -> Result<TableRows, RelayError> {
        let (schema, name) = table.qualified_name();
        let row = client
            .query_opt(
                "SELECT c.oid, \
                        ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = c.oid \
                               AND attnum > 0 AND NOT attisdropped AND attgenerated = '' \
                               ORDER BY attnum), \
                        ARRAY(SELECT atttypid::bigint FROM pg_attribute WHERE attrelid = c.oid \
                               AND attnum > 0 AND NOT attisdropped AND attgenerated = '' \
                               ORDER BY attnum), \
                        ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = c.oid \
                               AND attnum > 0 AND NOT attisdropped AND attnotnull), \
                        ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = c.oid \
                               AND attnum > 0 AND NOT attisdropped AND attgenerated <> '') \
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                  WHERE n.nspname = $1 AND c.relname = $2",
                &[&schema, &name],
            )
            .await
            .map_err(query_err("describe the outbox table"))?
            .ok_or_else(|| {
                RelayError::from(Definite::Precondition(format!(
                    "outbox table {schema}.{name} does not exist: fix [[outbox]] table"
                )))
            })?;
        let oid: u32 = row.get(0);
        let names: Vec<String> = row.get(1);
        let types: Vec<i64> = row.get(2);
        let not_null: Vec<String> = row.get(3);
        let generated: Vec<String> = row.get(4);
        let columns: Vec<Column> = names
            .iter()
            .zip(&types)
            .map(|(n, t)| Column {
                name: n.clone(),
                type_oid: *t as u32,
            })
            .collect();
        let commit_time = if commit_ts {
            "(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::bigint"
        } else {
            "NULL::bigint"
        };
        let values: Vec<String> = names
            .iter()
            .map(|n| format!("{}::text", quote_ident(n)))
            .collect();
        let select = format!(
            "SELECT xmin::text::bigint, {commit_time}, ctid::text, cmin::text::bigint, {} FROM {}.{}",
            values.join(", "),
            quote_ident(&schema),
            quote_ident(&name)
        );
        Ok(TableRows {
            relation: Relation {
                oid,
                namespace: schema,
                name,
                columns,
            },
            select,
            not_null,
            generated,
            id_column: table.headers.get("id").cloned(),
            key_column: table.key_column.clone(),
        })
    }

    /// The rows `filter` selects, in no particular order.
    pub(crate) async fn read(
        &self,
        client: &Client,
        filter: &Filter,
    ) -> Result<Vec<Row>, RelayError> {
        let mut conditions = Vec::new();
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        if !filter.ids.is_empty() {
            let Some(id) = &self.id_column else {
                return Err(RelayError::from(Definite::Precondition(format!(
                    "--ids needs a column mapped to the `id` header, and [[outbox]] {}.{} maps \
                     none: select by --aggregate or a time range instead",
                    self.relation.namespace, self.relation.name
                ))));
            };
            params.push(Box::new(filter.ids.clone()));
            conditions.push(format!(
                "{}::text = ANY(${})",
                quote_ident(id),
                params.len()
            ));
        }
        if !filter.aggregates.is_empty() {
            params.push(Box::new(filter.aggregates.clone()));
            conditions.push(format!(
                "{}::text = ANY(${})",
                quote_ident(&self.key_column),
                params.len()
            ));
        }
        for (bound, op) in [(&filter.since, ">="), (&filter.until, "<")] {
            if let Some(t) = bound {
                params.push(Box::new(t.clone()));
                conditions.push(format!(
                    "pg_xact_commit_timestamp(xmin) {op} ${}::text::timestamptz",
                    params.len()
                ));
            }
        }
        if let Some(xids) = &filter.xids {
            params.push(Box::new(xids.clone()));
            conditions.push(format!("xmin::text::bigint = ANY(${})", params.len()));
        }
        let mut sql = self.select.clone();
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let rows = client
            .query(&sql, &refs)
            .await
            .map_err(query_err("read outbox rows"))?;
        let id_index = self
            .id_column
            .as_ref()
            .and_then(|c| self.relation.columns.iter().position(|col| &col.name == c));
        Ok(rows
            .iter()
            .map(|r| {
                let tuple: Vec<Value> = (0..self.relation.columns.len())
                    .map(|i| match r.get::<_, Option<String>>(4 + i) {
                        None => Value::Null,
                        Some(t) => Value::Text(Bytes::from(t)),
                    })
                    .collect();
                let id = id_index.and_then(|i| match &tuple[i] {
                    Value::Text(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                });
                Row {
                    oid: self.relation.oid,
                    xid: r.get::<_, i64>(0) as u64,
                    commit_time_us: r.get(1),
                    position: ctid_position(&r.get::<_, String>(2)),
                    command: r.get::<_, i64>(3) as u64,
                    tuple,
                    id,
                }
            })
            .collect())
    }
}

/// `(block,line)` → `block << 16 | line`.
fn ctid_position(ctid: &str) -> u64 {
    let inner = ctid.trim_start_matches('(').trim_end_matches(')');
    let (b, l) = inner.split_once(',').unwrap_or(("0", "0"));
    (b.parse::<u64>().unwrap_or(0) << 16) | l.parse::<u64>().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ctid_positions_order_by_block_then_line() {
        assert_eq!(super::ctid_position("(0,1)"), 1);
        assert!(super::ctid_position("(1,1)") > super::ctid_position("(0,200)"));
    }
}
