//! Stream decoding: the relation cache and the turn from pgoutput messages into records.
//!
//! Invariants (PostgreSQL docs "Logical Replication Message Flow", correctness notes P11):
//! - a Relation message precedes the first change of a table on every connection, may arrive in
//!   the middle of a transaction, and replaces whatever was cached for that OID (columns can be
//!   added, dropped or reordered by `ALTER TABLE`): the plan is recompiled on every Relation;
//! - an Insert for an OID with no Relation seen is a protocol violation, never a skip;
//! - the cache is per connection: [`Decoder::reset`] on every reconnect.

use std::{collections::HashMap, sync::Arc};

use bytes::Bytes;

use crate::{
    Lsn,
    checkpoint::Fingerprint,
    pgoutput,
    pgoutput::{Message, Relation},
    route::{
        OutboxTable, Plan, PlanEnv, Position, Record, RouteError,
        debezium::{EnvelopeSchemas, OpInvalidBehavior},
    },
};

/// What one message meant to the relay.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// An INSERT into an outbox table: publish this.
    Record {
        record: Record,
        /// The configured `[[outbox]]` table (`schema.table`) it is routed by.
        routed: Arc<str>,
        fingerprint: Fingerprint,
    },
    /// A logical message (`pg_logical_emit_message`), for the caller to filter by prefix.
    LogicalMessage {
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    /// An INSERT into an outbox table that cannot become a record (NULL key, invalid topic,
    /// a mapped column missing). The caller halts or dead-letters it; it never skips it.
    Poison(Poison),
    /// An INSERT into a table that is not an outbox table: nothing to publish, but it counts
    /// in the transaction's change index ([`crate::checkpoint`]).
    OtherInsert(Fingerprint),
    /// A Relation message for a configured outbox table (matched by OID) under another name:
    /// the table was renamed while in the publication. Its rows are still published with its
    /// mapping; the caller warns.
    OutboxRenamed { configured: String, now: String },
    /// An UPDATE or DELETE of an outbox table's row: never published (the outbox is
    /// insert-only); the caller logs it, or stops on an UPDATE under
    /// `table.op.invalid.behavior = "fatal"`. Not a change of the change index.
    OutboxModified {
        /// The configured `[[outbox]]` table.
        routed: Arc<str>,
        delete: bool,
        behavior: OpInvalidBehavior,
    },
    /// Anything that needs no action and is not a change (Relation, Truncate, changes of other
    /// tables...).
    Nothing,
}

/// A row that cannot be routed, with everything needed to record it.
#[derive(Debug, PartialEq, Eq)]
pub struct Poison {
    pub table: String,
    /// The configured `[[outbox]]` table it is routed by.
    pub routed: Arc<str>,
    pub fingerprint: Fingerprint,
    /// The whole row as a JSON object of column name → text (or null).
    pub row: String,
    pub error: RouteError,
}

/// Renders a row as a JSON object `{column: text | null}` (binary values as lossy UTF-8,
/// an unchanged-TOAST placeholder as the string `"<unchanged toast>"`).
pub fn row_json(rel: &Relation, tuple: &[crate::pgoutput::Value]) -> String {
    use crate::pgoutput::Value;
    let mut map = serde_json::Map::new();
    for (i, v) in tuple.iter().enumerate() {
        let name = rel
            .columns
            .get(i)
            .map_or_else(|| format!("#{i}"), |c| c.name.clone());
        let value = match v {
            Value::Null => serde_json::Value::Null,
            Value::UnchangedToast => serde_json::Value::String("<unchanged toast>".into()),
            Value::Text(b) | Value::Binary(b) => {
                serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
            }
        };
        map.insert(name, value);
    }
    serde_json::Value::Object(map).to_string()
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Parse(#[from] pgoutput::ParseError),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(
        "an INSERT arrived for relation OID {0} before its Relation message; the replication \
         stream is out of protocol"
    )]
    UnknownRelation(u32),
    #[error("a Begin or Commit arrived inside XLogData; the replication stream is out of protocol")]
    UnexpectedBoundary,
}

enum Cached {
    /// The plan and the configured table name.
    Outbox(Box<Plan>, Arc<str>),
    /// An outbox table whose description does not fit the mapping (a mapped column is
    /// missing). Every INSERT into it fails with this error; a Relation alone does not, so an
    /// `ALTER TABLE` that is fixed before the next insert stops nothing.
    Broken(Relation, RouteError, Arc<str>),
    Other,
}

