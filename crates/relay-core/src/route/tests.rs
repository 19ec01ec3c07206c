use std::collections::BTreeMap;

use super::*;
use crate::pgoutput::Column;

fn rel(cols: &[&str]) -> Relation {
    Relation {
        oid: 1,
        namespace: "public".into(),
        name: "outbox".into(),
        columns: cols
            .iter()
            .map(|c| Column {
                name: c.to_string(),
                type_oid: 25,
            })
            .collect(),
    }
}
fn t(s: &str) -> Value {
    Value::Text(Bytes::copy_from_slice(s.as_bytes()))
}
const POS: Position = Position {
    commit_lsn: Lsn(0x10),
    commit_time_unix_us: 5,
    seq: 2,
};

#[test]
fn debezium_defaults_route_by_aggregate_type() {
    let r = rel(&["id", "aggregatetype", "aggregateid", "type", "payload"]);
    let plan = Plan::compile(&OutboxTable::default(), &r, false).unwrap();
    let rec = plan
        .route(
            &[
                t("e-1"),
                t("order"),
                t("o-7"),
                t("OrderCreated"),
                t("{\"a\": 1}"),
            ],
            POS,
        )
        .unwrap();
    assert_eq!(rec.topic, "outbox.event.order");
    assert_eq!(rec.key, "o-7");
    assert_eq!(rec.value.as_deref(), Some(&b"{\"a\": 1}"[..]));
    assert_eq!(
        rec.headers,
        vec![
            ("eventType".into(), Some(Bytes::from("OrderCreated"))),
            ("id".into(), Some(Bytes::from("e-1"))),
        ]
    );
}

#[test]
fn seed_layout_takes_the_topic_from_a_column_and_adds_relay_headers() {
    let cfg = OutboxTable {
        topic: "{topic}".into(),
        key_column: "aggregate_id".into(),
        headers: BTreeMap::from([("eventType".into(), "event_type".into())]),
        ..OutboxTable::default()
    };
    let r = rel(&["id", "aggregate_id", "topic", "event_type", "payload"]);
    let plan = Plan::compile(&cfg, &r, true).unwrap();
    let rec = plan.route(
        &[t("1"), t("a-1"), t("payments"), t("Paid"), Value::Null],
        POS,
    );
    let rec = rec.unwrap();
    assert_eq!(rec.topic, "payments");
    assert_eq!(rec.key, "a-1");
    assert_eq!(rec.value, None);
    assert_eq!(
        rec.headers[1],
        (HEADER_COMMIT_LSN.into(), Some(Bytes::from("0/10")))
    );
    assert_eq!(
        rec.headers[2],
        (HEADER_COMMIT_TIME.into(), Some(Bytes::from("5")))
    );
    assert_eq!(rec.headers[3], (HEADER_SEQ.into(), Some(Bytes::from("2"))));
}

#[test]
fn columns_are_found_by_name_whatever_their_position() {
    let r = rel(&[
        "payload",
        "extra",
        "type",
        "aggregateid",
        "aggregatetype",
        "id",
    ]);
    let plan = Plan::compile(
        &OutboxTable {
            topic: "fixed".into(),
            ..Default::default()
        },
        &r,
        false,
    )
    .unwrap();
    let rec = plan
        .route(&[t("p"), t("x"), t("T"), t("k"), t("agg"), t("i")], POS)
        .unwrap();
    assert_eq!(
        (rec.topic.as_str(), &rec.key[..], rec.value.as_deref()),
        ("fixed", &b"k"[..], Some(&b"p"[..]))
    );
}

#[test]
fn a_missing_column_names_the_table_the_column_and_its_role() {
    let err = Plan::compile(&OutboxTable::default(), &rel(&["id", "payload"]), false);
    let msg = err.unwrap_err().to_string();
    assert!(
        msg.contains("public.outbox") && msg.contains("aggregatetype"),
        "{msg}"
    );
}

#[test]
fn null_key_bad_topic_and_toast_are_errors_not_skips() {
    let r = rel(&["id", "aggregatetype", "aggregateid", "type", "payload"]);
    let plan = Plan::compile(&OutboxTable::default(), &r, false).unwrap();
    let row = |agg_type: Value, key: Value| vec![t("1"), agg_type, key, t("T"), t("{}")];
    assert!(matches!(
        plan.route(&row(t("o"), Value::Null), POS),
        Err(RouteError::Null { .. })
    ));
    assert!(matches!(
        plan.route(&row(Value::Null, t("k")), POS),
        Err(RouteError::Null { .. })
    ));
    assert!(matches!(
        plan.route(&row(t("bad topic!"), t("k")), POS),
        Err(RouteError::InvalidTopic { .. })
    ));
    assert!(matches!(
        plan.route(&row(t("o"), Value::UnchangedToast), POS),
        Err(RouteError::UnchangedToast { .. })
    ));
    assert!(matches!(
        plan.route(&[t("1")], POS),
        Err(RouteError::Arity { .. })
    ));
}

#[test]
fn templates_are_validated() {
    assert!(parse_template("a{b}c").is_ok());
    for bad in ["", "a{b", "a}b", "{}", "{a{b}}"] {
        assert!(parse_template(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(
        OutboxTable {
            table: "a.b.c".into(),
            ..Default::default()
        }
        .validate(),
        Err(ConfigError::BadTableName("a.b.c".into()))
    );
}

#[test]
fn kafka_topic_names() {
    assert!(valid_topic("outbox.event.order-v1_x"));
    assert!(
        !valid_topic("a b")
            && !valid_topic("")
            && !valid_topic("..")
            && !valid_topic(&"a".repeat(250))
    );
}

/// PostgreSQL 18 publishes stored generated columns only with `publish_generated_columns =
/// stored`: the same row then arrives with or without them. Without an `id` header the
/// checkpoint identifies a row by a hash of its values, which must not change with that
/// option (a changed fingerprint is a changed history: the relay would refuse to start). A
/// generated column may still be mapped (here: the key).
#[test]
fn a_row_fingerprint_leaves_out_generated_columns() {
    let cfg = OutboxTable {
        topic: "orders".into(),
        key_column: "agg_key".into(),
        headers: BTreeMap::new(),
        ..OutboxTable::default()
    };
    let env = PlanEnv {
        generated: vec!["agg_key".into(), "extra".into()],
        ..PlanEnv::default()
    };
    let with = rel(&["aggregateid", "payload", "agg_key", "extra"]);
    let plan = Plan::compile_in(&cfg, &with, &env).unwrap();
    let row = [t("O-7"), t("{}"), t("o-7"), t("x")];
    assert_eq!(plan.route(&row, POS).unwrap().key, "o-7");
    let published = plan.fingerprint(&row);

    // The same row from a publication without generated columns (the key mapped elsewhere).
    let cfg_plain = OutboxTable {
        key_column: "aggregateid".into(),
        ..cfg.clone()
    };
    let without = rel(&["aggregateid", "payload"]);
    let plain = Plan::compile_in(&cfg_plain, &without, &env).unwrap();
    assert_eq!(plain.fingerprint(&[t("O-7"), t("{}")]), published);
    // Without the generated columns known, the hash covers them and differs.
    let blind = Plan::compile(&cfg, &with, false).unwrap();
    assert_ne!(blind.fingerprint(&row), published);
    // A different non-generated value is a different row.
    assert_ne!(
        plan.fingerprint(&[t("O-8"), t("{}"), t("o-8"), t("x")]),
        published
    );
}
