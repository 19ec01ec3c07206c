//! Records built from rows read from the outbox table, for `outbox-relay republish` and the
//! heal of a lost slot's gap (`setup --recreate-slot --heal`, [`heal`]).
//!
//! Invariant: a row read from the table becomes its record through the stream's own path
//! (`relay_core::decode::Decoder::relation` then `insert`, the routing and `[outbox.debezium]`
//! encoding of streaming), so topic, key, value and headers are the ones streaming produced,
//! with what the table cannot say: the commit LSN is not known from a row, so the
//! `outbox-relay.commit-lsn` header is read from the WAL while PostgreSQL still holds the commit
//! record ([`commit_lsn`], `pg_walinspect`) and reads `0/0` otherwise; `outbox-relay.seq` counts
//! the row among the rows of its transaction this command sends (the streamed value when the
//! whole transaction is sent, and, for rows a subtransaction inserted, when the WAL still
//! names their top-level transaction).
//! `outbox-relay.commit-time-us` is the commit timestamp (`track_commit_timestamp`), as
//! streaming sends it; 0 when it is off.

mod commit_lsn;
pub(crate) mod heal;
mod in_kafka;
mod rows;
mod send;

use std::collections::HashMap;

use relay_core::{
    Lsn, deadletter,
    decode::{Decoded, Decoder},
    heal::{GapRow, order_key},
    route::{Position, Record},
};
use tokio_postgres::Client;

pub(crate) use rows::Filter;
use rows::{Row, TableRows};

use crate::{
    config::{Config, PoisonPolicy},
    error::{Definite, RelayError},
    telemetry::events::{COMMIT_LSNS_READ, REPUBLISH_DONE},
};

/// What `outbox-relay republish` selects and whether it sends.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub ids: Vec<String>,
    pub aggregates: Vec<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// Commit LSN range (`[since_lsn, until_lsn)`), read from the WAL with pg_walinspect.
    pub since_lsn: Option<String>,
    pub until_lsn: Option<String>,
    /// Send; without it, print what would be sent.
    pub execute: bool,
}

/// `outbox-relay republish`: reads the selected rows, prints each record, and with `execute`
/// sends them. Returns how many records were selected.
pub async fn republish(cfg: &Config, req: &Request) -> Result<u64, RelayError> {
    if req.ids.is_empty()
        && req.aggregates.is_empty()
        && req.since.is_none()
        && req.since_lsn.is_none()
    {
        return Err(RelayError::from(Definite::Precondition(
            "republish needs a selection: --ids, --aggregate, --since (with --until) and/or \
             --since-lsn (with --until-lsn); it never sends the whole table by accident"
                .into(),
        )));
    }
    let lsn_range = lsn_range(req)?;
    let client = crate::postgres::control::connect(cfg).await?;
    rows::pin_session(&client).await?;
    let commit_ts = rows::commit_timestamps_on(&client).await?;
    if (req.since.is_some() || req.until.is_some()) && !commit_ts {
        return Err(RelayError::from(Definite::Precondition(
            "--since/--until select by commit time, and track_commit_timestamp is off on this \
             server: select by --ids or --aggregate, or turn it on (a restart) for rows \
             committed from then on"
                .into(),
        )));
    }
    let xids = match lsn_range {
        Some((from, to)) => Some(
            commit_lsn::committed_between(&client, from, to)
                .await
                .map_err(|why| {
                    RelayError::from(Definite::Precondition(format!(
                        "--since-lsn {from}: {why}; select by --since (commit time), \
                         --aggregate or --ids instead"
                    )))
                })?,
        ),
        None => None,
    };
    let filter = Filter {
        ids: req.ids.clone(),
        aggregates: req.aggregates.clone(),
        since: req.since.clone(),
        until: req.until.clone(),
        xids,
    };
    let mut source = TableSource::open(&client, cfg, commit_ts).await?;
    let rows = source.read(&client, &filter).await?;
    let lsns = commit_lsn::read(&client, rows.iter().map(|r| r.xid)).await;
    let records = source.records(cfg, rows, &lsns)?;
    let verb = if req.execute { "send" } else { "would send" };
    for (rec, row) in &records {
        println!("{verb}: {}", describe(rec, row));
    }
    let selected = records.len() as u64;
    let sent = if req.execute {
        send::Sender::new(cfg, send::Ids::Own)
            .await?
            .send_all(records.into_iter().map(|(rec, _)| rec))
            .await?
    } else {
        0
    };
    tracing::info!(
        selected,
        sent,
        dry_run = !req.execute,
        "{REPUBLISH_DONE}: {}",
        if req.execute {
            "every selected record is in Kafka"
        } else {
            "dry run, nothing sent (add --execute to send)"
        }
    );
    Ok(selected)
}

