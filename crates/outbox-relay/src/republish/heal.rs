//! `setup --recreate-slot --heal`: after the lost slot was replaced, publishes the outbox rows
//! of the gap before `run` streams from the new slot. Which rows is `relay_core::heal`'s rule;
//! this module reads its inputs:
//!
//! * the gap's start: the newest checkpoint of the slot names the last change Kafka holds by
//!   its event id; that row's `xmin` and `pg_xact_commit_timestamp` give the commit time;
//! * the gap's end: the rows are read in one REPEATABLE READ snapshot, then the new slot is
//!   *peeked* (`pg_logical_slot_peek_binary_changes`, nothing consumed) up to the WAL position
//!   read after that snapshot: the transactions it lists are the new slot's, every other row
//!   visible in the snapshot committed before the slot's start;
//! * what Kafka holds already: the event ids of the committed records of the partitions the
//!   heal writes to, since the gap's start ([`in_kafka`]); those rows are left out.
//!
//! Invariant: the heal never reports success while a part of the gap is not covered; each
//! uncovered part is named ([`Uncovered`]) and the command exits non-zero after publishing
//! what it could.

use std::collections::HashSet;

use relay_core::heal::{Bounds, Uncovered, Verdict, verdict};
use tokio_postgres::Client;

use super::{
    Filter, TableSource, gap_row, in_kafka, rows,
    send::{Ids, Sender},
};
use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::{query_err, quote_ident},
    postgres::setup::SlotGap,
    sink::checkpoint_topic::{Identity, Scope, read_latest},
    telemetry::events::{HEAL_BOUNDS, HEAL_DONE, HEAL_UNCOVERED},
};

/// What the heal did, for the log and the tests.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Healed {
    pub(crate) healed: u64,
    /// Of those, within the margin before the checkpoint (Kafka may hold them already).
    pub(crate) doubtful: u64,
    /// Rows the new slot streams.
    pub(crate) streamed: u64,
    /// Of those, rows written by a subtransaction, known as the new slot's by their top-level
    /// transaction (pg_walinspect); without it they would be healed and streamed both.
    pub(crate) streamed_by_subtransactions: u64,
    /// Candidates whose event id Kafka holds already (left out).
    pub(crate) in_kafka: u64,
    pub(crate) unplaced: u64,
}

/// Heals the gap of the slot just re-created. `margin_ms`: rows committed this long before
/// the checkpoint's change are published too.
pub(crate) async fn heal(
    cfg: &Config,
    scope: &Scope,
    gap: SlotGap,
    margin_ms: u64,
) -> Result<Healed, RelayError> {
    let mut uncovered = Vec::new();
    if !cfg.message.is_empty() {
        let prefixes: Vec<String> = cfg.message.iter().map(|m| m.routed_name()).collect();
        uncovered.push(Uncovered::Messages(prefixes.join(", ")));
    }
    let client = crate::postgres::control::connect(cfg).await?;
    rows::pin_session(&client).await?;
    let result = match start_of_gap(cfg, &client, scope).await? {
        // A slot that was missing and has no checkpoint: a first setup, or a slot dropped
        // before the relay ever checkpointed; nothing says there was a gap.
        Err(Uncovered::NoCheckpoint) if gap == SlotGap::Missing && uncovered.is_empty() => {
            tracing::warn!(
                slot = %cfg.postgres.slot,
                "{HEAL_DONE}: the slot was created now and no checkpoint of it exists, so no \
                 gap is known; if a slot of this name streamed before without \
                 kafka.checkpoint_topic, its gap is NOT healed"
            );
            return Ok(Healed::default());
        }
        Err(why) => {
            uncovered.push(why);
            Healed::default()
        }
        Ok((cp_xid, cp_time)) => {
            let done = publish_gap(cfg, &client, cp_xid, cp_time, margin_ms).await?;
            if done.unplaced > 0 {
                uncovered.push(Uncovered::Unplaced(done.unplaced));
            }
            done
        }
    };
    tracing::info!(
        healed = result.healed,
        doubtful = result.doubtful,
        streamed = result.streamed,
        streamed_by_subtransactions = result.streamed_by_subtransactions,
        in_kafka = result.in_kafka,
        unplaced = result.unplaced,
        "{HEAL_DONE}: rows of the gap published from the outbox table (healed), ahead of \
         what the new slot streams"
    );
    if uncovered.is_empty() {
        return Ok(result);
    }
    let text: Vec<String> = uncovered.iter().map(ToString::to_string).collect();
    for t in &text {
        tracing::error!("{HEAL_UNCOVERED}: {t}");
    }
    Err(RelayError::from(Definite::GapNotHealed {
        healed: result.healed,
        uncovered: text.join("; "),
    }))
}

