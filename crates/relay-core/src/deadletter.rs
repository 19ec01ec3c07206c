//! Dead-letter records: what the relay publishes instead of an event it cannot deliver, under
//! `relay.on_poison = "dead-letter"`.
//!
//! Invariant: nothing is dropped without a record. A row that cannot be routed becomes a record
//! whose value is the whole row as JSON; an event Kafka refuses for good becomes a record with
//! its key and headers (and its value unless that was the problem). Both carry the reason, the
//! source (the outbox table, or a logical message's prefix) and the source position, and both
//! count for the watermark like the event they replace, so the slot advances past them only once
//! the dead-letter record is acknowledged.

use std::collections::HashMap;

use bytes::Bytes;

use crate::{
    Lsn,
    decode::Poison,
    route::{
        HEADER_COMMIT_LSN, HEADER_COMMIT_TIME, HEADER_SEQ, HeaderName, MessagePoison, Position,
        Record, routed_prefix,
    },
};

/// Why the event was dead-lettered.
pub const HEADER_REASON: &str = "outbox-relay.dlq.reason";
/// The outbox table the row came from (rows that could not be routed).
pub const HEADER_TABLE: &str = "outbox-relay.dlq.table";
/// The prefix of the logical message that could not be routed.
pub const HEADER_PREFIX: &str = "outbox-relay.dlq.prefix";
/// The topic the event should have gone to (empty when routing failed).
pub const HEADER_TOPIC: &str = "outbox-relay.dlq.topic";
/// Size in bytes of the original value when it was left out.
pub const HEADER_OMITTED_VALUE_BYTES: &str = "outbox-relay.dlq.omitted-value-bytes";

fn position_headers(pos: Position) -> [(HeaderName, Option<Bytes>); 3] {
    [
        (
            HEADER_COMMIT_LSN.into(),
            Some(pos.commit_lsn.to_string().into()),
        ),
        (
            HEADER_COMMIT_TIME.into(),
            Some(pos.commit_time_unix_us.to_string().into()),
        ),
        (HEADER_SEQ.into(), Some(pos.seq.to_string().into())),
    ]
}

/// A row that could not be routed: key = the table name, value = the row as JSON.
pub fn from_poison(p: &Poison, pos: Position, topic: &str) -> Record {
    let mut headers = vec![
        (HEADER_REASON.into(), Some(Bytes::from(p.error.to_string()))),
        (HEADER_TABLE.into(), Some(Bytes::from(p.table.clone()))),
        (HEADER_TOPIC.into(), Some(Bytes::new())),
    ];
    headers.extend(position_headers(pos));
    Record {
        topic: topic.to_string(),
        key: Bytes::from(p.table.clone()),
        value: Some(Bytes::from(p.row.clone())),
        headers,
        partition: None,
        timestamp_ms: None,
    }
}

/// A logical message that could not be routed: key = the prefix, value = the content as sent.
pub fn from_message_poison(p: &MessagePoison, pos: Position, topic: &str) -> Record {
    let mut headers = vec![
        (HEADER_REASON.into(), Some(Bytes::from(p.error.to_string()))),
        (HEADER_PREFIX.into(), Some(Bytes::from(p.prefix.clone()))),
        (HEADER_TOPIC.into(), Some(Bytes::new())),
    ];
    headers.extend(position_headers(pos));
    Record {
        topic: topic.to_string(),
        key: Bytes::from(p.prefix.clone()),
        value: Some(p.content.clone()),
        headers,
        partition: None,
        timestamp_ms: None,
    }
}

/// The header naming where an event came from: `routed` is an `[[outbox]]` table's
/// `schema.table` ([`HEADER_TABLE`]) or a logical message's `message:<prefix>`
/// ([`HEADER_PREFIX`], the prefix alone).
fn source_header(routed: &str) -> (HeaderName, Option<Bytes>) {
    match routed_prefix(routed) {
        Some(prefix) => (HEADER_PREFIX.into(), Some(Bytes::from(prefix.to_string()))),
        None => (HEADER_TABLE.into(), Some(Bytes::from(routed.to_string()))),
    }
}

