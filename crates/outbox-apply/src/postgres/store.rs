//! The applier's bookkeeping in the consumer's database: the inbox (claims), the positions
//! (offsets table) and the dead-letter table; their DDL, the statements on them, and one
//! prepared connection.
//!
//! Invariant: a position only moves forward through [`Conn::store_position`] (`GREATEST`), so an
//! instance that lost a partition and still commits cannot move it back; only
//! [`Conn::reset_position`], the operator's `apply reset`, can. A claim refreshes
//! `processed_at` when it meets an existing one, so the inbox row lives as long after the
//! *last* copy of an event as after the first (a re-send written long after the first copy
//! cannot outlive its claim).

use outbox_service::postgres::ConnectError;
use tokio_postgres::{Client, Statement as Prepared, types::Type};

use relay_core::apply::sql::Statement;

use super::handler;
use outbox_service::postgres::quote_ident;

use crate::{config::ApplyConfig, error::ApplyError};

/// `schema.table` quoted.
fn qualified(name: &str) -> String {
    let (schema, table) = name.split_once('.').expect("validated: schema.table");
    format!("{}.{}", quote_ident(schema), quote_ident(table))
}

/// The DDL of the three tables under their configured names (`apply setup`;
/// `migrations/0004_apply.sql` holds the same for the default names).
pub(crate) fn ddl(cfg: &ApplyConfig) -> String {
    let a = &cfg.apply;
    let (inbox, offsets, dead) = (
        qualified(&a.inbox_table),
        qualified(&a.offsets_table),
        qualified(&a.dead_letter_table),
    );
    let index = quote_ident(&format!(
        "{}_processed_at",
        a.inbox_table.split_once('.').map_or("", |(_, t)| t)
    ));
    format!(
        "CREATE TABLE IF NOT EXISTS {inbox} (
    consumer text NOT NULL, event_id text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, event_id));
CREATE INDEX IF NOT EXISTS {index} ON {inbox} (processed_at);
CREATE TABLE IF NOT EXISTS {offsets} (
    consumer text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
    next_offset bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition));
CREATE TABLE IF NOT EXISTS {dead} (
    consumer text NOT NULL, topic text NOT NULL, partition integer NOT NULL, \"offset\" bigint NOT NULL,
    event_id text, event_type text, key bytea, value bytea, headers jsonb NOT NULL,
    \"timestamp\" timestamptz, error text NOT NULL, sqlstate text,
    failed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition, \"offset\"));"
    )
}

/// A connection to the consumer's database with every statement prepared.
pub(crate) struct Conn {
    pub(crate) client: Client,
    /// Set from BEGIN until COMMIT or ROLLBACK has answered: a connection dropped with it set
    /// (its task aborted, a ROLLBACK that failed) may hold an open transaction, and goes
    /// instead of back to the pool (a later BEGIN would only warn and join it).
    pub(crate) in_txn: std::sync::atomic::AtomicBool,
    lock: Prepared,
    read: Prepared,
    store: Prepared,
    reset: Prepared,
    claim: Prepared,
    claim_new: Prepared,
    refresh_all: Prepared,
    dead: Prepared,
    /// One per `[[handler]]`, in config order.
    pub(crate) handlers: Vec<(Prepared, Statement)>,
    pub(crate) consumer: String,
}

/// Opens a connection (TLS as configured).
pub(crate) async fn connect(cfg: &ApplyConfig, purpose: &str) -> Result<Client, ApplyError> {
    let pg = &cfg.postgres;
    let context = format!(
        "connecting to the consumer's PostgreSQL at {}:{} (database {:?}, user {:?})",
        pg.host, pg.port, pg.database, pg.user
    );
    let (client, conn) = match pg.connection.connect(purpose).await {
        Ok(opened) => opened,
        Err(ConnectError::Config(e)) => return Err(e.into()),
        Err(ConnectError::Tls(why)) => return Err(ApplyError::Precondition(why)),
        Err(ConnectError::Postgres(e)) => return Err(ApplyError::pg(context)(e)),
    };
    tokio::spawn(async move { drop(conn.await) });
    Ok(client)
}