/// Relation cache + routing of inserts for the configured outbox tables.
///
/// Outbox tables are matched by name *and* by the OIDs the preflight resolved
/// ([`Decoder::with_oids`]): a table renamed while in the publication keeps its OID, and its
/// inserts must not pass for another table's (they would be confirmed without a record).
pub struct Decoder {
    tables: HashMap<(String, String), OutboxTable>,
    oids: HashMap<u32, (String, String)>,
    relay_headers: bool,
    /// Looked up once per change: foldhash, not SipHash (oids are the server's).
    relations: HashMap<u32, Cached, foldhash::fast::FixedState>,
    /// OID → NOT NULL columns of each outbox table (Connect's `optional` for `[outbox.debezium]`).
    not_null: HashMap<u32, Vec<String>>,
    /// OID → generated columns of each outbox table (left out of row fingerprints).
    generated: HashMap<u32, Vec<String>>,
    run_id: Arc<str>,
    /// Per configured table: Debezium's envelope value-schema cache, kept across recompiles.
    envelope_schemas: HashMap<Arc<str>, Arc<EnvelopeSchemas>>,
}

impl Decoder {
    pub fn new(tables: &[OutboxTable], relay_headers: bool) -> Self {
        Self {
            tables: tables
                .iter()
                .map(|t| (t.qualified_name(), t.clone()))
                .collect(),
            oids: HashMap::new(),
            relay_headers,
            relations: HashMap::default(),
            not_null: HashMap::new(),
            generated: HashMap::new(),
            run_id: Arc::from(""),
            envelope_schemas: HashMap::new(),
        }
    }

    /// What `[outbox.debezium]` needs from the catalog and the process: the NOT NULL columns
    /// of each outbox table (by OID) and this run's id (the `__debezium.context.runId` header).
    pub fn with_compat(mut self, not_null: HashMap<u32, Vec<String>>, run_id: &str) -> Self {
        self.not_null = not_null;
        self.run_id = Arc::from(run_id);
        self
    }

    /// The generated columns of each outbox table (by OID), from the catalog: a row's
    /// fingerprint leaves them out, as the publication may carry them or not (PostgreSQL 18's
    /// `publish_generated_columns`).
    pub fn with_generated(mut self, generated: HashMap<u32, Vec<String>>) -> Self {
        self.generated = generated;
        self
    }

    /// The OIDs of the configured outbox tables (OID → configured `(schema, table)`), as the
    /// server knew them when the stream started.
    pub fn with_oids(mut self, oids: HashMap<u32, (String, String)>) -> Self {
        self.oids = oids;
        self
    }

    /// Forgets every Relation: call on every new replication connection.
    pub fn reset(&mut self) {
        self.relations.clear();
    }

    /// Decodes one XLogData payload. `pos` is the enclosing transaction's position, with `seq`
    /// the index the next outbox row would get.
    pub fn decode(&mut self, data: Bytes, pos: Position) -> Result<Decoded, DecodeError> {
        match pgoutput::parse(data)? {
            Message::Relation(rel) => Ok(self.on_relation(rel)),
            Message::Insert {
                relation_oid,
                tuple,
            } => self.insert(relation_oid, &tuple, pos),
            Message::LogicalMessage {
                transactional,
                lsn,
                prefix,
                content,
            } => Ok(Decoded::LogicalMessage {
                transactional,
                lsn,
                prefix,
                content,
            }),
            Message::Begin { .. } | Message::Commit { .. } => Err(DecodeError::UnexpectedBoundary),
            Message::Modified {
                relation_oid,
                delete,
            } => Ok(match self.relations.get(&relation_oid) {
                Some(Cached::Outbox(_, routed) | Cached::Broken(_, _, routed)) => {
                    Decoded::OutboxModified {
                        routed: routed.clone(),
                        delete,
                        behavior: self.op_behavior(routed),
                    }
                }
                Some(Cached::Other) | None => Decoded::Nothing,
            }),
            Message::Ignored { .. } => Ok(Decoded::Nothing),
        }
    }

    /// A table description, as a Relation message gives it: the stream's path, and the one a
    /// row read from the table (`outbox-relay republish`, the heal) takes, so both build the
    /// same record.
    pub fn relation(&mut self, rel: Relation) -> Decoded {
        self.on_relation(rel)
    }

    /// One inserted row of the relation `relation_oid` described before: the stream's path,
    /// and the one a row read from the table takes.
    pub fn insert(
        &mut self,
        relation_oid: u32,
        tuple: &[pgoutput::Value],
        pos: Position,
    ) -> Result<Decoded, DecodeError> {
        match self.relations.get(&relation_oid) {
            None => Err(DecodeError::UnknownRelation(relation_oid)),
            Some(Cached::Other) => Ok(Decoded::OtherInsert(Fingerprint::of_row(tuple))),
            Some(Cached::Outbox(plan, routed)) => match plan.route(tuple, pos) {
                Ok(record) => Ok(Decoded::Record {
                    record,
                    routed: routed.clone(),
                    fingerprint: plan.fingerprint(tuple),
                }),
                Err(error) => Ok(Decoded::Poison(Poison {
                    table: plan.table().to_string(),
                    routed: routed.clone(),
                    fingerprint: plan.fingerprint(tuple),
                    row: row_json(plan.relation(), tuple),
                    error,
                })),
            },
            Some(Cached::Broken(rel, error, routed)) => Ok(Decoded::Poison(Poison {
                table: format!("{}.{}", rel.namespace, rel.name),
                routed: routed.clone(),
                fingerprint: Fingerprint::of_row(tuple),
                row: row_json(rel, tuple),
                error: error.clone(),
            })),
        }
    }

