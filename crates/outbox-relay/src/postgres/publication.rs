//! The publication: created (before the slot, see [`crate::postgres::setup`]) with every configured
//! outbox table, published through the root of a partitioned one, and checked to still cover
//! them (the monitor's drift check).

use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::{describe_pg, query_err, quote_ident},
    telemetry::events::PUBLICATION_CREATED,
};

/// A partitioned outbox is published through its root (`publish_via_partition_root`), so its
/// rows arrive under the root's name whichever partition holds them; the option is set on
/// every publication the relay creates, so partitions attached later are covered too.
pub(crate) async fn ensure_publication(
    client: &Client,
    cfg: &Config,
    partitioned: bool,
    generated_columns: bool,
    on_standby: bool,
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    let row = client
        .query_opt(
            "SELECT pubinsert, pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&pg.publication],
        )
        .await
        .map_err(query_err("look up the publication"))?;
    let tables: Vec<String> = cfg
        .outbox
        .iter()
        .map(|t| {
            let (s, n) = t.qualified_name();
            format!("{}.{}", quote_ident(&s), quote_ident(&n))
        })
        .collect();
    // `[[message]]` sections only: a publication of no table still carries logical messages.
    let for_tables = if tables.is_empty() {
        String::new()
    } else {
        format!(" FOR TABLE {}", tables.join(", "))
    };
    match row {
        None if on_standby => {
            return Err(RelayError::from(Definite::Precondition(format!(
                "publication {:?} does not exist, and this server is a standby, where it cannot \
                 be created: create it on the primary (it reaches the standby by replication): \
                 CREATE PUBLICATION {}{for_tables} WITH (publish = 'insert', \
                 publish_via_partition_root = true)",
                pg.publication,
                quote_ident(&pg.publication),
            ))));
        }
        None if pg.create_publication => {
            // A mapped stored generated column is published only with this (PostgreSQL 18).
            let gencols = if generated_columns {
                ", publish_generated_columns = stored"
            } else {
                ""
            };
            let sql = format!(
                "CREATE PUBLICATION {}{for_tables} \
                 WITH (publish = 'insert', publish_via_partition_root = true{gencols})",
                quote_ident(&pg.publication),
            );
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| create_failed(&pg.publication, &sql, e))?;
            let tables = if tables.is_empty() {
                "none ([[message]] sections only)".into()
            } else {
                tables.join(", ")
            };
            tracing::info!(publication = %pg.publication, tables = %tables, "{PUBLICATION_CREATED}");
            return Ok(());
        }
        None => {
            return Err(RelayError::from(Definite::Precondition(format!(
                "publication {:?} does not exist: run CREATE PUBLICATION {}{for_tables} WITH \
                 (publish = 'insert'), or set postgres.create_publication = true",
                pg.publication,
                quote_ident(&pg.publication),
            ))));
        }
        Some(row) => {
            let inserts: bool = row.get(0);
            let via_root: bool = row.get(1);
            if partitioned && !via_root {
                return Err(RelayError::from(Definite::Precondition(format!(
                    "publication {:?} publishes the partitioned outbox per partition, so its \
                     rows would arrive under partition names: run ALTER PUBLICATION {} SET \
                     (publish = 'insert', publish_via_partition_root = true)",
                    pg.publication,
                    quote_ident(&pg.publication)
                ))));
            }
            if !inserts {
                return Err(RelayError::from(Definite::Precondition(format!(
                    "publication {:?} does not publish INSERTs: run ALTER PUBLICATION {} SET \
                     (publish = 'insert')",
                    pg.publication,
                    quote_ident(&pg.publication)
                ))));
            }
        }
    }
    publication_covers_outbox(client, cfg).await
}

/// CREATE PUBLICATION failed. Instances that start together race to create it: the loser's
/// duplicate (42710, or 23505 from the catalog's unique index) means it exists now, and the
/// restart after the backoff finds and checks it. A lost connection or a lock or
/// serialization conflict is transient too; anything else (no privilege, no such table) needs
/// the operator.
fn create_failed(publication: &str, sql: &str, e: tokio_postgres::Error) -> RelayError {
    use tokio_postgres::error::SqlState;
    let Some(code) = e.code() else {
        return query_err("create the publication")(e);
    };
    if *code == SqlState::DUPLICATE_OBJECT || *code == SqlState::UNIQUE_VIOLATION {
        return query_err(
            "create the publication (another instance created it at the same moment; looking again)",
        )(e);
    }
    if code.code().starts_with("40")
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::QUERY_CANCELED
        || code.code().starts_with("08")
        || code.code().starts_with("57P")
    {
        return query_err("create the publication")(e);
    }
    RelayError::from(Definite::Precondition(format!(
        "cannot create publication {publication:?}: {}; create it as the table owner: {sql}",
        describe_pg(&e)
    )))
}

/// A mapped column that is a stored generated one arrives only from a publication with
/// `publish_generated_columns = stored` (PostgreSQL 18; before 18 never): without it every
/// insert would be poison for lack of the column.
pub(crate) async fn check_generated_columns(
    client: &Client,
    cfg: &Config,
    mapped: &[String],
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    let gencols: Option<String> = client
        .query_opt(
            "SELECT to_jsonb(p)->>'pubgencols' FROM pg_publication p WHERE pubname = $1",
            &[&pg.publication],
        )
        .await
        .map_err(query_err("read the publication's generated-columns option"))?
        .and_then(|r| r.get(0));
    match gencols.as_deref() {
        Some("s") => Ok(()),
        None => Err(RelayError::from(Definite::Precondition(format!(
            "{} is a stored generated column, and PostgreSQL publishes generated columns from \
             version 18 on (publish_generated_columns = stored): map another column, or \
             upgrade",
            mapped.join(", ")
        )))),
        Some(_) => Err(RelayError::from(Definite::Precondition(format!(
            "{} is a stored generated column, and publication {:?} does not publish generated \
             columns: run ALTER PUBLICATION {} SET (publish_generated_columns = stored)",
            mapped.join(", "),
            pg.publication,
            quote_ident(&pg.publication)
        )))),
    }
}

/// Checks that the publication still lists every outbox table. A table dropped and re-created
/// silently leaves a `FOR TABLE` publication, after which its events never reach the relay:
/// checked at start and, by the slot monitor, while running.
pub(crate) async fn publication_covers_outbox(
    client: &Client,
    cfg: &Config,
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    for t in &cfg.outbox {
        let (schema, table) = t.qualified_name();
        let present = client
            .query_opt(
                "SELECT 1 FROM pg_publication_tables \
                  WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                &[&pg.publication, &schema, &table],
            )
            .await
            .map_err(query_err("list publication tables"))?
            .is_some();
        if !present {
            return Err(RelayError::from(Definite::Precondition(format!(
                "publication {:?} does not include {schema}.{table}, so its events would never \
                 reach the relay (this also happens after the table is dropped and re-created): \
                 run ALTER PUBLICATION {} ADD TABLE {}.{}; rows inserted while it was missing \
                 were not published and must be re-published from the table",
                pg.publication,
                quote_ident(&pg.publication),
                quote_ident(&schema),
                quote_ident(&table)
            ))));
        }
    }
    Ok(())
}
