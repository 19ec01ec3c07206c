//! Debezium's committed position, for a cutover: what Kafka Connect stored for a Debezium
//! PostgreSQL connector, and which transactions that proves are wholly in Kafka.
//!
//! # The rule
//!
//! **Skip a transaction only if its commit LSN is below Debezium's `lsn_commit`; never skip by
//! `lsn`, `lsn_proc` or any other per-change position.** A cutover then re-sends the transaction
//! Debezium was in the middle of and everything after it (duplicates, bounded by what Debezium
//! had not committed), and loses nothing.
//!
//! Why, from Debezium's source (`PostgresStreamingChangeEventSource`, `PostgresOffsetContext`,
//! 3.x):
//! - Every record Debezium emits carries the offset context as it was when the record was made.
//!   Kafka Connect stores the offset of a record only once that record and every record before
//!   it were acknowledged by Kafka, so the stored offset is that of a record `R` such that
//!   everything Debezium emitted up to `R` is in Kafka.
//! - `lsn_commit` is updated only when Debezium processes a COMMIT (or a non-transactional
//!   logical message), to the LSN the walsender stamped on that message: for a COMMIT that is
//!   the *end* of the commit record (PostgreSQL's `commit_cb_wrapper` sets
//!   `write_location = txn->end_lsn`). pgoutput (protocol 1, which Debezium uses: no streaming of
//!   open transactions) sends a transaction's changes before its COMMIT, and transactions in
//!   commit order. So when `R` was made, every change of every transaction whose commit record
//!   ends at or before `lsn_commit` had been processed and its records emitted before `R`: they
//!   are all in Kafka. A commit record ends at or before `lsn_commit` exactly when it starts
//!   below it (records do not overlap), and the relay names a transaction by the start of its
//!   commit record (pgoutput's BEGIN `final_lsn`), so "commit LSN < `lsn_commit`" is the test.
//!   Should `lsn_commit` ever be the commit record's start instead, the test re-sends that one
//!   transaction: a duplicate, never a loss. (Seen on the real thing, `tests/e2e/
//!   debezium_cutover.rs`: the events sent again are all of the offset's own `txId`, none of the
//!   transaction whose commit `lsn_commit` names; and Debezium confirms the slot at `lsn_commit`,
//!   from where PostgreSQL sends the next transaction, not that one.)
//! - `lsn` is the LSN of the change `R` was made from, and `lsn_proc` the last LSN whose every
//!   event was processed. Changes of concurrent transactions interleave in the WAL while
//!   transactions are sent in commit order, so a change of a later transaction can have a lower
//!   LSN than one already sent: skipping by those positions inside or across transactions drops
//!   changes (what Debezium's own restarts did, DBZ-5915, debezium#1554). They are reported, not
//!   used.
//! - No `lsn_commit` (Debezium never streamed a commit, or only snapshotted): nothing is proven
//!   and nothing is skipped. A snapshot that had not completed is refused: its rows are neither
//!   in Kafka nor in the slot.

mod offsets_file;
#[cfg(test)]
mod tests;

pub use offsets_file::{OffsetsFileError, read_offsets_file};

use crate::{Lsn, checkpoint::Checkpoint};

/// One entry of Connect's offset storage: the key and value bytes as Connect's internal
/// converter wrote them (JSON), `None` for a deleted offset.
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// What Connect stored for one Debezium PostgreSQL connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebeziumOffset {
    /// The connector's name (the key's first element).
    pub connector: String,
    /// `topic.prefix` (the key's source partition `server`).
    pub server: String,
    /// `lsn_commit`: the end of the last commit Debezium had processed when it made the record.
    pub lsn_commit: Option<Lsn>,
    /// `lsn_proc`, reported only.
    pub lsn_proc: Option<Lsn>,
    /// `lsn`, reported only.
    pub lsn: Option<Lsn>,
    /// `txId`, reported only.
    pub tx_id: Option<i64>,
    /// `ts_usec`, reported only.
    pub ts_usec: Option<i64>,
    /// The snapshot was still running (`snapshot` set, `snapshot_completed` not true).
    pub snapshot_running: bool,
}

/// What the stored offset proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proven {
    /// Every transaction whose commit LSN is below this had all its records in Kafka;
    /// `Lsn::ZERO`: nothing is proven.
    pub complete_before: Lsn,
}

/// The offsets cannot be used for a cutover.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    #[error(
        "no offset is stored for connector {connector:?}{server}; the names there are: {found}. \
         Check --connector (the connector's `name`) and that this is the worker's offset storage"
    )]
    NotFound {
        connector: String,
        server: String,
        found: String,
    },
    #[error(
        "connector {connector:?} has offsets for several topic.prefix values ({found}): name the \
         one to take over with --debezium-server"
    )]
    Ambiguous { connector: String, found: String },
    #[error("an offset {what} is not what Debezium's PostgreSQL connector writes: {detail}")]
    Malformed { what: &'static str, detail: String },
    #[error(
        "connector {0:?} stopped during its initial snapshot: the rows it had not emitted are \
         neither in Kafka nor in the slot. Let the snapshot finish, or re-publish the outbox \
         rows, before the cutover"
    )]
    SnapshotRunning(String),
}