impl Conn {
    /// Connects and prepares the bookkeeping statements and every handler. A missing table
    /// or a handler that does not prepare is named, with what to do.
    pub(crate) async fn open(cfg: &ApplyConfig, purpose: &str) -> Result<Conn, ApplyError> {
        let client = connect(cfg, purpose).await?;
        Self::prepare(cfg, client).await
    }

    pub(crate) async fn prepare(cfg: &ApplyConfig, client: Client) -> Result<Conn, ApplyError> {
        let a = &cfg.apply;
        let (inbox, offsets, dead) = (
            qualified(&a.inbox_table),
            qualified(&a.offsets_table),
            qualified(&a.dead_letter_table),
        );
        let table_hint = |table: &str| {
            let table = table.to_string();
            move |e: tokio_postgres::Error| {
                ApplyError::Precondition(format!(
                    "the applier's table {table} is missing or not of the applier's layout ({}): \
                     run `outbox-relay apply setup` (or apply migrations/0004_apply.sql)",
                    outbox_service::postgres::describe_pg(&e)
                ))
            }
        };
        let pos = "WHERE consumer = $1 AND topic = $2 AND partition = $3";
        let lock = client
            .prepare(&format!(
                "SELECT next_offset FROM {offsets} {pos} FOR UPDATE"
            ))
            .await
            .map_err(table_hint(&a.offsets_table))?;
        let read = client
            .prepare(&format!("SELECT next_offset FROM {offsets} {pos}"))
            .await
            .map_err(table_hint(&a.offsets_table))?;
        let upsert = format!(
            "INSERT INTO {offsets} AS o (consumer, topic, partition, next_offset) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, topic, partition) DO UPDATE SET"
        );
        let store = client
            .prepare(&format!(
                "{upsert} next_offset = GREATEST(o.next_offset, EXCLUDED.next_offset), updated_at = now()"
            ))
            .await
            .map_err(table_hint(&a.offsets_table))?;
        let reset = client
            .prepare(&format!(
                "{upsert} next_offset = EXCLUDED.next_offset, updated_at = now()"
            ))
            .await
            .map_err(table_hint(&a.offsets_table))?;
        let claim = client
            .prepare(&format!(
                "INSERT INTO {inbox} (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING"
            ))
            .await
            .map_err(table_hint(&a.inbox_table))?;
        // A transaction's claims in one statement: the ids of the records at or after the
        // stored position (`$4` ids, `$5` their offsets); the new claims are returned.
        let claim_new = client
            .prepare_typed(
                &format!(
                    "INSERT INTO {inbox} (consumer, event_id) SELECT $1, u.id \
                     FROM unnest($4::text[], $5::int8[]) AS u(id, off) \
                     WHERE u.off >= coalesce((SELECT next_offset FROM {offsets} {pos}), -1) \
                     ON CONFLICT DO NOTHING RETURNING event_id"
                ),
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT4,
                    Type::TEXT_ARRAY,
                    Type::INT8_ARRAY,
                ],
            )
            .await
            .map_err(table_hint(&a.inbox_table))?;
        // The duplicates' claims, their age refreshed (one claim: `claim`'s duplicate).
        let refresh_all = client
            .prepare_typed(
                &format!(
                    "UPDATE {inbox} SET processed_at = now() \
                     WHERE consumer = $1 AND event_id = ANY($2::text[])"
                ),
                &[Type::TEXT, Type::TEXT_ARRAY],
            )
            .await
            .map_err(table_hint(&a.inbox_table))?;
        let dead = client
            .prepare_typed(
                &format!(
                    "INSERT INTO {dead} (consumer, topic, partition, \"offset\", event_id, \
                     event_type, key, value, headers, \"timestamp\", error, sqlstate) VALUES \
                     ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, to_timestamp($10::float8 / 1000), \
                     $11, $12) ON CONFLICT DO NOTHING"
                ),
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT4,
                    Type::INT8,
                    Type::TEXT,
                    Type::TEXT,
                    Type::BYTEA,
                    Type::BYTEA,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::TEXT,
                ],
            )
            .await
            .map_err(table_hint(&a.dead_letter_table))?;
        let mut handlers = Vec::with_capacity(cfg.handler.len());
        for (i, h) in cfg.handler.iter().enumerate() {
            let s = Statement::parse(&h.sql, h.value.into()).expect("validated with the config");
            let p = client.prepare_typed(&s.sql, &handler::types(&s)).await.map_err(|e| {
                ApplyError::Precondition(format!(
                    "handler[{i}] (event type {:?}) does not prepare: {}; fix its sql (it runs as \
                     {:?})",
                    h.event_type,
                    outbox_service::postgres::describe_pg(&e),
                    s.sql
                ))
            })?;
            handlers.push((p, s));
        }
        Ok(Conn {
            client,
            in_txn: Default::default(),
            lock,
            read,
            store,
            reset,
            claim,
            claim_new,
            refresh_all,
            dead,
            handlers,
            consumer: a.consumer.clone(),
        })
    }

    /// The stored position of a partition (`FOR UPDATE` inside a transaction: serializes two
    /// instances applying the same partition).
    pub(crate) async fn position(
        &self,
        topic: &str,
        partition: i32,
        lock: bool,
    ) -> Result<Option<i64>, tokio_postgres::Error> {
        let st = if lock { &self.lock } else { &self.read };
        let row = self
            .client
            .query_opt(st, &[&self.consumer, &topic, &partition])
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Stores the partition's next position; it only ever moves forward (`GREATEST`).
    pub(crate) async fn store_position(
        &self,
        topic: &str,
        partition: i32,
        next: i64,
    ) -> Result<(), tokio_postgres::Error> {
        self.write_position(&self.store, topic, partition, next)
            .await
    }

    /// Sets the partition's next position, backwards too (an operator's reset).
    pub(crate) async fn reset_position(
        &self,
        topic: &str,
        partition: i32,
        next: i64,
    ) -> Result<(), tokio_postgres::Error> {
        self.write_position(&self.reset, topic, partition, next)
            .await
    }

    async fn write_position(
        &self,
        statement: &Prepared,
        topic: &str,
        partition: i32,
        next: i64,
    ) -> Result<(), tokio_postgres::Error> {
        self.client
            .execute(statement, &[&self.consumer, &topic, &partition, &next])
            .await
            .map(drop)
    }

    /// Claims `event_id`: true when the claim is new (apply the effect), false for a duplicate
    /// (its claim's age is refreshed).
    pub(crate) async fn claim(&self, event_id: &str) -> Result<bool, tokio_postgres::Error> {
        if self
            .client
            .execute(&self.claim, &[&self.consumer, &event_id])
            .await?
            == 1
        {
            return Ok(true);
        }
        self.refresh_all(&[event_id]).await?;
        Ok(false)
    }

    /// Claims `event_ids` (their records' `offsets` alongside) in one statement, leaving out
    /// those below the partition's stored position: the new claims.
    pub(crate) async fn claim_new(
        &self,
        topic: &str,
        partition: i32,
        event_ids: &[&str],
        offsets: &[i64],
    ) -> Result<std::collections::HashSet<String>, tokio_postgres::Error> {
        let rows = self
            .client
            .query(
                &self.claim_new,
                &[&self.consumer, &topic, &partition, &event_ids, &offsets],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Refreshes the age of claims that already existed (duplicates).
    pub(crate) async fn refresh_all(
        &self,
        event_ids: &[&str],
    ) -> Result<(), tokio_postgres::Error> {
        self.client
            .execute(&self.refresh_all, &[&self.consumer, &event_ids])
            .await
            .map(drop)
    }

    /// Records `r` in the dead-letter table with `error` (idempotent on its coordinates).
    pub(crate) async fn dead_letter(
        &self,
        r: &crate::record::Record,
        error: &str,
        sqlstate: Option<&str>,
    ) -> Result<(), tokio_postgres::Error> {
        self.client
            .execute(
                &self.dead,
                &[
                    &self.consumer,
                    &r.topic,
                    &r.partition,
                    &r.offset,
                    &r.event_id,
                    &r.event_type,
                    &r.key,
                    &r.value,
                    &r.headers_json(),
                    &r.timestamp_ms,
                    &error,
                    &sqlstate,
                ],
            )
            .await
            .map(drop)
    }
}
