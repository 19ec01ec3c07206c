//! One PostgreSQL transaction over consecutive records of one partition: lock the position,
//! claim each event id, run its handler when the claim is new, store the next position,
//! commit. And the dead-letter transaction of one record.
//!
//! Invariant: the claim, the effect and the position commit together or not at all; records
//! below the stored position (applied by another instance since this one read them) are
//! passed over inside the transaction, under the position's row lock.

use std::time::Instant;

use relay_core::apply::failure::{Kind, QUERY_CANCELED, classify};

use super::{record::Record, store::Conn};
use crate::config::ApplyConfig;

/// What one transaction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) applied: u64,
    pub(crate) duplicates: u64,
    pub(crate) ignored: u64,
    /// Records below the stored position, left alone.
    pub(crate) behind: u64,
    /// The stored position after the commit.
    pub(crate) next: i64,
}

/// Why a transaction did not commit.
#[derive(Debug)]
pub(crate) enum Broke {
    /// Retry the whole transaction after a backoff.
    Transient(String),
    /// Record `index` cannot be applied: its failure policy decides.
    Definite {
        index: usize,
        error: String,
        sqlstate: Option<String>,
    },
    /// A definite error at COMMIT (a deferred constraint): no record named.
    DefiniteAtCommit {
        error: String,
        sqlstate: Option<String>,
    },
    /// The connection broke during COMMIT: read the position again to know.
    CommitUnknown(String),
}

fn sqlstate(e: &tokio_postgres::Error) -> Option<String> {
    e.code().map(|c| c.code().to_string())
}

fn describe(e: &tokio_postgres::Error) -> String {
    let text = crate::pg::describe_pg(e);
    if sqlstate(e).as_deref() == Some(QUERY_CANCELED) {
        format!("{text}: the handler ran longer than apply.statement_timeout_ms")
    } else {
        text
    }
}

/// A bookkeeping statement failed: transient or definite for the record at `index`.
fn broke(e: &tokio_postgres::Error, index: usize) -> Broke {
    match classify(sqlstate(e).as_deref()) {
        Kind::Transient => Broke::Transient(describe(e)),
        Kind::Definite => Broke::Definite {
            index,
            error: describe(e),
            sqlstate: sqlstate(e),
        },
    }
}

/// Applies `records` (one partition, offsets increasing) in one transaction.
pub(crate) async fn apply(
    conn: &Conn,
    cfg: &ApplyConfig,
    records: &[Record],
) -> Result<Applied, Broke> {
    let c = &conn.client;
    let first = records.first().expect("a transaction has records");
    let begin = format!(
        "BEGIN; SET LOCAL statement_timeout = {}",
        cfg.apply.statement_timeout_ms
    );
    c.batch_execute(&begin).await.map_err(|e| broke(&e, 0))?;
    let result = body(conn, cfg, records, first).await;
    match result {
        Ok(mut done) => match c.batch_execute("COMMIT").await {
            Ok(()) => {
                done.next = done.next.max(records.last().map_or(0, |r| r.offset + 1));
                Ok(done)
            }
            Err(e) if e.code().is_none() => Err(Broke::CommitUnknown(describe(&e))),
            Err(e) => match classify(sqlstate(&e).as_deref()) {
                Kind::Transient => Err(Broke::Transient(describe(&e))),
                Kind::Definite => Err(Broke::DefiniteAtCommit {
                    error: describe(&e),
                    sqlstate: sqlstate(&e),
                }),
            },
        },
        Err(b) => {
            // A broken connection rolls back by itself; an error leaves it to be rolled back.
            let _ = c.batch_execute("ROLLBACK").await;
            Err(b)
        }
    }
}

async fn body(
    conn: &Conn,
    cfg: &ApplyConfig,
    records: &[Record],
    first: &Record,
) -> Result<Applied, Broke> {
    let mut done = Applied::default();
    let stored = conn
        .position(&first.topic, first.partition, true)
        .await
        .map_err(|e| broke(&e, 0))?;
    for (i, r) in records.iter().enumerate() {
        if stored.is_some_and(|s| r.offset < s) {
            done.behind += 1;
            continue;
        }
        let definite = |error: String| Broke::Definite {
            index: i,
            error,
            sqlstate: None,
        };
        let Some(event_id) = r.event_id.as_deref() else {
            return Err(definite(format!(
                "record {} has no {:?} header (apply.event_id_header): it cannot be claimed",
                r.at(),
                cfg.apply.event_id_header
            )));
        };
        let event_type = r.event_type.as_deref().unwrap_or_default();
        let ignored = cfg.apply.ignore_types.iter().any(|t| t == event_type);
        let handler = cfg.handler_of(event_type);
        if handler.is_none() && !ignored {
            return Err(definite(format!(
                "record {} has event type {event_type:?} ({:?} header), which has no [[handler]] \
                 and is not in apply.ignore_types",
                r.at(),
                cfg.apply.event_type_header
            )));
        }
        if !conn.claim(event_id).await.map_err(|e| broke(&e, i))? {
            done.duplicates += 1;
            continue;
        }
        let Some((h, handler)) = handler.filter(|_| !ignored) else {
            done.ignored += 1;
            continue;
        };
        let _ = handler;
        let (prepared, statement) = &conn.handlers[h];
        let params = super::handler::bind(statement, r)
            .map_err(|e| definite(format!("record {}: {e}", r.at())))?;
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p.as_ref() as _).collect();
        let started = Instant::now();
        conn.client
            .execute(prepared, &refs)
            .await
            .map_err(|e| match broke(&e, i) {
                Broke::Definite {
                    index,
                    error,
                    sqlstate,
                } => Broke::Definite {
                    index,
                    error: format!(
                        "handler of {event_type:?} failed on record {} (event {event_id}): {error}",
                        r.at()
                    ),
                    sqlstate,
                },
                other => other,
            })?;
        metrics::histogram!(crate::metrics::APPLY_HANDLER_SECONDS, "event_type" => event_type.to_string())
            .record(started.elapsed().as_secs_f64());
        done.applied += 1;
    }
    let last = records.last().expect("a transaction has records");
    let next = last.offset + 1;
    conn.store_position(&last.topic, last.partition, next)
        .await
        .map_err(|e| broke(&e, records.len() - 1))?;
    done.next = stored.map_or(next, |s| s.max(next));
    Ok(done)
}

/// The dead-letter transaction of record `r`: its claim kept (or made), the record and `error`
/// in the dead-letter table, the position moved past it.
pub(crate) async fn dead_letter(
    conn: &Conn,
    r: &Record,
    error: &str,
    sqlstate: Option<&str>,
) -> Result<i64, Broke> {
    let c = &conn.client;
    c.batch_execute("BEGIN")
        .await
        .map_err(|e| Broke::Transient(describe(&e)))?;
    let body = async {
        conn.position(&r.topic, r.partition, true).await?;
        if let Some(id) = r.event_id.as_deref() {
            conn.claim(id).await?;
        }
        conn.dead_letter(r, error, sqlstate).await?;
        conn.store_position(&r.topic, r.partition, r.offset + 1)
            .await
    };
    if let Err(e) = body.await {
        let _ = c.batch_execute("ROLLBACK").await;
        // Writing the dead letter cannot fail for the record's sake: anything is retried.
        return Err(Broke::Transient(describe(&e)));
    }
    match c.batch_execute("COMMIT").await {
        Ok(()) => Ok(r.offset + 1),
        Err(e) if e.code().is_none() => Err(Broke::CommitUnknown(describe(&e))),
        Err(e) => Err(Broke::Transient(describe(&e))),
    }
}
