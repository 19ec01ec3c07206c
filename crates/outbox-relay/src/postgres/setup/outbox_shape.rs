//! The `[[outbox]]` tables as preflight checks them: each exists, is a table (or a partitioned
//! one), has every mapped column, and maps no virtual generated column; what the checks found
//! (OIDs, NOT NULL and generated columns) goes into the slot's `SlotInfo`.

use relay_core::route::OutboxTable;
use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::query_err,
};

/// What the checks of the `[[outbox]]` tables found, by table OID.
#[derive(Default)]
pub(super) struct OutboxTables {
    /// One of them is partitioned (the publication must publish via the root).
    pub(super) partitioned: bool,
    pub(super) oids: std::collections::HashMap<u32, (String, String)>,
    pub(super) not_null: std::collections::HashMap<u32, Vec<String>>,
    pub(super) generated: std::collections::HashMap<u32, Vec<String>>,
    /// Mapped columns that are stored generated ones: the publication must carry them.
    pub(super) mapped_stored_generated: Vec<String>,
}

/// Each `[[outbox]]` table, in the configured order: it exists, is a table, has every mapped
/// column, and none of them is a virtual generated column.
pub(super) async fn check_outbox_tables(
    client: &Client,
    cfg: &Config,
) -> Result<OutboxTables, RelayError> {
    let mut found = OutboxTables::default();
    for t in &cfg.outbox {
        let (schema, table) = t.qualified_name();
        let row = look_up_outbox_table(client, cfg, &schema, &table).await?;
        let kind: String = row.get(0);
        found.partitioned |= kind == "p";
        check_is_table(&schema, &table, &kind)?;
        check_mapped_columns_exist(t, &schema, &table, &row.get::<_, Vec<String>>(3))?;
        // Generated columns: `name:s` (stored) or `name:v` (virtual, PostgreSQL 18).
        let generated: Vec<(String, String)> = row
            .get::<_, Vec<String>>(5)
            .into_iter()
            .filter_map(|g| {
                g.rsplit_once(':')
                    .map(|(n, k)| (n.to_string(), k.to_string()))
            })
            .collect();
        found
            .mapped_stored_generated
            .extend(check_mapped_columns_not_virtual(
                t, &schema, &table, &generated,
            )?);
        let oid: u32 = row.get(2);
        found.not_null.insert(oid, row.get::<_, Vec<String>>(4));
        found
            .generated
            .insert(oid, generated.into_iter().map(|(n, _)| n).collect());
        found.oids.insert(oid, (schema, table));
    }
    Ok(found)
}

/// The outbox table `schema.table` exists: its kind, whether the role may read it, its OID, and
/// its columns (all, NOT NULL, generated as `name:kind`).
async fn look_up_outbox_table(
    client: &Client,
    cfg: &Config,
    schema: &str,
    table: &str,
) -> Result<tokio_postgres::Row, RelayError> {
    let row = client
        .query_opt(
            "SELECT c.relkind::text, has_table_privilege(c.oid, 'SELECT'), c.oid, \
                    ARRAY(SELECT attname::text FROM pg_attribute \
                           WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped), \
                    ARRAY(SELECT attname::text FROM pg_attribute \
                           WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped \
                             AND attnotnull), \
                    ARRAY(SELECT attname::text || ':' || attgenerated::text FROM pg_attribute \
                           WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped \
                             AND attgenerated <> '') \
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &table],
        )
        .await
        .map_err(query_err("look up the outbox table"))?;
    row.ok_or_else(|| {
        RelayError::from(Definite::Precondition(format!(
            "outbox table {schema}.{table} does not exist in database {:?}: create it (see \
             migrations/) or fix [[outbox]] table",
            cfg.postgres.database
        )))
    })
}

/// The outbox table is a table or a partitioned one (relkind `r` or `p`), not a view.
fn check_is_table(schema: &str, table: &str, kind: &str) -> Result<(), RelayError> {
    if kind != "r" && kind != "p" {
        return Err(RelayError::from(Definite::Precondition(format!(
            "{schema}.{table} is not a table (relkind {kind}): point [[outbox]] table at the \
             outbox table itself"
        ))));
    }
    Ok(())
}

/// Every column `[[outbox]]` maps is one of the table's `columns`.
fn check_mapped_columns_exist(
    t: &OutboxTable,
    schema: &str,
    table: &str,
    columns: &[String],
) -> Result<(), RelayError> {
    for (column, role) in t.mapped_columns() {
        if !columns.contains(&column) {
            return Err(RelayError::from(Definite::Precondition(format!(
                "outbox table {schema}.{table} has no column {column:?}, which [[outbox]] \
                 configures as {role}; its columns are {}: fix the mapping or add the \
                 column",
                columns.join(", ")
            ))));
        }
    }
    Ok(())
}

/// No mapped column is a virtual generated column (PostgreSQL 18; never published); the
/// mapped stored generated ones, as `schema.table.column`.
fn check_mapped_columns_not_virtual(
    t: &OutboxTable,
    schema: &str,
    table: &str,
    generated: &[(String, String)],
) -> Result<Vec<String>, RelayError> {
    let mut stored = Vec::new();
    for (column, role) in t.mapped_columns() {
        match generated
            .iter()
            .find(|(n, _)| *n == column)
            .map(|(_, k)| k.as_str())
        {
            Some("v") => {
                return Err(RelayError::from(Definite::Precondition(format!(
                    "column {column:?} of {schema}.{table}, configured as {role}, is a \
                     virtual generated column, which logical replication never publishes: \
                     make it STORED (PostgreSQL 18 publishes stored generated columns with \
                     publish_generated_columns = stored) or map another column"
                ))));
            }
            Some(_) => stored.push(format!("{schema}.{table}.{column}")),
            None => {}
        }
    }
    Ok(stored)
}
