//! The commit LSN of a row's transaction, read from the WAL PostgreSQL still holds, so that a
//! re-published or healed record carries the `outbox-relay.commit-lsn` streaming gave it.
//!
//! A row does not know its commit LSN: only the commit record in the WAL does. While that
//! record is still in `pg_wal`, the `pg_walinspect` extension (PostgreSQL 15+, installed by the
//! operator: `CREATE EXTENSION pg_walinspect`, read by a superuser or a member of
//! `pg_read_server_files`) reads it: the record's start is the LSN pgoutput sends as the
//! transaction's commit LSN (its `final_lsn`). A row inserted by a subtransaction carries the
//! subtransaction's xid; the top-level commit record lists its subtransactions, so the row gets
//! the top-level commit's LSN and is counted (`outbox-relay.seq`) and ordered among the rows of
//! its top-level transaction, as streaming does ([`CommitLsns::top_level`]).
//!
//! Invariant: a row gets an LSN only from the commit record of its own transaction (or of the
//! top-level transaction that committed its subtransaction); every other row keeps `0/0`, the
//! header's "unknown", never a guess. xids are compared as the 32-bit values both the row's
//! `xmin` and the WAL record hold: within the WAL the server keeps (far less than 2^31
//! transactions), one xid names one transaction.

use std::collections::{HashMap, HashSet};

use relay_core::Lsn;
use tokio_postgres::Client;

/// What the WAL said about the rows' transactions.
#[derive(Debug, Default)]
pub(crate) struct CommitLsns {
    by_xid: HashMap<u32, Lsn>,
    /// A subtransaction's xid → its top-level transaction's, from the commit records read.
    top: HashMap<u32, u32>,
    /// Why no commit LSN could be read at all, for the operator (`None`: the WAL was read).
    pub(crate) unavailable: Option<String>,
}

impl CommitLsns {
    /// The commit LSN of the transaction `xid` (a row's `xmin`), `Lsn::ZERO` when unknown.
    pub(crate) fn of(&self, xid: u64) -> Lsn {
        self.by_xid.get(&(xid as u32)).copied().unwrap_or(Lsn::ZERO)
    }

    /// The top-level transaction of `xid` when a commit record read lists it as a
    /// subtransaction; `xid` itself otherwise.
    pub(crate) fn top_level(&self, xid: u64) -> u64 {
        self.top.get(&(xid as u32)).map_or(xid, |&t| u64::from(t))
    }
}

/// Reads the commit LSNs of `xids` from the WAL on disk. Never fails: what it cannot read
/// stays unknown, and [`CommitLsns::unavailable`] says why when nothing could be read.
pub(crate) async fn read(client: &Client, xids: impl IntoIterator<Item = u64>) -> CommitLsns {
    let wanted: HashSet<u32> = xids.into_iter().map(|x| x as u32).collect();
    if wanted.is_empty() {
        return CommitLsns::default();
    }
    match read_wal(client, &wanted).await {
        Ok((by_xid, top)) => CommitLsns {
            by_xid,
            top,
            unavailable: None,
        },
        Err(why) => CommitLsns {
            unavailable: Some(why),
            ..CommitLsns::default()
        },
    }
}

/// (commit LSN by xid, top-level xid by subtransaction xid) of the `wanted` xids found.
type Found = (HashMap<u32, Lsn>, HashMap<u32, u32>);

/// The transactions (with their subtransactions) whose commit record starts in `[from, to)`
/// (`to`: the flush position when `None` or beyond it), as `xmin` values; an error says why
/// the range cannot be read (no pg_walinspect, WAL at `from` no longer on disk).
pub(crate) async fn committed_between(
    client: &Client,
    from: Lsn,
    to: Option<Lsn>,
) -> Result<Vec<i64>, String> {
    let oldest = readable_from(client).await?;
    if from < oldest {
        return Err(format!(
            "the WAL from there is no longer in pg_wal (its oldest segment starts at {oldest})"
        ));
    }
    let rows = client
        .query(
            "SELECT xid::text::bigint, description \
               FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn()) \
              WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT' \
                AND ($2::text IS NULL OR start_lsn < $2::text::pg_lsn)",
            &[&from.to_string(), &to.map(|t| t.to_string())],
        )
        .await
        .map_err(|e| format!("cannot read the WAL with pg_walinspect: {e}"))?;
    let mut xids = Vec::new();
    for r in rows {
        xids.push(r.get::<_, i64>(0));
        xids.extend(subxacts(&r.get::<_, String>(1)).into_iter().map(i64::from));
    }
    Ok(xids)
}

