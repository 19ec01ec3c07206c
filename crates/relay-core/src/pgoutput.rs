//! Byte-level parsing of pgoutput (protocol version 1) messages.
//!
//! Reference: PostgreSQL docs, "Logical Replication Message Formats". The parser borrows nothing
//! from the input beyond `Bytes` slices (cheap clones), never panics on malformed input (it is a
//! fuzz target), and recognises every message tag of protocol v1. Updates and Deletes are returned
//! with their table only ([`Message::Modified`]: the relay publishes INSERTs); Truncate, Type and
//! Origin as [`Message::Ignored`], never as errors: they are legal in the stream.

use bytes::{Buf, Bytes};

use crate::Lsn;

/// One pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Begin {
        final_lsn: Lsn,
        commit_time_us: i64,
        xid: u32,
    },
    Commit {
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time_us: i64,
    },
    Relation(Relation),
    Insert {
        relation_oid: u32,
        tuple: Vec<Value>,
    },
    LogicalMessage {
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    /// An UPDATE (`U`) or DELETE (`D`): which table; the tuples are not read.
    Modified {
        relation_oid: u32,
        delete: bool,
    },
    /// A legal message the relay has no use for (`T`, `Y`, `O`).
    Ignored {
        tag: u8,
    },
}

/// A table description, sent before the first change of a table on each connection and again
/// after every change of its definition. It may arrive inside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: u32,
}

/// One column value of a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    /// An unchanged TOASTed value that was not sent. Never legal for an INSERT.
    UnchangedToast,
    Text(Bytes),
    Binary(Bytes),
}

/// The bytes are not a well-formed pgoutput v1 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty pgoutput message")]
    Empty,
    #[error(
        "pgoutput message {tag:?} is truncated: needed {needed} more bytes while reading {what}"
    )]
    Truncated {
        tag: char,
        what: &'static str,
        needed: usize,
    },
    #[error("pgoutput message {tag:?} has a string that is not NUL-terminated UTF-8 ({what})")]
    BadString { tag: char, what: &'static str },
    #[error("pgoutput message {tag:?} has an unknown tuple value kind {kind:?}")]
    BadTupleKind { tag: char, kind: char },
    #[error("pgoutput message {tag:?} has a negative count or length in {what}")]
    Negative { tag: char, what: &'static str },
    #[error("pgoutput message {tag:?} has an unexpected marker {marker:?} where 'N' was expected")]
    BadTupleMarker { tag: char, marker: char },
    #[error(
        "unknown pgoutput message tag {0:?}; the server speaks a newer protocol than version 1, \
         which outbox-relay requests"
    )]
    UnknownTag(char),
}

struct Reader {
    buf: Bytes,
    tag: char,
}

