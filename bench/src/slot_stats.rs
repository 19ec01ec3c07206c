//! What PostgreSQL's logical decoding did for one slot (`pg_stat_replication_slots`): how much of
//! the stream it spilled to disk because a transaction outgrew `logical_decoding_work_mem`. The
//! walsender reports these counters as it decodes and when it exits, so they are read after the
//! drain and before the slot is dropped.

use anyhow::Result;
use tokio_postgres::Client;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SlotStats {
    /// Transactions spilled to disk (at least once).
    pub spill_txns: i64,
    /// Times a transaction was spilled.
    pub spill_count: i64,
    pub spill_bytes: i64,
    /// Decoded transactions and their bytes, as sent to the decoding output plugin.
    pub total_txns: i64,
    pub total_bytes: i64,
    /// `logical_decoding_work_mem` of the server, e.g. "64MB".
    pub work_mem: String,
}

pub async fn read(c: &Client, slot: &str) -> Result<Option<SlotStats>> {
    let row = c
        .query_opt(
            "SELECT spill_txns, spill_count, spill_bytes, total_txns, total_bytes, \
                    current_setting('logical_decoding_work_mem') \
               FROM pg_stat_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    Ok(row.map(|r| SlotStats {
        spill_txns: r.get(0),
        spill_count: r.get(1),
        spill_bytes: r.get(2),
        total_txns: r.get(3),
        total_bytes: r.get(4),
        work_mem: r.get(5),
    }))
}
