//! What routing produces: one Kafka record, with the relay's own position headers.

use bytes::Bytes;

use crate::Lsn;

/// Header carrying the LSN of the source transaction's commit record (`X/Y` text).
pub const HEADER_COMMIT_LSN: &str = "outbox-relay.commit-lsn";
/// Header carrying the source commit time, in microseconds since the Unix epoch (decimal text).
pub const HEADER_COMMIT_TIME: &str = "outbox-relay.commit-time-us";
/// Header carrying the position of the row in its transaction, from 0 (decimal text).
/// Together with the commit LSN it identifies an event across re-deliveries.
pub const HEADER_SEQ: &str = "outbox-relay.seq";

/// Where a row sits in the source stream: what the relay headers and error messages report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub commit_lsn: Lsn,
    pub commit_time_unix_us: i64,
    pub seq: u64,
}

/// A header's name. Names come from the configuration or are the relay's own, so each is
/// allocated once and every record shares it: a record's copy is a reference count.
pub type HeaderName = std::sync::Arc<str>;

/// One Kafka record, ready to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub topic: String,
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub headers: Vec<(HeaderName, Option<Bytes>)>,
    /// The partition, when `table.fields.additional.placement` sets it; else the key's.
    pub partition: Option<i32>,
    /// The record timestamp (ms), when `table.field.event.timestamp` sets it; else the
    /// producer's time.
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// Key and value bytes: what the in-flight byte limit counts.
    pub fn bytes(&self) -> u64 {
        (self.key.len() + self.value.as_ref().map_or(0, |v| v.len())) as u64
    }
}

/// `relay.relay_headers`: the commit LSN, commit time and position of the source change.
/// Every record carries them, so they cost one allocation in all: the names are shared, the
/// three values are slices of one buffer, and the numbers are written without the formatting
/// machinery.
pub(super) fn push_relay_headers(headers: &mut Vec<(HeaderName, Option<Bytes>)>, pos: Position) {
    static NAMES: std::sync::LazyLock<[HeaderName; 3]> = std::sync::LazyLock::new(|| {
        [HEADER_COMMIT_LSN, HEADER_COMMIT_TIME, HEADER_SEQ].map(HeaderName::from)
    });
    let lsn = pos.commit_lsn.to_text_bytes();
    let mut num = itoa::Buffer::new();
    let mut buf = bytes::BytesMut::with_capacity(lsn.len() + 20 + 20);
    buf.extend_from_slice(&lsn);
    buf.extend_from_slice(num.format(pos.commit_time_unix_us).as_bytes());
    let time_end = buf.len();
    buf.extend_from_slice(num.format(pos.seq).as_bytes());
    let all = buf.freeze();
    let [lsn_name, time_name, seq_name] = &*NAMES;
    headers.push((lsn_name.clone(), Some(all.slice(..lsn.len()))));
    headers.push((time_name.clone(), Some(all.slice(lsn.len()..time_end))));
    headers.push((seq_name.clone(), Some(all.slice(time_end..))));
}

/// Kafka's rule for topic names (`Topic.validate` in the Java client).
pub fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}