impl Reader {
    fn need(&self, n: usize, what: &'static str) -> Result<(), ParseError> {
        if self.buf.remaining() < n {
            return Err(ParseError::Truncated {
                tag: self.tag,
                what,
                needed: n - self.buf.remaining(),
            });
        }
        Ok(())
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, ParseError> {
        self.need(1, what)?;
        Ok(self.buf.get_u8())
    }
    fn i16(&mut self, what: &'static str) -> Result<i16, ParseError> {
        self.need(2, what)?;
        Ok(self.buf.get_i16())
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, ParseError> {
        self.need(4, what)?;
        Ok(self.buf.get_u32())
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, ParseError> {
        self.need(4, what)?;
        Ok(self.buf.get_i32())
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, ParseError> {
        self.need(8, what)?;
        Ok(self.buf.get_i64())
    }
    fn lsn(&mut self, what: &'static str) -> Result<Lsn, ParseError> {
        self.need(8, what)?;
        Ok(Lsn(self.buf.get_u64()))
    }
    fn cstr(&mut self, what: &'static str) -> Result<String, ParseError> {
        let bad = ParseError::BadString {
            tag: self.tag,
            what,
        };
        let end = self.buf.iter().position(|&b| b == 0).ok_or(bad.clone())?;
        let s = std::str::from_utf8(&self.buf[..end])
            .map_err(|_| bad)?
            .to_owned();
        self.buf.advance(end + 1);
        Ok(s)
    }
    fn count(&mut self, what: &'static str) -> Result<usize, ParseError> {
        let n = self.i16(what)?;
        usize::try_from(n).map_err(|_| ParseError::Negative {
            tag: self.tag,
            what,
        })
    }
    fn bytes(&mut self, what: &'static str) -> Result<Bytes, ParseError> {
        let len = self.i32(what)?;
        let len = usize::try_from(len).map_err(|_| ParseError::Negative {
            tag: self.tag,
            what,
        })?;
        self.need(len, what)?;
        Ok(self.buf.split_to(len))
    }
    fn tuple(&mut self) -> Result<Vec<Value>, ParseError> {
        let n = self.count("tuple column count")?;
        // Each column takes at least one byte: bound the allocation by the input size.
        let mut values = Vec::with_capacity(n.min(self.buf.remaining()));
        for _ in 0..n {
            values.push(match self.u8("tuple value kind")? {
                b'n' => Value::Null,
                b'u' => Value::UnchangedToast,
                b't' => Value::Text(self.bytes("text value")?),
                b'b' => Value::Binary(self.bytes("binary value")?),
                kind => {
                    return Err(ParseError::BadTupleKind {
                        tag: self.tag,
                        kind: kind as char,
                    });
                }
            });
        }
        Ok(values)
    }
}

/// Parses one pgoutput message (the payload of an XLogData, or a Begin/Commit re-encoded).
pub fn parse(data: Bytes) -> Result<Message, ParseError> {
    let Some(&tag) = data.first() else {
        return Err(ParseError::Empty);
    };
    let mut r = Reader {
        buf: data.slice(1..),
        tag: tag as char,
    };
    Ok(match tag {
        b'B' => Message::Begin {
            final_lsn: r.lsn("final LSN")?,
            commit_time_us: r.i64("commit time")?,
            xid: r.u32("xid")?,
        },
        b'C' => {
            let _flags = r.u8("flags")?;
            Message::Commit {
                commit_lsn: r.lsn("commit LSN")?,
                end_lsn: r.lsn("end LSN")?,
                commit_time_us: r.i64("commit time")?,
            }
        }
        b'R' => {
            let oid = r.u32("relation oid")?;
            let namespace = r.cstr("namespace")?;
            let name = r.cstr("relation name")?;
            let _replica_identity = r.u8("replica identity")?;
            let n = r.count("column count")?;
            let mut columns = Vec::with_capacity(n.min(r.buf.remaining()));
            for _ in 0..n {
                let _flags = r.u8("column flags")?;
                let name = r.cstr("column name")?;
                let type_oid = r.u32("column type")?;
                let _type_mod = r.i32("column type modifier")?;
                columns.push(Column { name, type_oid });
            }
            Message::Relation(Relation {
                oid,
                namespace,
                name,
                columns,
            })
        }
        b'I' => {
            let relation_oid = r.u32("relation oid")?;
            match r.u8("tuple marker")? {
                b'N' => {}
                marker => {
                    return Err(ParseError::BadTupleMarker {
                        tag: 'I',
                        marker: marker as char,
                    });
                }
            }
            Message::Insert {
                relation_oid,
                tuple: r.tuple()?,
            }
        }
        b'M' => {
            let flags = r.u8("flags")?;
            let lsn = r.lsn("message LSN")?;
            let prefix = r.cstr("prefix")?;
            let content = r.bytes("content")?;
            Message::LogicalMessage {
                transactional: flags & 1 == 1,
                lsn,
                prefix,
                content,
            }
        }
        b'U' | b'D' => Message::Modified {
            relation_oid: r.u32("relation oid")?,
            delete: tag == b'D',
        },
        b'T' | b'Y' | b'O' => Message::Ignored { tag },
        other => return Err(ParseError::UnknownTag(other as char)),
    })
}

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures {
    //! Byte builders that write messages exactly as the PostgreSQL docs lay them out (feature
    //! `fixtures`: for the binary's loop tests).
    use bytes::{BufMut, Bytes, BytesMut};

    pub fn relation(oid: u32, ns: &str, name: &str, cols: &[(&str, u32)]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(b'R');
        b.put_u32(oid);
        b.put_slice(ns.as_bytes());
        b.put_u8(0);
        b.put_slice(name.as_bytes());
        b.put_u8(0);
        b.put_u8(b'd');
        b.put_i16(cols.len() as i16);
        for (col, ty) in cols {
            b.put_u8(0);
            b.put_slice(col.as_bytes());
            b.put_u8(0);
            b.put_u32(*ty);
            b.put_i32(-1);
        }
        b.freeze()
    }

    /// `values`: `None` = NULL, `Some(s)` = text.
    pub fn insert(oid: u32, values: &[Option<&[u8]>]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(b'I');
        b.put_u32(oid);
        b.put_u8(b'N');
        b.put_i16(values.len() as i16);
        for v in values {
            match v {
                None => b.put_u8(b'n'),
                Some(s) => {
                    b.put_u8(b't');
                    b.put_i32(s.len() as i32);
                    b.put_slice(s);
                }
            }
        }
        b.freeze()
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use super::{fixtures::*, *};

    #[test]
    fn relation_message_is_decoded_with_columns_in_order() {
        let msg = parse(relation(
            16384,
            "public",
            "outbox",
            &[("id", 2950), ("payload", 3802)],
        ));
        assert_eq!(
            msg.unwrap(),
            Message::Relation(Relation {
                oid: 16384,
                namespace: "public".into(),
                name: "outbox".into(),
                columns: vec![
                    Column {
                        name: "id".into(),
                        type_oid: 2950
                    },
                    Column {
                        name: "payload".into(),
                        type_oid: 3802
                    },
                ],
            })
        );
    }

    #[test]
    fn insert_carries_text_and_null_values() {
        let msg = parse(insert(7, &[Some(b"a"), None, Some(b"")])).unwrap();
        assert_eq!(
            msg,
            Message::Insert {
                relation_oid: 7,
                tuple: vec![
                    Value::Text(Bytes::from_static(b"a")),
                    Value::Null,
                    Value::Text(Bytes::new())
                ],
            }
        );
    }

    #[test]
    fn a_one_megabyte_value_arrives_whole() {
        let big = vec![b'x'; 1 << 20];
        let Message::Insert { tuple, .. } = parse(insert(7, &[Some(&big)])).unwrap() else {
            panic!("not an insert");
        };
        assert_eq!(tuple, vec![Value::Text(Bytes::from(big))]);
    }

    #[test]
    fn begin_commit_and_logical_message_fields_are_read_big_endian() {
        let mut b = BytesMut::new();
        b.put_u8(b'B');
        b.put_u64(0x1_0000_0010);
        b.put_i64(42);
        b.put_u32(99);
        assert_eq!(
            parse(b.freeze()).unwrap(),
            Message::Begin {
                final_lsn: Lsn(0x1_0000_0010),
                commit_time_us: 42,
                xid: 99
            }
        );
        let mut b = BytesMut::new();
        b.put_u8(b'C');
        b.put_u8(0);
        b.put_u64(10);
        b.put_u64(20);
        b.put_i64(7);
        assert_eq!(
            parse(b.freeze()).unwrap(),
            Message::Commit {
                commit_lsn: Lsn(10),
                end_lsn: Lsn(20),
                commit_time_us: 7
            }
        );
        let mut b = BytesMut::new();
        b.put_u8(b'M');
        b.put_u8(1);
        b.put_u64(5);
        b.put_slice(b"outbox-relay\0");
        b.put_i32(2);
        b.put_slice(b"hi");
        assert_eq!(
            parse(b.freeze()).unwrap(),
            Message::LogicalMessage {
                transactional: true,
                lsn: Lsn(5),
                prefix: "outbox-relay".into(),
                content: Bytes::from_static(b"hi"),
            }
        );
    }

    #[test]
    fn messages_the_relay_does_not_use_are_recognised_not_rejected() {
        for tag in [b'T', b'Y', b'O'] {
            assert_eq!(
                parse(Bytes::from(vec![tag, 0, 0])).unwrap(),
                Message::Ignored { tag }
            );
        }
        for (tag, delete) in [(b'U', false), (b'D', true)] {
            assert_eq!(
                parse(Bytes::from(vec![tag, 0, 0, 1, 2, b'K'])).unwrap(),
                Message::Modified {
                    relation_oid: 258,
                    delete
                }
            );
            assert!(parse(Bytes::from(vec![tag, 0, 0])).is_err());
        }
    }

    #[test]
    fn unchanged_toast_is_reported_as_such() {
        let mut b = BytesMut::from(&insert(7, &[])[..]);
        b.truncate(b.len() - 2);
        b.put_i16(1);
        b.put_u8(b'u');
        let Message::Insert { tuple, .. } = parse(b.freeze()).unwrap() else {
            panic!()
        };
        assert_eq!(tuple, vec![Value::UnchangedToast]);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert_eq!(parse(Bytes::new()), Err(ParseError::Empty));
        assert!(matches!(
            parse(Bytes::from_static(b"Z")),
            Err(ParseError::UnknownTag('Z'))
        ));
        let full = insert(7, &[Some(b"abcdef")]);
        for cut in 1..full.len() {
            assert!(
                parse(full.slice(..cut)).is_err(),
                "prefix of {cut} bytes parsed"
            );
        }
        let full = relation(1, "public", "outbox", &[("id", 25)]);
        for cut in 1..full.len() {
            assert!(
                parse(full.slice(..cut)).is_err(),
                "prefix of {cut} bytes parsed"
            );
        }
        // Negative length.
        let mut b = BytesMut::from(&insert(7, &[])[..]);
        b.truncate(b.len() - 2);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(-5);
        assert!(matches!(
            parse(b.freeze()),
            Err(ParseError::Negative { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(data in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = parse(Bytes::from(data));
        }
    }
}