/// An event Kafka refused: same key and headers, the reason and its source (`routed`: see
/// [`source_header`]) added; the value is kept unless it is larger than `max_value_bytes` (a
/// refusal for size would repeat).
pub fn from_refused(
    rec: &Record,
    routed: &str,
    reason: &str,
    pos: Position,
    topic: &str,
    max_value_bytes: usize,
) -> Record {
    let mut headers: Vec<(HeaderName, Option<Bytes>)> = rec
        .headers
        .iter()
        .filter(|(k, _)| ![HEADER_COMMIT_LSN, HEADER_COMMIT_TIME, HEADER_SEQ].contains(&&**k))
        .cloned()
        .collect();
    headers.push((HEADER_REASON.into(), Some(Bytes::from(reason.to_string()))));
    headers.push(source_header(routed));
    headers.push((HEADER_TOPIC.into(), Some(Bytes::from(rec.topic.clone()))));
    let value = match &rec.value {
        Some(v) if v.len() > max_value_bytes => {
            headers.push((
                HEADER_OMITTED_VALUE_BYTES.into(),
                Some(v.len().to_string().into()),
            ));
            None
        }
        v => v.clone(),
    };
    headers.extend(position_headers(pos));
    Record {
        topic: topic.to_string(),
        key: rec.key.clone(),
        value,
        headers,
        partition: None,
        timestamp_ms: None,
    }
}

/// What is known about an event Kafka refused after it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Refused in a batch: the broker refuses a whole batch when one record is too large, so
    /// this event may be innocent. Next time it is sent alone.
    Suspect(String),
    /// Refused when sent alone: it goes to the dead-letter topic.
    Confirmed(String),
}

/// Events Kafka refused for good, by source position `(commit_lsn, seq)`. After a refusal the
/// pipeline restarts from the confirmed LSN; when the event comes round again it is sent alone
/// (a suspect) or to the dead-letter topic (confirmed). Kept in memory: after a process restart
/// the event is tried once more, refused again, and learnt again.
#[derive(Debug, Default)]
pub struct Refusals {
    by_position: HashMap<(Lsn, u64), Refusal>,
}

impl Refusals {
    /// Records a refusal in a batch; an event already confirmed stays confirmed.
    pub fn suspect(&mut self, commit_lsn: Lsn, seq: u64, reason: String) {
        self.by_position
            .entry((commit_lsn, seq))
            .or_insert(Refusal::Suspect(reason));
    }

    /// Records a refusal of the event sent alone.
    pub fn confirm(&mut self, commit_lsn: Lsn, seq: u64, reason: String) {
        self.by_position
            .insert((commit_lsn, seq), Refusal::Confirmed(reason));
    }

    /// The event was accepted when sent alone: it was innocent.
    pub fn clear(&mut self, commit_lsn: Lsn, seq: u64) {
        self.by_position.remove(&(commit_lsn, seq));
    }

    pub fn get(&self, commit_lsn: Lsn, seq: u64) -> Option<&Refusal> {
        self.by_position.get(&(commit_lsn, seq))
    }

    /// Forgets positions the slot has confirmed: they are never sent again.
    pub fn forget_below(&mut self, confirmed: Lsn) {
        self.by_position.retain(|(lsn, _), _| *lsn >= confirmed);
    }

