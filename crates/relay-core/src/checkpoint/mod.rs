//! The checkpoint: the record that says how far Kafka holds the stream of one slot.
//!
//! In exactly-once mode it is the last record of every Kafka transaction, so it commits (or
//! aborts) atomically with the records it describes; in at-least-once mode it is written after
//! the acknowledgements it describes. After a restart the relay reads the newest one and skips
//! what it covers ([`crate::skip`]).
//!
//! Invariants:
//! - `covered_lsn` is an LSN whose every earlier change with a record is in Kafka: it may be
//!   confirmed to PostgreSQL.
//! - `last` is the last change with a record in Kafka. It may lie *after* `covered_lsn` (a
//!   source transaction split across Kafka transactions), never before the last record.
//! - A change is named by its transaction's commit LSN, its *change index* (counting every
//!   INSERT and transactional logical message PostgreSQL sent in that transaction, whatever the
//!   routing config, so a config change cannot shift it) and a [`Fingerprint`] that a restored
//!   or divergent history would not reproduce.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

mod trail;
pub use trail::Trail;

use crate::{Lsn, pgoutput::Value};

/// Version of the checkpoint's JSON layout.
pub const VERSION: u32 = 1;

/// What identifies one change: the event id where the mapping has one, else a hash of the row
/// (or of a logical message's prefix and content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fingerprint {
    Id(Bytes),
    Hash(u64),
}

impl Fingerprint {
    /// The hash of a row: every value with its kind and length, so that no two rows collide
    /// by shifting bytes between columns.
    pub fn of_row(tuple: &[Value]) -> Self {
        Self::of_values(tuple)
    }

    /// The hash of some of a row's values, in order ([`Fingerprint::of_row`] of those).
    pub fn of_values<'a>(values: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut h = Fnv::new();
        for v in values {
            match v {
                Value::Null => h.byte(0),
                Value::UnchangedToast => h.byte(1),
                Value::Text(b) => h.tagged(2, b),
                Value::Binary(b) => h.tagged(3, b),
            }
        }
        Fingerprint::Hash(h.0)
    }

    /// The hash of a logical message.
    pub fn of_message(prefix: &str, content: &[u8]) -> Self {
        let mut h = Fnv::new();
        h.tagged(4, prefix.as_bytes());
        h.tagged(5, content);
        Fingerprint::Hash(h.0)
    }

    /// The text kept in a checkpoint: `id:<event id>` or `row:<16 hex digits>`.
    pub fn render(&self) -> String {
        match self {
            Fingerprint::Id(b) => format!("id:{}", String::from_utf8_lossy(b)),
            Fingerprint::Hash(h) => format!("row:{h:016x}"),
        }
    }
}

/// FNV-1a, 64 bit: stable across Rust versions and machines, which a persisted hash must be.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    fn tagged(&mut self, tag: u8, bytes: &[u8]) {
        self.byte(tag);
        for b in (bytes.len() as u64).to_le_bytes() {
            self.byte(b);
        }
        for &b in bytes {
            self.byte(b);
        }
    }
}

/// One change of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRef {
    #[serde(with = "lsn_text")]
    pub commit_lsn: Lsn,
    pub index: u64,
    pub fingerprint: String,
}

impl std::fmt::Display for ChangeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "change #{} of the transaction committed at {} ({})",
            self.index, self.commit_lsn, self.fingerprint
        )
    }
}

/// The checkpoint record's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub version: u32,
    pub system_id: String,
    pub database: String,
    pub slot: String,
    pub timeline: u32,
    #[serde(with = "lsn_text")]
    pub covered_lsn: Lsn,
    pub last: Option<ChangeRef>,
    /// The routed sources (`schema.table`) when it was written: an outbox change below
    /// `covered_lsn` that no checkpoint covers is a changed history only for these.
    pub tables: Vec<String>,
    /// For a slot made on a standby: the standby's `primary_slot_name` (the physical slot
    /// that names it on its primary). A standby and its primary share the system identifier,
    /// so a slot of the same name on each would otherwise share one key ([`Self::key_for`]).
    /// Absent for a primary's slot, whose records are unchanged by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<String>,
}

/// The record cannot be read as a checkpoint.
#[derive(Debug, thiserror::Error)]
#[error(
    "the checkpoint record is not valid ({0}); it was not written by this version of \
     outbox-relay: check kafka.checkpoint_topic is the relay's own topic"
)]
pub struct CheckpointError(String);

