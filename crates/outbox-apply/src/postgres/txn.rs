//! One PostgreSQL transaction over consecutive records of one partition: lock the position,
//! claim the event ids (one statement), run each new claim's handler, store the next position,
//! commit; two round trips for any number of records, statements pipelined. And the
//! dead-letter transaction of one record.
//!
//! Invariant: the claim, the effect and the position commit together or not at all; records
//! below the stored position (applied by another instance since this one read them) are
//! passed over inside the transaction, under the position's row lock.

use std::{sync::atomic::Ordering, time::Instant};

use relay_core::apply::{
    contention::Cause,
    failure::{Kind, QUERY_CANCELED, classify},
};

use super::store::Conn;
use crate::{config::ApplyConfig, record::Record};

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
    /// A deadlock or serialization failure with another transaction: retry at once, with
    /// fewer records (relay_core::apply::contention).
    Conflict(String),
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
    let text = outbox_service::postgres::describe_pg(e);
    if sqlstate(e).as_deref() == Some(QUERY_CANCELED) {
        format!("{text}: the handler ran longer than apply.statement_timeout_ms")
    } else {
        text
    }
}

/// A statement of the transaction's own bookkeeping (the position's lock, the claims, the
/// duplicates' refresh, the position) failed: a statement timeout there is a wait on a lock
/// another transaction holds (another instance on the partition, or on the same event id),
/// not the record's fault, so it is retried; anything else as [`broke`].
fn bookkeeping(e: &tokio_postgres::Error, index: usize) -> Broke {
    if sqlstate(e).as_deref() == Some(QUERY_CANCELED) {
        Broke::Transient(format!(
            "{}: waited longer than apply.statement_timeout_ms, most likely on a lock another \
             transaction holds",
            outbox_service::postgres::describe_pg(e)
        ))
    } else {
        broke(e, index)
    }
}

/// A transient error: a conflict with another transaction, or anything else.
fn transient(e: &tokio_postgres::Error) -> Broke {
    match Cause::of(sqlstate(e).as_deref()) {
        Cause::Conflict => Broke::Conflict(describe(e)),
        Cause::Away => Broke::Transient(describe(e)),
    }
}

/// A bookkeeping statement failed: transient or definite for the record at `index`.
fn broke(e: &tokio_postgres::Error, index: usize) -> Broke {
    match classify(sqlstate(e).as_deref()) {
        Kind::Transient => transient(e),
        Kind::Definite => Broke::Definite {
            index,
            error: describe(e),
            sqlstate: sqlstate(e),
        },
    }
}

/// Applies `records` (one partition, offsets increasing) in one transaction, in two round
/// trips whatever their number when every record can be claimed and handled: BEGIN, the
/// position's lock and the claims; then the handlers, the position and COMMIT. Statements sent
/// together run in order, and the first error in order is the one that counts. With a record
/// that cannot be applied in the batch (no event id, no handler), the claims wait for the
/// stored position (three round trips), since that record may be below it and so not an
/// error at all. A batch with copies of claimed events costs one more (their claims' age).
pub(crate) async fn apply(
    conn: &Conn,
    cfg: &ApplyConfig,
    records: &[Record],
) -> Result<Applied, Broke> {
    let c = &conn.client;
    let first = records.first().expect("a transaction has records");
    let last = records.last().expect("a transaction has records");
    let begin = format!(
        "BEGIN; SET LOCAL statement_timeout = {}",
        cfg.apply.statement_timeout_ms
    );
    let early = records
        .iter()
        .enumerate()
        .all(|(i, r)| part(cfg, r, None, i).is_ok());
    let (ids, offsets) = if early {
        claimable(records.iter())
    } else {
        Default::default()
    };
    // If BEGIN fails, so do the statements after it (a broken connection, or an aborted
    // transaction left on it): the claims never commit on their own.
    conn.in_txn.store(true, Ordering::Release);
    let (began, stored, claimed) = futures::join!(
        c.batch_execute(&begin),
        conn.position(&first.topic, first.partition, true),
        async {
            if early {
                Some(
                    conn.claim_new(&first.topic, first.partition, &ids, &offsets)
                        .await,
                )
            } else {
                None
            }
        }
    );
    if let Err(e) = began {
        // Not the records' fault: an aborted transaction left on the connection (25P02) or a
        // broken one. Transient: the connection is not reused.
        rollback(conn).await;
        return Err(Broke::Transient(describe(&e)));
    }
    let stored = match stored {
        Ok(s) => s,
        Err(e) => {
            rollback(conn).await;
            return Err(bookkeeping(&e, 0));
        }
    };
    let next = last.offset + 1;
    let result = body(conn, cfg, records, stored, claimed).await;
    let mut done = match result {
        Ok(done) => done,
        Err(b) => {
            // A broken connection rolls back by itself; an error leaves it to be rolled back.
            rollback(conn).await;
            return Err(b);
        }
    };
    // COMMIT of a transaction the position's statement aborted answers ROLLBACK, no error:
    // the position's own result decides.
    let (positioned, committed) = futures::join!(
        conn.store_position(&last.topic, last.partition, next),
        c.batch_execute("COMMIT")
    );
    // COMMIT answered (OK, ROLLBACK, or an error of the server's): the transaction is over.
    if committed
        .as_ref()
        .map_or_else(|e| e.code().is_some(), |()| true)
    {
        conn.in_txn.store(false, Ordering::Release);
    }
    match (positioned, committed) {
        (Ok(()), Ok(())) => {
            done.next = stored.map_or(next, |s| s.max(next));
            Ok(done)
        }
        (Err(e), _) | (Ok(()), Err(e)) if e.code().is_none() => {
            Err(Broke::CommitUnknown(describe(&e)))
        }
        (Err(e), _) => {
            rollback(conn).await;
            Err(bookkeeping(&e, records.len() - 1))
        }
        (Ok(()), Err(e)) => match classify(sqlstate(&e).as_deref()) {
            Kind::Transient => Err(transient(&e)),
            Kind::Definite => Err(Broke::DefiniteAtCommit {
                error: describe(&e),
                sqlstate: sqlstate(&e),
            }),
        },
    }
}