    /// The `table.op.invalid.behavior` of the configured table `routed` (`schema.table`).
    fn op_behavior(&self, routed: &str) -> OpInvalidBehavior {
        self.tables
            .iter()
            .find(|((schema, table), _)| format!("{schema}.{table}") == routed)
            .and_then(|(_, cfg)| cfg.debezium.as_ref())
            .map(|d| d.op_invalid_behavior)
            .unwrap_or_default()
    }

    fn on_relation(&mut self, rel: Relation) -> Decoded {
        let key = (rel.namespace.clone(), rel.name.clone());
        let mut decoded = Decoded::Nothing;
        let cfg = match self.tables.get(&key) {
            Some(cfg) => Some(cfg),
            None => {
                let configured = self.oids.get(&rel.oid).and_then(|k| self.tables.get(k));
                if let Some(cfg) = configured {
                    decoded = Decoded::OutboxRenamed {
                        configured: cfg.table.clone(),
                        now: format!("{}.{}", rel.namespace, rel.name),
                    };
                }
                configured
            }
        };
        let cached = match cfg {
            Some(cfg) => {
                let (schema, table) = cfg.qualified_name();
                let routed: Arc<str> = format!("{schema}.{table}").into();
                let env = PlanEnv {
                    relay_headers: self.relay_headers,
                    not_null: self.not_null.get(&rel.oid).cloned().unwrap_or_default(),
                    generated: self.generated.get(&rel.oid).cloned().unwrap_or_default(),
                    run_id: self.run_id.clone(),
                    envelope_schemas: self
                        .envelope_schemas
                        .entry(routed.clone())
                        .or_default()
                        .clone(),
                };
                match Plan::compile_in(cfg, &rel, &env) {
                    Ok(plan) => Cached::Outbox(Box::new(plan), routed),
                    Err(e) => Cached::Broken(rel.clone(), e, routed),
                }
            }
            None => Cached::Other,
        };
        self.relations.insert(rel.oid, cached);
        decoded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgoutput::fixtures::{insert, relation};

    const POS: Position = Position {
        commit_lsn: Lsn(1),
        commit_time_unix_us: 0,
        seq: 0,
    };
    const TEXT: u32 = 25;

    fn decoder() -> Decoder {
        Decoder::new(&[OutboxTable::default()], false)
    }
    fn outbox_rel(cols: &[&str]) -> Bytes {
        let cols: Vec<_> = cols.iter().map(|c| (*c, TEXT)).collect();
        relation(100, "public", "outbox", &cols)
    }
    const COLS: [&str; 5] = ["id", "aggregatetype", "aggregateid", "type", "payload"];

    #[test]
    fn updates_and_deletes_of_the_outbox_are_reported_with_the_tables_behaviour() {
        let fatal = OutboxTable {
            debezium: Some(crate::route::DebeziumOptions {
                op_invalid_behavior: OpInvalidBehavior::Fatal,
                ..Default::default()
            }),
            ..OutboxTable::default()
        };
        for (cfg, behavior) in [
            (OutboxTable::default(), OpInvalidBehavior::Warn),
            (fatal, OpInvalidBehavior::Fatal),
        ] {
            let mut d = Decoder::new(&[cfg], false);
            d.decode(outbox_rel(&COLS), POS).unwrap();
            d.decode(relation(200, "public", "orders", &[("id", TEXT)]), POS)
                .unwrap();
            for (tag, delete) in [(b'U', false), (b'D', true)] {
                let msg = |oid: u32| {
                    let mut b = vec![tag];
                    b.extend_from_slice(&oid.to_be_bytes());
                    b.push(b'K');
                    Bytes::from(b)
                };
                assert_eq!(
                    d.decode(msg(100), POS).unwrap(),
                    Decoded::OutboxModified {
                        routed: "public.outbox".into(),
                        delete,
                        behavior
                    }
                );
                assert_eq!(d.decode(msg(200), POS).unwrap(), Decoded::Nothing);
            }
        }
    }

    #[test]
    fn a_renamed_outbox_table_is_still_published_by_oid() {
        let oids = HashMap::from([(100, ("public".to_string(), "outbox".to_string()))]);
        let mut d = decoder().with_oids(oids);
        let cols: Vec<_> = COLS.iter().map(|c| (*c, TEXT)).collect();
        let renamed = d
            .decode(relation(100, "public", "outbox_old", &cols), POS)
            .unwrap();
        assert_eq!(
            renamed,
            Decoded::OutboxRenamed {
                configured: "public.outbox".into(),
                now: "public.outbox_old".into()
            }
        );
        let row = insert(
            100,
            &["e1", "order", "a1", "T", "{}"].map(|v| Some(v.as_bytes())),
        );
        assert!(matches!(
            d.decode(row, POS).unwrap(),
            Decoded::Record { .. }
        ));
        // Another table with another OID is still not an outbox.
        d.decode(relation(200, "public", "orders", &[("id", TEXT)]), POS)
            .unwrap();
        assert!(matches!(
            d.decode(insert(200, &[Some(&b"1"[..])]), POS).unwrap(),
            Decoded::OtherInsert(_)
        ));
    }

    #[test]
    fn mapped_columns_name_every_column_the_mapping_reads() {
        let t = OutboxTable {
            topic: "t.{nope}.{aggregatetype}".into(),
            ..OutboxTable::default()
        };
        let cols: Vec<String> = t.mapped_columns().into_iter().map(|(c, _)| c).collect();
        for c in [
            "nope",
            "aggregatetype",
            "aggregateid",
            "payload",
            "id",
            "type",
        ] {
            assert!(cols.contains(&c.to_string()), "{c} in {cols:?}");
        }
    }

    #[test]
    fn inserts_into_other_tables_are_not_published() {
        let mut d = decoder();
        d.decode(relation(200, "public", "orders", &[("id", TEXT)]), POS)
            .unwrap();
        assert!(matches!(
            d.decode(insert(200, &[Some(b"1")]), POS).unwrap(),
            Decoded::OtherInsert(_)
        ));
    }

    #[test]
    fn insert_before_relation_is_a_protocol_error() {
        let mut d = decoder();
        let err = d.decode(insert(100, &[Some(b"1")]), POS).unwrap_err();
        assert!(matches!(err, DecodeError::UnknownRelation(100)));
    }

    #[test]
    fn a_relation_resent_after_alter_table_remaps_columns_by_name() {
        let mut d = decoder();
        d.decode(outbox_rel(&COLS), POS).unwrap();
        let row = [
            Some(&b"i"[..]),
            Some(b"order"),
            Some(b"k1"),
            Some(b"T"),
            Some(b"{}"),
        ];
        let Decoded::Record { record: r, .. } = d.decode(insert(100, &row), POS).unwrap() else {
            panic!()
        };
        assert_eq!(r.key, "k1");
        // ALTER TABLE outbox ADD COLUMN tenant text, and a column moved first (as after a rewrite).
        d.decode(
            outbox_rel(&[
                "tenant",
                "id",
                "aggregatetype",
                "aggregateid",
                "type",
                "payload",
            ]),
            POS,
        )
        .unwrap();
        let row = [
            Some(&b"t1"[..]),
            Some(b"i2"),
            Some(b"order"),
            Some(b"k2"),
            Some(b"T"),
            Some(b"{}"),
        ];
        let Decoded::Record { record: r, .. } = d.decode(insert(100, &row), POS).unwrap() else {
            panic!()
        };
        assert_eq!(
            (r.topic.as_str(), &r.key[..]),
            ("outbox.event.order", &b"k2"[..])
        );
    }

    #[test]
    fn reset_forgets_relations() {
        let mut d = decoder();
        d.decode(outbox_rel(&COLS), POS).unwrap();
        d.reset();
        assert!(d.decode(insert(100, &[None; 5]), POS).is_err());
    }

    #[test]
    fn a_relation_missing_a_mapped_column_makes_each_insert_poison_with_its_row() {
        let mut d = decoder();
        assert_eq!(
            d.decode(outbox_rel(&["id", "payload"]), POS).unwrap(),
            Decoded::Nothing
        );
        let Decoded::Poison(p) = d.decode(insert(100, &[Some(b"i1"), None]), POS).unwrap() else {
            panic!("not poison");
        };
        assert_eq!(p.table, "public.outbox");
        assert_eq!(p.row, r#"{"id":"i1","payload":null}"#);
        assert!(p.error.to_string().contains("aggregatetype"), "{}", p.error);
    }

    #[test]
    fn a_null_key_is_poison_carrying_the_whole_row() {
        let mut d = decoder();
        d.decode(outbox_rel(&COLS), POS).unwrap();
        let row = [
            Some(&b"i"[..]),
            Some(b"order"),
            None,
            Some(b"T"),
            Some(b"{}"),
        ];
        let Decoded::Poison(p) = d.decode(insert(100, &row), POS).unwrap() else {
            panic!()
        };
        assert!(matches!(p.error, RouteError::Null { .. }));
        assert!(p.row.contains(r#""aggregateid":null"#), "{}", p.row);
    }
}
