use std::collections::BTreeMap;

use bytes::Bytes;

use super::*;
use crate::{
    Lsn,
    pgoutput::{Column, Value},
    route::{OutboxTable, Plan, Position, RouteError},
};

const POS: Position = Position {
    commit_lsn: Lsn(0x10),
    commit_time_unix_us: 5,
    seq: 2,
};

/// A Relation of `public.ob` with these columns (also the topic tests').
pub(super) fn rel(cols: &[(&str, u32)]) -> Relation {
    Relation {
        oid: 1,
        namespace: "public".into(),
        name: "ob".into(),
        columns: cols
            .iter()
            .map(|(c, t)| Column {
                name: c.to_string(),
                type_oid: *t,
            })
            .collect(),
    }
}
fn t(s: &str) -> Value {
    Value::Text(Bytes::copy_from_slice(s.as_bytes()))
}
const COLS: [(&str, u32); 8] = [
    ("id", oid::UUID),
    ("aggregatetype", oid::VARCHAR),
    ("aggregateid", oid::VARCHAR),
    ("type", oid::VARCHAR),
    ("payload", oid::JSONB),
    ("ts", oid::TIMESTAMP),
    ("ver", oid::INT4),
    ("tracingspancontext", oid::TEXT),
];
fn row(payload: Value) -> Vec<Value> {
    vec![
        t("00000000-0000-0000-0000-000000000005"),
        t("order"),
        t("agg-2"),
        t("T5"),
        payload,
        t("2024-01-02 03:04:07.678912"),
        t("2"),
        t("traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"),
    ]
}
fn plan(opts: DebeziumOptions) -> Plan {
    let cfg = OutboxTable {
        table: "public.ob".into(),
        headers: BTreeMap::from([("id".into(), "id".into())]),
        debezium: Some(opts),
        ..OutboxTable::default()
    };
    cfg.validate().unwrap();
    let env = PlanEnv {
        relay_headers: false,
        not_null: ["id", "aggregatetype", "aggregateid", "type"]
            .map(String::from)
            .to_vec(),
        run_id: Arc::from("01a23250-974d-74a8-87ea-7aa7d38e3e39"),
        envelope_schemas: Default::default(),
        generated: Vec::new(),
    };
    Plan::compile_in(&cfg, &rel(&COLS), &env).unwrap()
}
fn json() -> DebeziumOptions {
    DebeziumOptions {
        key_converter: Converter::Json,
        value_converter: Converter::Json,
        ..DebeziumOptions::default()
    }
}
fn header(r: &crate::route::Record, name: &str) -> Option<Bytes> {
    r.headers
        .iter()
        .find(|(n, _)| &**n == name)
        .and_then(|(_, v)| v.clone())
}

#[test]
fn a_jsonconverter_envelope_with_schema_version_is_debeziums_struct() {
    // Read off Debezium 3.6.1 (connector jsonv of the side-by-side test).
    let rec = plan(DebeziumOptions {
        additional_placement: "ver:envelope,type:header:eventType".into(),
        schema_version: Some("ver".into()),
        topic_prefix: Some("h14xjsonv".into()),
        ..json()
    })
    .route(&row(t("\"just a string\"")), POS)
    .unwrap();
    assert_eq!(
        rec.key,
        r#"{"schema":{"type":"string","optional":false},"payload":"agg-2"}"#
    );
    assert_eq!(
        rec.value.unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},{"type":"int32","optional":true,"field":"ver"}],"optional":false,"name":"h14xjsonv.public.ob.order.Value","version":2},"payload":{"payload":"\"just a string\"","ver":2}}"#
    );
    let names: Vec<&str> = rec.headers.iter().map(|(n, _)| &**n).collect();
    assert_eq!(names, ["id", "eventType"]);
}