/// ROLLBACK; once it has answered, the connection holds no transaction.
async fn rollback(conn: &Conn) {
    if conn.client.batch_execute("ROLLBACK").await.is_ok() {
        conn.in_txn.store(false, Ordering::Release);
    }
}

/// A record's part in the transaction, decided before anything runs.
enum Part<'r> {
    /// Below the stored position: left alone.
    Behind,
    /// To be claimed; `handler`: its handler's index, `None` for an ignored type.
    Claim {
        event_id: &'r str,
        handler: Option<usize>,
    },
}

/// What `r` is: behind the position, or its claim and handler; a definite error if it can
/// be neither claimed nor handled.
fn part<'r>(
    cfg: &ApplyConfig,
    r: &'r Record,
    stored: Option<i64>,
    index: usize,
) -> Result<Part<'r>, Broke> {
    if stored.is_some_and(|s| r.offset < s) {
        return Ok(Part::Behind);
    }
    let definite = |error: String| Broke::Definite {
        index,
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
    let handler = cfg.handler_of(event_type).map(|(h, _)| h);
    if handler.is_none() && !ignored {
        return Err(definite(format!(
            "record {} has event type {event_type:?} ({:?} header), which has no [[handler]] \
             and is not in apply.ignore_types",
            r.at(),
            cfg.apply.event_type_header
        )));
    }
    Ok(Part::Claim {
        event_id,
        handler: handler.filter(|_| !ignored),
    })
}

/// The event ids of `records` to claim, each once (with its last copy's offset: records come
/// in offset order), and those offsets. Records without an id are left out.
fn claimable<'r>(records: impl Iterator<Item = &'r Record>) -> (Vec<&'r str>, Vec<i64>) {
    let mut at = std::collections::HashMap::new();
    let (mut ids, mut offsets) = (Vec::new(), Vec::new());
    for r in records {
        let Some(id) = r.event_id.as_deref() else {
            continue;
        };
        match at.get(id) {
            // A later copy's offset wins: a copy below the stored position must not keep one
            // at or above it from being claimed.
            Some(&i) => offsets[i] = r.offset,
            None => {
                at.insert(id, ids.len());
                ids.push(id);
                offsets.push(r.offset);
            }
        }
    }
    (ids, offsets)
}

/// A definite failure of the claims' statement names no record: like one at COMMIT, it
/// narrows down attempt by attempt (relay_core::apply::batch::failed_at_commit).
fn claims_broke(e: &tokio_postgres::Error) -> Broke {
    match bookkeeping(e, 0) {
        Broke::Definite {
            error, sqlstate, ..
        } => Broke::DefiniteAtCommit {
            error: format!("claiming the event ids: {error}"),
            sqlstate,
        },
        other => other,
    }
}