/// The checkpoint's last change as a row: its transaction and commit time, or why not.
async fn start_of_gap(
    cfg: &Config,
    client: &Client,
    scope: &Scope,
) -> Result<Result<(u64, i64), Uncovered>, RelayError> {
    if !rows::commit_timestamps_on(client).await? {
        return Ok(Err(Uncovered::NoCommitTimestamps));
    }
    let (system_id, timeline) = crate::cutover::identify(cfg).await?;
    let plain = Identity::new(cfg, &system_id, timeline);
    let checkpoint = match scope {
        Scope::Primary => read_latest(cfg, plain.key()).await?,
        Scope::Standby(name) => read_latest(cfg, plain.of_standby_slot(name).key()).await?,
        Scope::Promoted(name) => {
            match read_latest(cfg, plain.clone().of_standby_slot(name).key()).await? {
                Some(c) => Some(c),
                None => read_latest(cfg, plain.key()).await?,
            }
        }
    };
    let Some(checkpoint) = checkpoint else {
        return Ok(Err(Uncovered::NoCheckpoint));
    };
    let Some(last) = checkpoint.last else {
        return Ok(Err(Uncovered::NoLastChange));
    };
    let Some(id) = last.fingerprint.strip_prefix("id:") else {
        return Ok(Err(Uncovered::NoEventId(last.to_string())));
    };
    for t in &cfg.outbox {
        let Some(column) = t.headers.get("id") else {
            continue;
        };
        let (schema, name) = t.qualified_name();
        let row = client
            .query_opt(
                &format!(
                    "SELECT xmin::text::bigint, \
                            (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::bigint \
                       FROM {}.{} WHERE {}::text = $1 LIMIT 1",
                    quote_ident(&schema),
                    quote_ident(&name),
                    quote_ident(column)
                ),
                &[&id],
            )
            .await
            .map_err(query_err(
                "look up the checkpoint's event in the outbox table",
            ))?;
        if let Some(row) = row {
            let xid = row.get::<_, i64>(0) as u64;
            return Ok(match row.get::<_, Option<i64>>(1) {
                Some(t) => {
                    tracing::info!(
                        event_id = id, xid, commit_time_us = t, covered = %checkpoint.covered_lsn,
                        "{HEAL_BOUNDS}: the gap starts after this event's transaction"
                    );
                    Ok((xid, t))
                }
                None => Err(Uncovered::NoCommitTimestamps),
            });
        }
    }
    Ok(Err(Uncovered::CheckpointRowGone(id.to_string())))
}

