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
/// Every record carries them, so they cost no allocation on the way: the names are shared;
/// the commit LSN's and time's texts are written once per transaction (see [`TxnTexts`]) and
/// each record holds a reference to them; the position's text is a slice of a static table
/// below [`SEQ_TABLE_LEN`] (a transaction's first ten thousand rows), else its own small buffer.
pub(super) fn push_relay_headers(headers: &mut Vec<(HeaderName, Option<Bytes>)>, pos: Position) {
    static NAMES: std::sync::LazyLock<[HeaderName; 3]> = std::sync::LazyLock::new(|| {
        [HEADER_COMMIT_LSN, HEADER_COMMIT_TIME, HEADER_SEQ].map(HeaderName::from)
    });
    let (lsn, time) = TxnTexts::of(pos);
    let [lsn_name, time_name, seq_name] = &*NAMES;
    headers.push((lsn_name.clone(), Some(lsn)));
    headers.push((time_name.clone(), Some(time)));
    headers.push((seq_name.clone(), Some(seq_text(pos.seq))));
}

/// Positions whose text [`seq_text`] takes from the static table.
const SEQ_TABLE_LEN: u64 = 10_000;

/// The decimal text of `seq`: a slice of one static table of `0`..`9999` (38,890 bytes,
/// written at first use) below [`SEQ_TABLE_LEN`], else a buffer of its own.
fn seq_text(seq: u64) -> Bytes {
    static TABLE: std::sync::LazyLock<(Vec<u8>, Vec<u32>)> = std::sync::LazyLock::new(|| {
        let mut text = Vec::new();
        let mut ends = Vec::with_capacity(SEQ_TABLE_LEN as usize);
        let mut num = itoa::Buffer::new();
        for i in 0..SEQ_TABLE_LEN {
            text.extend_from_slice(num.format(i).as_bytes());
            ends.push(text.len() as u32);
        }
        (text, ends)
    });
    if seq >= SEQ_TABLE_LEN {
        return Bytes::copy_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    }
    let (text, ends): &'static (Vec<u8>, Vec<u32>) = &TABLE;
    let end = ends[seq as usize] as usize;
    let start = if seq == 0 {
        0
    } else {
        ends[seq as usize - 1] as usize
    };
    Bytes::from_static(&text[start..end])
}

/// The texts of one transaction's commit LSN and commit time, kept for its next rows.
///
/// Invariant: [`TxnTexts::of`] returns exactly the texts of the position it is given (the
/// cache is keyed by both values, and any other position replaces it), so the memo changes
/// only what a record costs, never what it holds. Rows of one transaction arrive one after
/// another on the thread that routes them, so one entry per thread is enough.
struct TxnTexts {
    commit_lsn: Lsn,
    commit_time_unix_us: i64,
    lsn: Bytes,
    time: Bytes,
}

impl TxnTexts {
    fn of(pos: Position) -> (Bytes, Bytes) {
        thread_local! {
            static LAST: std::cell::RefCell<Option<TxnTexts>> =
                const { std::cell::RefCell::new(None) };
        }
        LAST.with_borrow_mut(|last| {
            match last {
                Some(t)
                    if t.commit_lsn == pos.commit_lsn
                        && t.commit_time_unix_us == pos.commit_time_unix_us => {}
                _ => {
                    let lsn = pos.commit_lsn.to_text_bytes();
                    let mut num = itoa::Buffer::new();
                    let time =
                        Bytes::copy_from_slice(num.format(pos.commit_time_unix_us).as_bytes());
                    *last = Some(TxnTexts {
                        commit_lsn: pos.commit_lsn,
                        commit_time_unix_us: pos.commit_time_unix_us,
                        lsn,
                        time,
                    });
                }
            }
            let t = last.as_ref().expect("set above");
            (t.lsn.clone(), t.time.clone())
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(pos: Position) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        push_relay_headers(&mut headers, pos);
        headers
            .into_iter()
            .map(|(k, v)| {
                let v = v.expect("relay headers have values");
                (k.to_string(), String::from_utf8(v.to_vec()).unwrap())
            })
            .collect()
    }

    fn formatted(pos: Position) -> Vec<(String, String)> {
        vec![
            (HEADER_COMMIT_LSN.into(), pos.commit_lsn.to_string()),
            (
                HEADER_COMMIT_TIME.into(),
                pos.commit_time_unix_us.to_string(),
            ),
            (HEADER_SEQ.into(), pos.seq.to_string()),
        ]
    }

    #[test]
    fn the_table_and_the_buffers_write_each_position_as_text() {
        for seq in [
            0,
            1,
            9,
            10,
            99,
            100,
            999,
            1000,
            9998,
            9999,
            10_000,
            10_001,
            u64::MAX,
        ] {
            assert_eq!(seq_text(seq), seq.to_string().as_bytes(), "{seq}");
        }
    }

    proptest::proptest! {
        /// Whatever the order of positions, the memo of a transaction's texts never hands one
        /// transaction's commit LSN or time to another's record: a run of rows of one position,
        /// then others of the same LSN with another time, or the same time with another LSN.
        #[test]
        fn relay_headers_are_the_formatted_position_whatever_came_before(
            steps in proptest::collection::vec((0u64..4, -2i64..2, 0u64..20_005), 1..60)
        ) {
            for (lsn, time, seq) in steps {
                let pos = Position {
                    commit_lsn: Lsn(0x1_0000_0000 + lsn),
                    commit_time_unix_us: 1_700_000_000_000_000 + time,
                    seq,
                };
                proptest::prop_assert_eq!(texts(pos), formatted(pos));
            }
        }
    }
}