#[test]
fn context_headers_come_first_and_json_headers_carry_schemas() {
    let rec = plan(DebeziumOptions {
        header_converter: HeaderConverter::Json,
        extended_headers: true,
        topic_prefix: Some("h14xbytes".into()),
        additional_placement: "ver:header".into(),
        ..DebeziumOptions::default()
    })
    .route(&row(t("{}")), POS)
    .unwrap();
    let names: Vec<&str> = rec.headers.iter().map(|(n, _)| &**n).collect();
    assert_eq!(
        names,
        [
            "__debezium.context.connectorLogicalName",
            "__debezium.context.taskId",
            "__debezium.context.connectorName",
            "__debezium.context.runId",
            "id",
            "ver"
        ]
    );
    assert_eq!(
        header(&rec, "__debezium.context.connectorLogicalName").unwrap(),
        r#"{"schema":{"type":"string","optional":false},"payload":"h14xbytes"}"#
    );
    assert_eq!(
        header(&rec, "id").unwrap(),
        r#"{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"00000000-0000-0000-0000-000000000005"}"#
    );
    assert_eq!(
        header(&rec, "ver").unwrap(),
        r#"{"schema":{"type":"int32","optional":true},"payload":2}"#
    );
    assert_eq!(rec.value.unwrap(), "{}");
}