/// `--since-lsn`/`--until-lsn`, parsed: `[from, to)` (`to` open-ended when not given).
fn lsn_range(req: &Request) -> Result<Option<(Lsn, Option<Lsn>)>, RelayError> {
    let parse = |flag: &str, text: &str| {
        text.parse::<Lsn>().map_err(|e| {
            RelayError::from(Definite::Precondition(format!(
                "{flag} {text:?}: {e} (an outbox-relay.commit-lsn header's value)"
            )))
        })
    };
    let Some(since) = &req.since_lsn else {
        return Ok(None);
    };
    let from = parse("--since-lsn", since)?;
    let to = match &req.until_lsn {
        Some(u) => Some(parse("--until-lsn", u)?),
        None => None,
    };
    Ok(Some((from, to)))
}

/// One line of the listing.
fn describe(rec: &Record, row: &Row) -> String {
    format!(
        "topic={} key={} id={} xid={} commit_time_us={}",
        rec.topic,
        String::from_utf8_lossy(&rec.key),
        row.id.as_deref().unwrap_or("-"),
        row.xid,
        row.commit_time_us
            .map_or_else(|| "unknown".into(), |t| t.to_string()),
    )
}

/// Every configured outbox table, described, and the decoder their rows go through.
pub(crate) struct TableSource {
    tables: Vec<TableRows>,
    decoder: Decoder,
}

impl TableSource {
    pub(crate) async fn open(
        client: &Client,
        cfg: &Config,
        commit_ts: bool,
    ) -> Result<TableSource, RelayError> {
        let mut tables = Vec::new();
        for t in &cfg.outbox {
            tables.push(TableRows::describe(client, t, commit_ts).await?);
        }
        let not_null = tables
            .iter()
            .map(|t| (t.relation.oid, t.not_null.clone()))
            .collect();
        let generated = tables
            .iter()
            .map(|t| (t.relation.oid, t.generated.clone()))
            .collect();
        let mut decoder = Decoder::new(&cfg.outbox, cfg.relay.relay_headers)
            .with_compat(not_null, &crate::pipeline::run_id())
            .with_generated(generated);
        for t in &tables {
            decoder.relation(t.relation.clone());
        }
        Ok(TableSource { tables, decoder })
    }

    pub(crate) fn tables(&self) -> &[TableRows] {
        &self.tables
    }

    /// The rows of every table that `filter` selects.
    pub(crate) async fn read(
        &self,
        client: &Client,
        filter: &Filter,
    ) -> Result<Vec<Row>, RelayError> {
        let mut rows = Vec::new();
        for t in &self.tables {
            rows.extend(t.read(client, filter).await?);
        }
        Ok(rows)
    }

    /// The records of `rows`, in the order they go out (commit time, transaction, position;
    /// `relay_core::heal::order`), each with its row. A row that cannot be routed stops here
    /// under `on_poison = "halt"`, or becomes its dead-letter record.
    /// Each row's commit LSN is `lsns`'s (`0/0` where unknown); how many were known is logged.
    pub(crate) fn records(
        &mut self,
        cfg: &Config,
        mut rows: Vec<Row>,
        lsns: &commit_lsn::CommitLsns,
    ) -> Result<Vec<(Record, Row)>, RelayError> {
        // A subtransaction's rows belong to its top-level transaction, when the WAL said so.
        for r in &mut rows {
            r.xid = lsns.top_level(r.xid);
        }
        sort(&mut rows);
        let known = rows.iter().filter(|r| !lsns.of(r.xid).is_zero()).count();
        if !rows.is_empty() {
            tracing::info!(
                rows = rows.len(),
                known,
                unavailable = lsns.unavailable.as_deref().unwrap_or(""),
                "{COMMIT_LSNS_READ}: {}",
                if known == rows.len() {
                    "every record carries its transaction's commit LSN, as streamed"
                } else {
                    "records whose commit record is no longer in pg_wal (or could not be read) \
                     carry outbox-relay.commit-lsn 0/0"
                }
            );
        }
        let mut seq: HashMap<u64, u64> = HashMap::new();
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let n = seq.entry(row.xid).or_default();
            let pos = Position {
                commit_lsn: lsns.of(row.xid),
                commit_time_unix_us: row.commit_time_us.unwrap_or(0),
                seq: *n,
            };
            *n += 1;
            let rec = match self.decoder.insert(row.oid, &row.tuple, pos)? {
                Decoded::Record { record, .. } => record,
                Decoded::Poison(p) => match cfg.relay.on_poison {
                    PoisonPolicy::Halt => {
                        return Err(RelayError::from(Definite::Poison {
                            table: p.table,
                            reason: p.error.to_string(),
                        }));
                    }
                    PoisonPolicy::DeadLetter => {
                        deadletter::from_poison(&p, pos, &cfg.relay.dead_letter_topic)
                    }
                },
                _ => continue,
            };
            out.push((rec, row));
        }
        Ok(out)
    }
}

/// Sorts rows as `relay_core::heal::order` orders them.
fn sort(rows: &mut [Row]) {
    rows.sort_by_key(|r| order_key(&gap_row(r)));
}

pub(crate) fn gap_row(r: &Row) -> GapRow {
    GapRow {
        xid: r.xid,
        commit_time_us: r.commit_time_us,
        command: r.command,
        position: r.position,
    }
}