impl Checkpoint {
    /// The record key: `<system id>/<database>/<slot>`, and for a slot made on a standby
    /// `<system id>/<database>/<slot>/standby:<its primary_slot_name>` (a slot name has no `/`,
    /// so the two forms never meet).
    pub fn key_for(system_id: &str, database: &str, slot: &str, standby: Option<&str>) -> String {
        match standby {
            None => format!("{system_id}/{database}/{slot}"),
            Some(s) => format!("{system_id}/{database}/{slot}/standby:{s}"),
        }
    }

    pub fn key(&self) -> String {
        Self::key_for(
            &self.system_id,
            &self.database,
            &self.slot,
            self.standby.as_deref(),
        )
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a checkpoint always serialises")
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let c: Checkpoint =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError(e.to_string()))?;
        if c.version != VERSION {
            return Err(CheckpointError(format!(
                "layout version {} (this build reads {VERSION})",
                c.version
            )));
        }
        Ok(c)
    }
}

mod lsn_text {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use crate::Lsn;

    pub(super) fn serialize<S: Serializer>(lsn: &Lsn, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(lsn)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Lsn, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            version: VERSION,
            system_id: "7412".into(),
            database: "app".into(),
            slot: "outbox_relay".into(),
            timeline: 2,
            covered_lsn: Lsn(0x1_0000_0010),
            last: Some(ChangeRef {
                commit_lsn: Lsn(0x1_0000_0020),
                index: 3,
                fingerprint: Fingerprint::Id(Bytes::from_static(b"e-1")).render(),
            }),
            tables: vec!["public.outbox".into()],
            standby: None,
        }
    }

    #[test]
    fn round_trips_with_lsns_as_postgres_prints_them() {
        let c = sample();
        let json = String::from_utf8(c.to_json()).unwrap();
        assert!(json.contains(r#""covered_lsn":"1/10""#), "{json}");
        assert!(json.contains(r#""fingerprint":"id:e-1""#), "{json}");
        assert_eq!(Checkpoint::from_json(json.as_bytes()).unwrap(), c);
        assert_eq!(c.key(), "7412/app/outbox_relay");
    }

    #[test]
    fn a_standby_slot_has_a_key_of_its_own_and_a_primary_slot_the_same_bytes_as_before() {
        let primary = sample();
        let json = String::from_utf8(primary.to_json()).unwrap();
        assert!(!json.contains("standby"), "{json}");
        let mut standby = sample();
        standby.standby = Some("standby_phys".into());
        assert_eq!(standby.key(), "7412/app/outbox_relay/standby:standby_phys");
        assert_ne!(standby.key(), primary.key());
        assert_eq!(Checkpoint::from_json(&standby.to_json()).unwrap(), standby);
    }

    #[test]
    fn foreign_records_and_other_versions_are_refused() {
        assert!(Checkpoint::from_json(b"{\"hello\":1}").is_err());
        let mut c = sample();
        c.version = 99;
        let err = Checkpoint::from_json(&c.to_json()).unwrap_err();
        assert!(err.to_string().contains("version 99"), "{err}");
    }

    #[test]
    fn row_hashes_see_every_value_and_where_it_ends() {
        let t = |s: &'static str| Value::Text(Bytes::from_static(s.as_bytes()));
        let a = Fingerprint::of_row(&[t("ab"), t("c")]);
        assert_eq!(a, Fingerprint::of_row(&[t("ab"), t("c")]));
        assert_ne!(a, Fingerprint::of_row(&[t("a"), t("bc")]));
        assert_ne!(a, Fingerprint::of_row(&[t("ab"), Value::Null]));
        assert_ne!(
            Fingerprint::of_message("p", b"x"),
            Fingerprint::of_message("px", b"")
        );
        // Stable across builds: a checkpoint written by one version is read by the next.
        assert_eq!(
            Fingerprint::of_row(&[t("e-1")]).render(),
            "row:".to_string() + &format!("{:016x}", fnv_reference())
        );
    }

    /// The same hash computed by hand, byte by byte.
    fn fnv_reference() -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        let mut bytes = vec![2u8];
        bytes.extend(3u64.to_le_bytes());
        bytes.extend(b"e-1");
        for b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        h
    }
}