/// Reads the gap's candidates in one snapshot, leaves out what the new slot streams, and
/// publishes the rest in order.
async fn publish_gap(
    cfg: &Config,
    client: &Client,
    cp_xid: u64,
    cp_time: i64,
    margin_ms: u64,
) -> Result<Healed, RelayError> {
    let margin_us = (margin_ms as i64).saturating_mul(1_000);
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(query_err("open the heal's snapshot"))?;
    let mut source = TableSource::open(client, cfg, true).await?;
    // Candidates: committed at or after the margin's start, or without a commit time and
    // younger than the checkpoint's transaction (they cannot be placed).
    let since: String = client
        .query_one(
            "SELECT (timestamptz 'epoch' + $1::bigint * interval '1 microsecond')::text",
            &[&(cp_time - margin_us)],
        )
        .await
        .map_err(query_err("compute the start of the gap"))?
        .get(0);
    let mut rows = source
        .read(
            client,
            &Filter {
                since: Some(since),
                ..Filter::default()
            },
        )
        .await?;
    let unplaced = count_unplaced(client, &source, cp_xid).await?;
    // The insert position: every commit the snapshot sees is before it, even one not yet
    // written (synchronous_commit = off).
    let upto: String = client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .map_err(query_err("read the WAL position after the heal's snapshot"))?
        .get(0);
    client
        .batch_execute("COMMIT")
        .await
        .map_err(query_err("close the heal's snapshot"))?;
    wait_flushed(client, &upto).await?;
    let streamed = streamed_xids(cfg, client, &upto).await?;
    tracing::info!(
        candidates = rows.len(), upto = %upto, streamed_transactions = streamed.len(),
        margin_ms, "{HEAL_BOUNDS}: rows read; the new slot's transactions are left to it"
    );
    // With pg_walinspect, a subtransaction's rows go under their top-level xid: the new slot
    // names a transaction it streams by that xid, and without it such rows would be healed
    // and streamed both (docs/operations.md, "Slot lost").
    let lsns = super::commit_lsn::read(client, rows.iter().map(|r| r.xid)).await;
    let by_subtransaction: Vec<bool> = rows
        .iter_mut()
        .map(|r| {
            let own = r.xid;
            r.xid = lsns.top_level(own);
            r.xid != own
        })
        .collect();
    let bounds = Bounds {
        checkpoint_time_us: cp_time,
        margin_us,
        streamed,
    };
    let mut done = Healed {
        unplaced,
        ..Healed::default()
    };
    let mut gap = Vec::new();
    for (row, by_subtransaction) in rows.into_iter().zip(by_subtransaction) {
        match verdict(&gap_row(&row), &bounds) {
            Verdict::Heal { doubtful } => {
                done.doubtful += u64::from(doubtful);
                gap.push(row);
            }
            Verdict::Streamed => {
                done.streamed += 1;
                done.streamed_by_subtransactions += u64::from(by_subtransaction);
            }
            Verdict::InKafka => {}
            Verdict::Unplaced => done.unplaced += 1,
        }
    }
    let records = source.records(cfg, gap, &lsns)?;
    let sender = Sender::new(cfg, Ids::Relay).await?;
    let mut partitions = HashSet::new();
    for (rec, _) in &records {
        if let Some(p) = sender.partition_of(rec).await {
            partitions.insert((rec.topic.clone(), p));
        }
    }
    let held = in_kafka::ids(
        cfg,
        partitions.into_iter().collect(),
        (cp_time - margin_us) / 1_000,
    )
    .await?;
    let mut gap = Vec::with_capacity(records.len());
    for (rec, _) in records {
        let id = rec.headers.iter().find(|(n, _)| &**n == "id");
        if let Some((_, Some(id))) = id
            && held.contains(&id[..])
        {
            done.in_kafka += 1;
            continue;
        }
        gap.push(rec);
    }
    done.healed = sender.send_all(gap).await?;
    Ok(done)
}

/// Rows without a commit timestamp whose transaction is younger than the checkpoint's.
async fn count_unplaced(
    client: &Client,
    source: &TableSource,
    cp_xid: u64,
) -> Result<u64, RelayError> {
    let mut n = 0;
    for t in source.tables() {
        let r = &t.relation;
        let count: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM {}.{} \
                      WHERE pg_xact_commit_timestamp(xmin) IS NULL \
                        AND age(xmin) < age($1::text::xid)",
                    quote_ident(&r.namespace),
                    quote_ident(&r.name)
                ),
                &[&cp_xid.to_string()],
            )
            .await
            .map_err(query_err("count outbox rows without a commit timestamp"))?
            .get(0);
        n += count as u64;
    }
    Ok(n)
}

/// Waits until the WAL is flushed up to `upto`: logical decoding reads flushed WAL only, so
/// the peek would not see a later commit (the WAL writer flushes within `wal_writer_delay`).
async fn wait_flushed(client: &Client, upto: &str) -> Result<(), RelayError> {
    for _ in 0..200 {
        let flushed: bool = client
            .query_one(
                "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
                &[&upto],
            )
            .await
            .map_err(query_err("read the flushed WAL position"))?
            .get(0);
        if flushed {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err(RelayError::from(Definite::Precondition(format!(
        "the server did not flush its WAL up to {upto} within 10 s, so the new slot's first \
         transactions cannot be read yet; nothing was published: while no relay runs, drop the \
         new slot (SELECT pg_drop_replication_slot(...)) and run `setup --recreate-slot \
         --heal` again, which heals a missing slot's gap from the checkpoint"
    ))))
}

/// The transactions the new slot will stream that committed before `upto`, read without
/// consuming anything.
async fn streamed_xids(
    cfg: &Config,
    client: &Client,
    upto: &str,
) -> Result<HashSet<u64>, RelayError> {
    let rows = client
        .query(
            "SELECT DISTINCT xid::text::bigint FROM pg_logical_slot_peek_binary_changes(\
               $1, $2::text::pg_lsn, NULL, 'proto_version', '1', 'publication_names', $3)",
            &[&cfg.postgres.slot, &upto, &cfg.postgres.publication],
        )
        .await
        .map_err(query_err("peek at the new slot's first transactions"))?;
    Ok(rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect())
}