/// Where the WAL on disk starts (the oldest segment in pg_wal), once pg_walinspect is known
/// to be installed.
async fn readable_from(client: &Client) -> Result<Lsn, String> {
    let installed = client
        .query_opt(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_walinspect'",
            &[],
        )
        .await
        .map_err(|e| format!("cannot look for pg_walinspect: {e}"))?;
    if installed.is_none() {
        return Err(
            "the pg_walinspect extension is not installed in this database (PostgreSQL 15+: \
             CREATE EXTENSION pg_walinspect, as a superuser)"
                .into(),
        );
    }
    // The oldest segment still on disk: where the WAL can be read from.
    let oldest = client
        .query_one(
            "SELECT min(substr(name, 9, 16)), \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size') \
               FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'",
            &[],
        )
        .await
        .map_err(|e| format!("cannot list pg_wal (superuser or pg_monitor needed): {e}"))?;
    let (Some(name), segment_size) = (oldest.get::<_, Option<String>>(0), oldest.get::<_, i64>(1))
    else {
        return Err("pg_wal holds no segment".into());
    };
    segment_start(&name, segment_size as u64)
        .ok_or_else(|| format!("unexpected WAL segment name {name:?}"))
}

async fn read_wal(client: &Client, wanted: &HashSet<u32>) -> Result<Found, String> {
    let start = readable_from(client).await?;
    let rows = client
        .query(
            "SELECT xid::text::bigint, start_lsn::text, description \
               FROM pg_get_wal_records_info($1::text::pg_lsn, pg_current_wal_flush_lsn()) \
              WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'",
            &[&start.to_string()],
        )
        .await
        .map_err(|e| format!("cannot read the WAL with pg_walinspect: {e}"))?;
    let (mut found, mut top) = (HashMap::new(), HashMap::new());
    for r in rows {
        let xid = r.get::<_, i64>(0) as u32;
        let Ok(lsn) = r.get::<_, String>(1).parse::<Lsn>() else {
            continue;
        };
        if wanted.contains(&xid) {
            found.insert(xid, lsn);
        }
        for sub in subxacts(&r.get::<_, String>(2)) {
            if wanted.contains(&sub) {
                // The row goes under its top-level xid, which then needs the LSN too (a
                // transaction whose every outbox row a subtransaction inserted).
                found.insert(sub, lsn);
                found.insert(xid, lsn);
                top.insert(sub, xid);
            }
        }
    }
    Ok((found, top))
}

/// The LSN where segment `XXXXXXXX` `YYYYYYYY` (the log and segment parts of a WAL file name,
/// 16 hex digits) starts, for segments of `segment_size` bytes.
fn segment_start(log_and_seg: &str, segment_size: u64) -> Option<Lsn> {
    if log_and_seg.len() != 16 || segment_size == 0 {
        return None;
    }
    let log = u64::from_str_radix(&log_and_seg[..8], 16).ok()?;
    let seg = u64::from_str_radix(&log_and_seg[8..], 16).ok()?;
    let lsn = (log << 32).checked_add(seg.checked_mul(segment_size)?)?;
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
        .parse()
        .ok()
}

/// The subtransactions a commit record's description lists (`…; subxacts: 745 746; …`).
fn subxacts(description: &str) -> Vec<u32> {
    let Some((_, rest)) = description.split_once("subxacts:") else {
        return Vec::new();
    };
    rest.split(';')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_name_gives_the_lsn_it_starts_at() {
        let size = 16 * 1024 * 1024;
        assert_eq!(
            segment_start("0000000000000033", size).unwrap().to_string(),
            "0/33000000"
        );
        assert_eq!(
            segment_start("00000002000000FF", size).unwrap().to_string(),
            "2/FF000000"
        );
        assert!(segment_start("33", size).is_none());
        assert!(segment_start("00000000000000ZZ", size).is_none());
    }

    #[test]
    fn a_commit_record_s_subtransactions_are_read_from_its_description() {
        let d = "2026-12-07 08:21:36.526605+00; subxacts: 745 746; inval msgs: catcache 7";
        assert_eq!(subxacts(d), vec![745, 746]);
        assert_eq!(subxacts("2026-12-07 08:21:36.526605+00"), Vec::<u32>::new());
        assert_eq!(subxacts("x; subxacts: 9"), vec![9]);
    }

    #[test]
    fn an_unknown_transaction_keeps_the_unknown_lsn() {
        let mut l = CommitLsns::default();
        l.by_xid.insert(7, "0/10".parse().unwrap());
        assert_eq!(l.of(7).to_string(), "0/10");
        // The row's xmin as the 32-bit value the WAL holds.
        assert_eq!(l.of((1u64 << 32) | 7).to_string(), "0/10");
        assert!(l.of(8).is_zero());
        l.top.insert(9, 7);
        assert_eq!(l.top_level(9), 7);
        assert_eq!(l.top_level(8), 8);
    }
}