#[test]
fn timestamp_partition_tombstone_and_tracing() {
    let p = plan(DebeziumOptions {
        event_timestamp: Some("ts".into()),
        additional_placement: "ver:partition".into(),
        tombstone_on_empty_payload: true,
        tracing_span_context_field: Some("tracingspancontext".into()),
        ..json()
    });
    let rec = p.route(&row(Value::Null), POS).unwrap();
    assert_eq!(rec.timestamp_ms, Some(1_704_164_647_678));
    assert_eq!(rec.partition, Some(2));
    assert_eq!(rec.value, None, "a tombstone, not {{..payload:null}}");
    assert_eq!(
        header(&rec, "traceparent").unwrap(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    let mut bad = row(t("{}"));
    bad[6] = Value::Null;
    assert!(matches!(
        p.route(&bad, POS),
        Err(RouteError::BadValue { ref column, .. }) if column == "ver"
    ));
}

#[test]
fn options_that_cannot_match_debezium_are_refused() {
    let bad = |o: DebeziumOptions| o.validate().unwrap_err();
    assert_eq!(
        bad(DebeziumOptions {
            expand_json_payload: true,
            ..DebeziumOptions::default()
        }),
        OptionsError::ExpandNeedsJson
    );

    assert!(matches!(
        bad(DebeziumOptions {
            additional_placement: "ver:envelope".into(),
            ..DebeziumOptions::default()
        }),
        OptionsError::EnvelopeNeedsJson(_)
    ));
    assert!(matches!(
        bad(DebeziumOptions {
            extended_headers: true,
            ..DebeziumOptions::default()
        }),
        OptionsError::NeedsTopicPrefix(_)
    ));
    // A numeric key under JsonConverter: Debezium writes a base64 decimal the relay does not.
    let cfg = OutboxTable {
        table: "public.ob".into(),
        headers: BTreeMap::new(),
        debezium: Some(json()),
        ..OutboxTable::default()
    };
    let mut cols = COLS.to_vec();
    cols[2].1 = 1700;
    let err = Plan::compile_in(&cfg, &rel(&cols), &PlanEnv::default()).unwrap_err();
    assert!(matches!(err, RouteError::Debezium { .. }), "{err}");
}

#[test]
fn options_parse_under_their_debezium_names() {
    let o: DebeziumOptions = serde_json::from_str(
        r#"{"key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "JsonConverter", "value.converter.schemas.enable": false,
            "header.converter": "org.apache.kafka.connect.json.JsonConverter"}"#,
    )
    .unwrap();
    assert_eq!(
        (
            o.key_converter,
            o.key_schemas,
            o.value_schemas,
            o.header_converter
        ),
        (Converter::Json, true, false, HeaderConverter::Json)
    );
    assert!(serde_json::from_str::<DebeziumOptions>(r#"{"route.by.fieldz": "x"}"#).is_err());
}

#[test]
fn an_expanded_payload_is_the_struct_and_a_failing_one_is_a_bad_value() {
    let p = plan(DebeziumOptions {
        expand_json_payload: true,
        value_schemas: false,
        ..json()
    });
    let value = |payload: &str| p.route(&row(t(payload)), POS).map(|r| r.value.unwrap());
    assert_eq!(
        value(r#"{"b": 1, "a": [2]}"#).unwrap(),
        r#"{"b":1,"a":[2]}"#
    );
    // Not an object or array: Debezium keeps the JSON string.
    assert_eq!(value("\"s\"").unwrap(), r#""\"s\"""#);
    assert!(matches!(
        value(r#"{"n": 12345678901234567890}"#),
        Err(RouteError::BadValue { ref column, role, .. })
            if column == "payload" && role.contains("expand")
    ));
    let with_schema = plan(DebeziumOptions {
        expand_json_payload: true,
        ..json()
    });
    assert_eq!(
        with_schema
            .route(&row(t("[]")), POS)
            .unwrap()
            .value
            .unwrap(),
        r#"{"schema":null,"payload":"[]"}"#
    );
}

#[test]
fn a_blank_string_payload_is_a_tombstone_as_in_debezium() {
    let p = plan(DebeziumOptions {
        tombstone_on_empty_payload: true,
        ..DebeziumOptions::default()
    });
    assert_eq!(p.route(&row(t(" \t")), POS).unwrap().value, None);
    assert!(p.route(&row(t(" x ")), POS).unwrap().value.is_some());
}

#[test]
fn the_envelope_schema_is_named_after_the_first_routed_value_as_debeziums_cache_does() {
    let p = plan(DebeziumOptions {
        additional_placement: "type:envelope:eventType".into(),
        topic_prefix: Some("p".into()),
        expand_json_payload: true,
        ..json()
    });
    let name = |agg: &str, payload: &str| {
        let mut r = row(t(payload));
        r[1] = t(agg);
        let v = p.route(&r, POS).unwrap().value.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&v).unwrap();
        v["schema"]["name"].as_str().unwrap().to_string()
    };
    assert_eq!(name("order", r#"{"a": 1}"#), "p.public.ob.order.Value");
    // Same payload schema: the cached name, whatever the routed value.
    assert_eq!(name("customer", r#"{"a": 2}"#), "p.public.ob.order.Value");
    // Another inferred schema: built now, with this record's routed value.
    assert_eq!(
        name("customer", r#"{"b": "x"}"#),
        "p.public.ob.customer.Value"
    );
    assert_eq!(name("invoice", "\"s\""), "p.public.ob.invoice.Value");
    assert_eq!(name("order", "\"t\""), "p.public.ob.invoice.Value");
}

#[test]
fn a_payload_schema_other_than_its_versions_first_fails_as_in_debezium() {
    let p = plan(DebeziumOptions {
        additional_placement: "type:envelope:eventType".into(),
        schema_version: Some("ver".into()),
        topic_prefix: Some("p".into()),
        expand_json_payload: true,
        ..json()
    });
    assert!(p.route(&row(t(r#"{"a": 1}"#)), POS).is_ok());
    assert!(p.route(&row(t(r#"{"a": 2}"#)), POS).is_ok());
    assert!(matches!(
        p.route(&row(t(r#"{"b": 1}"#)), POS),
        Err(RouteError::BadValue { .. })
    ));
}

#[test]
fn a_missing_placed_column_is_left_out_under_ignore() {
    let opts = |missing| DebeziumOptions {
        additional_placement: "nope:header,type:header:eventType,gone:envelope".into(),
        additional_missing: missing,
        topic_prefix: Some("p".into()),
        ..json()
    };
    let cfg = |missing| OutboxTable {
        table: "public.ob".into(),
        debezium: Some(opts(missing)),
        ..OutboxTable::default()
    };
    let env = PlanEnv::default();
    assert!(Plan::compile_in(&cfg(AdditionalMissing::Error), &rel(&COLS), &env).is_err());
    let p = Plan::compile_in(&cfg(AdditionalMissing::Ignore), &rel(&COLS), &env).unwrap();
    let rec = p.route(&row(t("{}")), POS).unwrap();
    let names: Vec<&str> = rec.headers.iter().map(|(n, _)| &**n).collect();
    // The table's own `id` and `eventType` headers, then the placed one; `nope` left out.
    assert_eq!(names, ["id", "eventType", "eventType"]);
    let maps = |m| cfg(m).mapped_columns().iter().any(|(c, _)| c == "nope");
    assert!(maps(AdditionalMissing::Error));
    assert!(!maps(AdditionalMissing::Ignore));
}