/// The records' claims and effects, inside the open transaction. Records are taken in order up
/// to the first that cannot be applied (its error is returned once the ones before it ran, so
/// an earlier handler's failure is still the one reported, as if they ran one by one).
async fn body(
    conn: &Conn,
    cfg: &ApplyConfig,
    records: &[Record],
    stored: Option<i64>,
    claimed: Option<Result<std::collections::HashSet<String>, tokio_postgres::Error>>,
) -> Result<Applied, Broke> {
    let mut done = Applied::default();
    let mut parts = Vec::with_capacity(records.len());
    let mut pending = None;
    for (i, r) in records.iter().enumerate() {
        match part(cfg, r, stored, i) {
            Ok(p) => parts.push(p),
            Err(b) => {
                pending = Some(b);
                break;
            }
        }
    }
    let mut new = match claimed {
        Some(claimed) => claimed.map_err(|e| claims_broke(&e))?,
        None => {
            let claims = parts.iter().zip(records).filter_map(|(p, r)| match p {
                Part::Claim { .. } => Some(r),
                Part::Behind => None,
            });
            let (ids, offsets) = claimable(claims);
            if ids.is_empty() {
                Default::default()
            } else {
                let first = &records[0];
                conn.claim_new(&first.topic, first.partition, &ids, &offsets)
                    .await
                    .map_err(|e| claims_broke(&e))?
            }
        }
    };
    let mut duplicates = Vec::new();
    let mut claimed_here = std::collections::HashSet::new();
    // The handlers to run, in order, with their parameters bound.
    let mut calls = Vec::new();
    for (i, (p, r)) in parts.iter().zip(records).enumerate() {
        let Part::Claim { event_id, handler } = p else {
            done.behind += 1;
            continue;
        };
        // `remove`: a second copy of an event in the same transaction is a duplicate.
        if !new.remove(*event_id) {
            done.duplicates += 1;
            // A copy of an event claimed by this very transaction needs no refresh.
            if !claimed_here.contains(event_id) {
                duplicates.push(*event_id);
            }
            continue;
        }
        claimed_here.insert(*event_id);
        let Some(h) = *handler else {
            done.ignored += 1;
            continue;
        };
        let (prepared, statement) = &conn.handlers[h];
        match super::handler::bind(statement, r) {
            Ok(params) => calls.push((i, prepared, params)),
            Err(e) => {
                pending = Some(Broke::Definite {
                    index: i,
                    error: format!("record {}: {e}", r.at()),
                    sqlstate: None,
                });
                break;
            }
        }
    }
    if !duplicates.is_empty() {
        conn.refresh_all(&duplicates)
            .await
            .map_err(|e| claims_broke(&e))?;
    }
    let started = Instant::now();
    let results = futures::future::join_all(calls.iter().map(|(_, prepared, params)| async move {
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p.as_ref() as _).collect();
        let result = conn.client.execute(*prepared, &refs).await;
        (result, Instant::now())
    }))
    .await;
    // Each handler's time: from the previous one's answer (they run back to back).
    let mut since = started;
    for ((i, _, _), (result, at)) in calls.iter().zip(results) {
        let r = &records[*i];
        let event_type = r.event_type.as_deref().unwrap_or_default();
        if let Err(e) = result {
            return Err(match broke(&e, *i) {
                Broke::Definite {
                    index,
                    error,
                    sqlstate,
                } => Broke::Definite {
                    index,
                    error: format!(
                        "handler of {event_type:?} failed on record {} (event {}): {error}",
                        r.at(),
                        r.event_id.as_deref().unwrap_or_default()
                    ),
                    sqlstate,
                },
                other => other,
            });
        }
        metrics::histogram!(crate::telemetry::metrics::APPLY_HANDLER_SECONDS, "event_type" => event_type.to_string())
            .record(at.saturating_duration_since(since).as_secs_f64());
        since = at;
        done.applied += 1;
    }
    match pending {
        Some(b) => Err(b),
        None => Ok(done),
    }
}

/// The dead-letter transaction of record `r`: its claim kept (or made), the record and `error`
/// in the dead-letter table, the position moved past it; the next position and `true`. Nothing
/// is written when the stored position is already past `r` (another instance applied it):
/// that position and `false`.
pub(crate) async fn dead_letter(
    conn: &Conn,
    r: &Record,
    error: &str,
    sqlstate: Option<&str>,
) -> Result<(i64, bool), Broke> {
    let c = &conn.client;
    conn.in_txn.store(true, Ordering::Release);
    if let Err(e) = c.batch_execute("BEGIN").await {
        rollback(conn).await;
        return Err(Broke::Transient(describe(&e)));
    }
    let body = async {
        let stored = conn.position(&r.topic, r.partition, true).await?;
        // Applied by another instance since this one read it: nothing to dead-letter (a dead
        // letter for it would let a re-drive apply it a second time).
        if let Some(s) = stored.filter(|s| r.offset < *s) {
            return Ok((s, false));
        }
        if let Some(id) = r.event_id.as_deref() {
            conn.claim(id).await?;
        }
        conn.dead_letter(r, error, sqlstate).await?;
        conn.store_position(&r.topic, r.partition, r.offset + 1)
            .await?;
        Ok((r.offset + 1, true))
    };
    let next = match body.await {
        Ok(next) => next,
        Err(e) => {
            rollback(conn).await;
            // Writing the dead letter cannot fail for the record's sake: anything is retried.
            return Err(Broke::Transient(describe(&e)));
        }
    };
    let committed = c.batch_execute("COMMIT").await;
    if committed
        .as_ref()
        .map_or_else(|e| e.code().is_some(), |()| true)
    {
        conn.in_txn.store(false, Ordering::Release);
    }
    match committed {
        Ok(()) => Ok(next),
        Err(e) if e.code().is_none() => Err(Broke::CommitUnknown(describe(&e))),
        Err(e) => Err(Broke::Transient(describe(&e))),
    }
}