impl DebeziumOffset {
    /// The newest offset of `connector` (and `server`, when given) among `entries`, which are in
    /// the order Connect wrote them (a later one replaces an earlier one under the same key).
    pub fn select(
        entries: &[Entry],
        connector: &str,
        server: Option<&str>,
    ) -> Result<Self, OffsetError> {
        let mut names = Vec::new();
        let mut latest: Vec<(String, Option<&[u8]>)> = Vec::new();
        for (k, v) in entries {
            // Other connectors may store keys of other shapes: only ours must parse.
            let Some((name, srv)) = parse_key(k) else {
                continue;
            };
            if !names.contains(&name) {
                names.push(name.clone());
            }
            if name != connector || server.is_some_and(|s| s != srv) {
                continue;
            }
            latest.retain(|(s, _)| *s != srv);
            latest.push((srv, v.as_deref()));
        }
        latest.retain(|(_, v)| v.is_some());
        match latest.as_slice() {
            [] => Err(OffsetError::NotFound {
                connector: connector.to_string(),
                server: server.map_or(String::new(), |s| format!(" and topic.prefix {s:?}")),
                found: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            }),
            [(srv, Some(v))] => Self::parse(connector, srv, v),
            many => Err(OffsetError::Ambiguous {
                connector: connector.to_string(),
                found: many
                    .iter()
                    .map(|(s, _)| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The offset value: `{"lsn_commit":…,"lsn_proc":…,"lsn":…,"txId":…,"ts_usec":…,…}`.
    pub fn parse(connector: &str, server: &str, value: &[u8]) -> Result<Self, OffsetError> {
        let malformed = |detail: String| OffsetError::Malformed {
            what: "value",
            detail,
        };
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| malformed(e.to_string()))?;
        let obj = v
            .as_object()
            .ok_or_else(|| malformed(format!("{v} is not a JSON object")))?;
        let lsn = |key: &str| -> Result<Option<Lsn>, OffsetError> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .map(|n| Some(Lsn(n)))
                    .ok_or_else(|| malformed(format!("{key} is {x}, not an LSN as a number"))),
            }
        };
        let int = |key: &str| obj.get(key).and_then(serde_json::Value::as_i64);
        let snapshot = obj
            .get("snapshot")
            .is_some_and(|s| !s.is_null() && s != &serde_json::Value::Bool(false));
        let completed = obj.get("snapshot_completed") == Some(&serde_json::Value::Bool(true));
        Ok(Self {
            connector: connector.to_string(),
            server: server.to_string(),
            lsn_commit: lsn("lsn_commit")?,
            lsn_proc: lsn("lsn_proc")?,
            lsn: lsn("lsn")?,
            tx_id: int("txId"),
            ts_usec: int("ts_usec"),
            snapshot_running: snapshot && !completed,
        })
    }

    /// The rule (module docs): the transactions this offset proves wholly in Kafka.
    pub fn proven(&self) -> Result<Proven, OffsetError> {
        if self.snapshot_running {
            return Err(OffsetError::SnapshotRunning(self.connector.clone()));
        }
        Ok(Proven {
            complete_before: self.lsn_commit.unwrap_or(Lsn::ZERO),
        })
    }
}

impl Proven {
    /// The checkpoint a cutover writes for the relay's slot: it covers exactly the proven
    /// transactions. It names no change and no tables: the relay did not publish these records
    /// itself, so a start can neither meet nor verify them ([`crate::skip`] then skips every
    /// change of a transaction committed below `covered_lsn` and publishes every later one).
    /// `standby`: the slot was made on a standby with this `primary_slot_name`
    /// ([`Checkpoint::standby`]).
    pub fn checkpoint(
        &self,
        system_id: &str,
        database: &str,
        slot: &str,
        timeline: u32,
        standby: Option<&str>,
    ) -> Checkpoint {
        Checkpoint {
            version: crate::checkpoint::VERSION,
            system_id: system_id.to_string(),
            database: database.to_string(),
            slot: slot.to_string(),
            timeline,
            covered_lsn: self.complete_before,
            last: None,
            tables: Vec::new(),
            standby: standby.map(str::to_string),
        }
    }
}

/// `c` is a cutover's checkpoint ([`Proven::checkpoint`]), not one the relay wrote after
/// publishing: those always name the routed tables.
pub fn is_cutover_checkpoint(c: &Checkpoint) -> bool {
    c.last.is_none() && c.tables.is_empty()
}

/// A slot that starts at `slot_start` (PostgreSQL sends the transactions committing at or after
/// it) leaves no gap after the proven transactions: nothing is lost between them.
pub fn slot_leaves_no_gap(proven: Proven, slot_start: Lsn) -> bool {
    slot_start <= proven.complete_before
}

/// The key: `["<connector name>",{"server":"<topic.prefix>"}]`.
fn parse_key(key: &[u8]) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(key).ok()?;
    let [name, partition] = v.as_array()?.as_slice() else {
        return None;
    };
    let server = partition.as_object()?.get("server")?.as_str()?;
    Some((name.as_str()?.to_string(), server.to_string()))
}