    pub fn is_empty(&self) -> bool {
        self.by_position.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::RouteError;

    const POS: Position = Position {
        commit_lsn: Lsn(0x20),
        commit_time_unix_us: 9,
        seq: 3,
    };

    fn header<'a>(r: &'a Record, k: &str) -> &'a [u8] {
        r.headers
            .iter()
            .find(|(n, _)| &**n == k)
            .and_then(|(_, v)| v.as_deref())
            .unwrap()
    }

    #[test]
    fn a_poison_row_is_kept_whole_with_reason_and_position() {
        let p = Poison {
            table: "public.outbox".into(),
            routed: "public.outbox".into(),
            fingerprint: crate::checkpoint::Fingerprint::Hash(1),
            row: r#"{"id":"1","aggregateid":null}"#.into(),
            error: RouteError::Null {
                table: "public.outbox".into(),
                column: "aggregateid".into(),
                role: "the key".into(),
                commit_lsn: POS.commit_lsn,
                seq: 3,
            },
        };
        let r = from_poison(&p, POS, "dlq");
        assert_eq!(r.topic, "dlq");
        assert_eq!(r.value.as_deref(), Some(p.row.as_bytes()));
        assert!(
            std::str::from_utf8(header(&r, HEADER_REASON))
                .unwrap()
                .contains("NULL")
        );
        assert_eq!(header(&r, HEADER_COMMIT_LSN), b"0/20");
        assert_eq!(header(&r, HEADER_SEQ), b"3");
    }

    #[test]
    fn a_refused_record_keeps_key_and_headers_and_drops_an_oversized_value() {
        let rec = Record {
            topic: "orders".into(),
            key: Bytes::from("k"),
            value: Some(Bytes::from(vec![b'x'; 100])),
            headers: vec![("id".into(), Some(Bytes::from("e1")))],
            partition: None,
            timestamp_ms: None,
        };
        let r = from_refused(&rec, "public.outbox", "too large", POS, "dlq", 10);
        assert_eq!(
            (r.topic.as_str(), &r.key[..], r.value.as_ref()),
            ("dlq", &b"k"[..], None)
        );
        assert_eq!(header(&r, "id"), b"e1");
        assert_eq!(header(&r, HEADER_TOPIC), b"orders");
        assert_eq!(header(&r, HEADER_TABLE), b"public.outbox");
        assert_eq!(header(&r, HEADER_OMITTED_VALUE_BYTES), b"100");
        assert!(!r.headers.iter().any(|(k, _)| &**k == HEADER_PREFIX));
        let r = from_refused(&rec, "public.outbox", "unknown topic", POS, "dlq", 1000);
        assert_eq!(r.value, rec.value);
    }

    #[test]
    fn a_refused_message_names_its_prefix_like_a_message_that_cannot_be_routed() {
        let rec = Record {
            topic: "orders".into(),
            key: Bytes::from("k"),
            value: Some(Bytes::from_static(b"{}")),
            headers: vec![("id".into(), Some(Bytes::from("e1")))],
            partition: None,
            timestamp_ms: None,
        };
        let r = from_refused(&rec, "message:outbox", "too large", POS, "dlq", 1000);
        assert_eq!(header(&r, HEADER_PREFIX), b"outbox");
        assert_eq!(header(&r, HEADER_COMMIT_LSN), b"0/20");
        assert!(!r.headers.iter().any(|(k, _)| &**k == HEADER_TABLE));
    }

    #[test]
    fn refusals_are_found_by_position_and_forgotten_once_confirmed() {
        let mut m = Refusals::default();
        m.suspect(Lsn(10), 2, "r".into());
        assert_eq!(m.get(Lsn(10), 2), Some(&Refusal::Suspect("r".into())));
        m.confirm(Lsn(10), 2, "r2".into());
        m.suspect(Lsn(10), 2, "r3".into());
        assert_eq!(m.get(Lsn(10), 2), Some(&Refusal::Confirmed("r2".into())));
        assert_eq!(m.get(Lsn(10), 1), None);
        m.suspect(Lsn(10), 1, "x".into());
        m.clear(Lsn(10), 1);
        assert_eq!(m.get(Lsn(10), 1), None);
        m.forget_below(Lsn(10));
        assert!(!m.is_empty());
        m.forget_below(Lsn(11));
        assert!(m.is_empty());
    }

    #[test]
    fn a_message_that_cannot_be_routed_keeps_its_content_prefix_and_reason() {
        let p = MessagePoison {
            prefix: "outbox".into(),
            routed: "message:outbox".into(),
            fingerprint: crate::checkpoint::Fingerprint::of_message("outbox", b"[1]"),
            content: Bytes::from_static(b"[1]"),
            error: crate::route::MessageError::NotAnObject {
                prefix: "outbox".into(),
                detail: "invalid type".into(),
                commit_lsn: POS.commit_lsn,
                seq: POS.seq,
            },
        };
        let r = from_message_poison(&p, POS, "dlq");
        assert_eq!((r.topic.as_str(), &r.key[..]), ("dlq", &b"outbox"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"[1]"[..]));
        assert_eq!(header(&r, HEADER_PREFIX), b"outbox");
        assert!(String::from_utf8_lossy(header(&r, HEADER_REASON)).contains("not a JSON object"));
        assert_eq!(header(&r, HEADER_COMMIT_LSN), b"0/20");
    }
}
