//! The health of every outbox table, read from PostgreSQL's statistics: live and dead tuples
//! (`pg_stat_user_tables`), total size, the last (auto)vacuum and autoanalyze, and, where
//! `[[outbox]] created_at_column` is set, the age of the oldest row. A partitioned outbox is
//! summed over its leaf partitions (`pg_partition_tree`), which also counts them.
//!
//! Used by the slot monitor (gauges, the `outbox_dead_tuples` alert) and by `status`; it
//! depends on nothing but the SQL helpers, so the alerts can carry its type.
//! Invariant: reading is all it does; a table that cannot be read is an error for that table
//! only, so one bad `created_at_column` never hides the others; and it never waits long for a
//! table lock (see [`LOCK_WAIT`]), so a migration on an outbox table never freezes the monitor.

use std::time::{Duration, SystemTime};

use relay_core::route::OutboxTable;
use tokio_postgres::Client;

use crate::postgres::control::{describe_pg, quote_ident};

/// One outbox table (all partitions together).
#[derive(Debug, Clone, PartialEq)]
pub struct TableHealth {
    /// `schema.table`, the `table` label of the gauges.
    pub table: String,
    /// Leaf partitions; 1 for a table that is not partitioned.
    pub partitions: i64,
    pub live_tuples: i64,
    pub dead_tuples: i64,
    /// `pg_total_relation_size` (indexes and TOAST included).
    pub size_bytes: i64,
    /// The most recent autovacuum of any partition; `None`: never.
    pub last_autovacuum: Option<SystemTime>,
    /// Time since the most recent vacuum of any partition, manual or automatic (by the
    /// server's clock); `None`: never.
    pub last_vacuum_age: Option<Duration>,
    pub last_autoanalyze: Option<SystemTime>,
    /// Age of the oldest row by `created_at_column`: `None` when not configured, zero when the
    /// table is empty.
    pub oldest_row_age: Option<Duration>,
}

fn epoch(secs: Option<f64>) -> Option<SystemTime> {
    secs.filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(s))
}

/// Reads one table; the error is one sentence that names the table and what to fix.
pub(crate) async fn query_table(client: &Client, t: &OutboxTable) -> Result<TableHealth, String> {
    let (schema, table) = t.qualified_name();
    let name = format!("{}.{}", quote_ident(&schema), quote_ident(&table));
    let row = client
        .query_one(
            // pg_partition_tree lists nothing for a plain table: it is its own only leaf.
            "WITH leaves AS ( \
                 SELECT relid FROM pg_partition_tree($1::text::regclass) WHERE isleaf \
                 UNION ALL \
                 SELECT c.oid::regclass FROM pg_class c \
                  WHERE c.oid = $1::text::regclass AND c.relkind = 'r' AND NOT c.relispartition) \
             SELECT count(*)::int8, coalesce(sum(s.n_live_tup), 0)::int8, \
                    coalesce(sum(s.n_dead_tup), 0)::int8, \
                    coalesce(sum(pg_total_relation_size(l.relid)), 0)::int8, \
                    extract(epoch FROM max(s.last_autovacuum))::float8, \
                    extract(epoch FROM now() - max(greatest(s.last_vacuum, s.last_autovacuum)))::float8, \
                    extract(epoch FROM max(s.last_autoanalyze))::float8 \
               FROM leaves l LEFT JOIN pg_stat_user_tables s ON s.relid = l.relid",
            &[&name],
        )
        .await
        .map_err(|e| format!("cannot read the statistics of {schema}.{table}: {}", describe_pg(&e)))?;
    let oldest_row_age = match &t.created_at_column {
        None => None,
        Some(col) => {
            let sql = format!(
                "SELECT extract(epoch FROM now() - min({}))::float8 FROM {name}",
                quote_ident(col)
            );
            let age: Option<f64> = client
                .query_one(&sql, &[])
                .await
                .map_err(|e| {
                    format!(
                        "cannot read the oldest row of {schema}.{table} by created_at_column \
                         {col:?}: {} (name a timestamp column of the table, or remove the key)",
                        describe_pg(&e)
                    )
                })?
                .get(0);
            Some(Duration::from_secs_f64(age.unwrap_or(0.0).max(0.0)))
        }
    };
    Ok(TableHealth {
        table: format!("{schema}.{table}"),
        partitions: row.get(0),
        live_tuples: row.get(1),
        dead_tuples: row.get(2),
        size_bytes: row.get(3),
        last_autovacuum: epoch(row.get(4)),
        last_vacuum_age: row
            .get::<_, Option<f64>>(5)
            .filter(|s| s.is_finite())
            .map(|s| Duration::from_secs_f64(s.max(0.0))),
        last_autoanalyze: epoch(row.get(6)),
        oldest_row_age,
    })
}

/// How long a reading waits for a table lock (`lock_timeout`). The size and the oldest row need
/// the table's ACCESS SHARE lock; behind a migration's ACCESS EXCLUSIVE lock (`ALTER TABLE`,
/// `VACUUM FULL`, `LOCK TABLE`) the reading would wait as long as the migration, and with it
/// the monitor's whole loop: slot lag and retained WAL unread, their alerts silent. After this
/// long the reading of that table fails (`outbox_stats_failed`, its last good values kept) and
/// the monitor goes on.
const LOCK_WAIT: &str = "1s";

/// Reads every configured outbox table, waiting at most [`LOCK_WAIT`] for any table's lock;
/// the session's `lock_timeout` is restored afterwards.
pub(crate) async fn query(
    client: &Client,
    tables: &[OutboxTable],
) -> Vec<Result<TableHealth, String>> {
    let mut out = Vec::with_capacity(tables.len());
    let limited = client
        .batch_execute(&format!("SET lock_timeout = '{LOCK_WAIT}'"))
        .await;
    if let Err(e) = &limited {
        let e = format!(
            "cannot set lock_timeout for the outbox statistics: {}",
            describe_pg(e)
        );
        return tables.iter().map(|_| Err(e.clone())).collect();
    }
    for t in tables {
        out.push(query_table(client, t).await);
    }
    // A failure here is the connection's, and the next query on it reports that.
    let _ = client.batch_execute("RESET lock_timeout").await;
    out
}

/// The table with the most dead tuples, for the `outbox_dead_tuples` alert.
pub(crate) fn worst(tables: &[TableHealth]) -> Option<&TableHealth> {
    tables.iter().max_by_key(|t| t.dead_tuples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_are_checked_and_the_worst_table_found() {
        assert_eq!(epoch(None), None);
        assert_eq!(epoch(Some(f64::NAN)), None);
        assert_eq!(
            epoch(Some(10.0)),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10))
        );
        let t = |dead| TableHealth {
            table: format!("public.t{dead}"),
            partitions: 1,
            live_tuples: 0,
            dead_tuples: dead,
            size_bytes: 0,
            last_autovacuum: None,
            last_vacuum_age: None,
            last_autoanalyze: None,
            oldest_row_age: None,
        };
        let all = [t(3), t(9), t(1)];
        assert_eq!(worst(&all).unwrap().table, "public.t9");
        assert_eq!(worst(&[]), None);
    }
}
