use proptest::prelude::*;

use super::*;
use crate::{
    Lsn,
    route::{HEADER_COMMIT_LSN, HEADER_SEQ},
};

const POS: Position = Position {
    commit_lsn: Lsn(0x20),
    commit_time_unix_us: 7,
    seq: 3,
};

fn outbox() -> MessageRoute {
    toml_route("prefix = \"outbox\"")
}

fn toml_route(s: &str) -> MessageRoute {
    let r: MessageRoute = toml_like(s);
    r.validate().unwrap();
    r
}

/// The routes parse from the config through serde; `prefix = "..."` lines are enough here.
fn toml_like(s: &str) -> MessageRoute {
    let mut m = serde_json::Map::new();
    for line in s.lines() {
        let (k, v) = line.split_once(" = ").unwrap();
        m.insert(k.into(), serde_json::from_str(v).unwrap());
    }
    serde_json::from_value(serde_json::Value::Object(m)).unwrap()
}

fn route(routes: &MessageRoutes, content: &str) -> RoutedMessage {
    routes.route(
        true,
        Lsn(0x18),
        "outbox",
        &Bytes::from(content.to_owned()),
        POS,
    )
}

fn record(m: RoutedMessage) -> Record {
    match m {
        RoutedMessage::Record { record, .. } => record,
        other => panic!("not a record: {other:?}"),
    }
}

fn error(m: RoutedMessage) -> MessageError {
    match m {
        RoutedMessage::Poison(p) => p.error,
        other => panic!("not poison: {other:?}"),
    }
}

const DEBEZIUM: &str = r#"{"id" : "e-1", "aggregatetype" : "order", "aggregateid" : "42", "type" : "OrderCreated", "payload" : {"total" : 10, "x": 1.50}}"#;

#[test]
fn debezium_layout_routes_like_an_outbox_row_and_keeps_the_payload_text_as_emitted() {
    let routes = MessageRoutes::new(&[outbox()], false);
    let m = route(&routes, DEBEZIUM);
    let RoutedMessage::Record {
        record: rec,
        routed,
        fingerprint,
    } = m
    else {
        panic!("{m:?}")
    };
    assert_eq!(&*routed, "message:outbox");
    assert_eq!(fingerprint, Fingerprint::Id(Bytes::from("e-1")));
    assert_eq!(rec.topic, "outbox.event.order");
    assert_eq!(rec.key, "42");
    // Byte for byte, spacing and number spelling included.
    assert_eq!(
        rec.value.as_deref(),
        Some(&br#"{"total" : 10, "x": 1.50}"#[..])
    );
    assert_eq!(
        rec.headers,
        vec![
            ("eventType".into(), Some(Bytes::from("OrderCreated"))),
            ("id".into(), Some(Bytes::from("e-1"))),
        ]
    );
}

#[test]
fn fields_that_are_not_strings_are_their_json_text_and_relay_headers_are_added() {
    let routes = MessageRoutes::new(&[outbox()], true);
    let rec = record(route(
        &routes,
        r#"{"id": 17, "aggregatetype": "order", "aggregateid": 42, "type": null, "payload": "s"}"#,
    ));
    assert_eq!(rec.key, "42");
    assert_eq!(rec.value.as_deref(), Some(&b"\"s\""[..]));
    assert_eq!(rec.headers[0], ("eventType".into(), None));
    assert_eq!(rec.headers[1], ("id".into(), Some(Bytes::from("17"))));
    assert_eq!(
        rec.headers[2],
        (HEADER_COMMIT_LSN.into(), Some(Bytes::from("0/20")))
    );
    assert_eq!(rec.headers[4], (HEADER_SEQ.into(), Some(Bytes::from("3"))));
}

#[test]
fn a_base64_payload_is_the_decoded_bytes_and_a_null_payload_is_no_value() {
    let routes = MessageRoutes::new(&[outbox()], false);
    let base = r#""id": "1", "aggregatetype": "o", "aggregateid": "k", "type": "T""#;
    let rec = record(route(
        &routes,
        &format!(r#"{{{base}, "payload_base64": "AAH/"}}"#),
    ));
    assert_eq!(rec.value.as_deref(), Some(&[0u8, 1, 255][..]));
    let rec = record(route(&routes, &format!(r#"{{{base}, "payload": null}}"#)));
    assert_eq!(rec.value, None);
    for (payload, problem) in [
        (r#""payload_base64": "!!""#, "invalid base64 in"),
        // PostgreSQL's encode(..., 'base64') breaks lines every 76 characters: not base64.
        (r#""payload_base64": "AAH/\nAAH/""#, "invalid base64 in"),
        (r#""payload_base64": 5"#, "a non-string"),
        (r#""payload": 1, "payload_base64": "AA==""#, "a second"),
        (r#""other": 1"#, "no"),
    ] {
        let e = error(route(&routes, &format!("{{{base}, {payload}}}")));
        assert!(
            matches!(&e, MessageError::Field { problem: p, .. } if *p == problem),
            "{payload}: {e}"
        );
    }
}

#[test]
fn bad_content_is_poison_with_a_reason_never_nothing() {
    let routes = MessageRoutes::new(&[outbox()], false);
    for content in ["not json", "[1, 2]", "\"text\"", "{\"id\": "] {
        let e = error(route(&routes, content));
        assert!(matches!(e, MessageError::NotAnObject { .. }), "{content}");
        assert!(e.to_string().contains("\"outbox\""), "{e}");
    }
    let e = error(route(
        &routes,
        r#"{"id": "1", "aggregatetype": "o", "aggregateid": null, "type": "T", "payload": 1}"#,
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("null in field \"aggregateid\"") && msg.contains("the key"),
        "{msg}"
    );
    assert!(msg.contains("committed at 0/20 (position 3)"), "{msg}");
    let e = error(route(
        &routes,
        r#"{"id": "1", "aggregateid": "k", "type": "T", "payload": 1}"#,
    ));
    assert!(e.to_string().contains("no field \"aggregatetype\""), "{e}");
    let e = error(route(
        &routes,
        r#"{"id": "1", "aggregatetype": "a b", "aggregateid": "k", "type": "T", "payload": 1}"#,
    ));
    assert!(matches!(e, MessageError::InvalidTopic { .. }), "{e}");
    // A header's field must be there (null is allowed).
    let e = error(route(
        &routes,
        r#"{"id": "1", "aggregatetype": "a", "aggregateid": "k", "payload": 1}"#,
    ));
    assert!(e.to_string().contains("header \"eventType\""), "{e}");
}

#[test]
fn non_transactional_messages_with_a_configured_prefix_are_poison_others_unrouted() {
    let routes = MessageRoutes::new(&[outbox()], false);
    let content = Bytes::from(DEBEZIUM);
    let m = routes.route(false, Lsn(0x18), "outbox", &content, POS);
    let RoutedMessage::Poison(p) = m else {
        panic!("{m:?}")
    };
    assert!(matches!(p.error, MessageError::NotTransactional { .. }));
    assert!(p.error.to_string().contains("\"outbox\""));
    assert_eq!(p.content, content);
    assert_eq!(&*p.routed, "message:outbox");
    for transactional in [true, false] {
        assert_eq!(
            routes.route(
                transactional,
                Lsn(1),
                "outbox-relay.heartbeat",
                &content,
                POS
            ),
            RoutedMessage::Unrouted
        );
        // Matched exactly, not as a prefix of the prefix.
        assert_eq!(
            routes.route(transactional, Lsn(1), "outbox2", &content, POS),
            RoutedMessage::Unrouted
        );
    }
}

#[test]
fn a_custom_layout_takes_its_fields_by_name() {
    let r = toml_route(
        "prefix = \"pay\"\ntopic = \"{t}\"\nkey_column = \"k\"\npayload_column = \"body\"\nheaders = {\"h\": \"n\"}",
    );
    let routes = MessageRoutes::new(&[r], false);
    let m = routes.route(
        true,
        Lsn(1),
        "pay",
        &Bytes::from(r#"{"n": "x", "body_base64": "aGk=", "k": "key", "t": "payments"}"#),
        POS,
    );
    let RoutedMessage::Record {
        record: rec,
        fingerprint,
        ..
    } = m
    else {
        panic!("{m:?}")
    };
    assert_eq!(
        (rec.topic.as_str(), &rec.key[..], rec.value.as_deref()),
        ("payments", &b"key"[..], Some(&b"hi"[..]))
    );
    assert_eq!(rec.headers, vec![("h".into(), Some(Bytes::from("x")))]);
    // No `id` header: the fingerprint hashes prefix and content.
    assert!(matches!(fingerprint, Fingerprint::Hash(_)));
}

#[test]
fn mappings_are_validated() {
    let mut r = outbox();
    r.prefix.clear();
    assert_eq!(r.validate(), Err(ConfigError::EmptyColumn("prefix")));
    let mut r = outbox();
    r.topic = "a{b".into();
    assert!(matches!(r.validate(), Err(ConfigError::BadTemplate(_))));
    let mut r = outbox();
    r.key_column.clear();
    assert_eq!(r.validate(), Err(ConfigError::EmptyColumn("key_column")));
}

proptest! {
    /// Whatever JSON the payload is, the value is its text as emitted, byte for byte.
    #[test]
    fn the_value_is_the_payload_text_as_emitted(
        payload in prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "[a-z ]{0,12}".prop_map(|s| format!("\"{s}\"")),
            (any::<i32>(), "[a-z]{1,5}", 0usize..3).prop_map(|(n, k, sp)| {
                let sp = " ".repeat(sp);
                format!("{{{sp}\"{k}\"{sp}:{sp}{n}{sp}, \"l\": [1,{sp}2.50e3]}}")
            }),
        ],
        id in "[a-zA-Z0-9-]{1,20}",
    ) {
        let routes = MessageRoutes::new(&[outbox()], false);
        let content = format!(
            r#"{{"id": "{id}", "payload":{payload}, "aggregatetype": "o", "aggregateid": "k", "type": "T"}}"#
        );
        let RoutedMessage::Record { record: rec, fingerprint, .. } = route(&routes, &content) else {
            panic!("not routed: {content}")
        };
        prop_assert_eq!(rec.value.as_deref(), Some(payload.as_bytes()));
        prop_assert_eq!(fingerprint, Fingerprint::Id(Bytes::from(id)));
    }

    /// Arbitrary bytes never panic and never vanish: a record or poison.
    #[test]
    fn any_content_is_a_record_or_poison(content in proptest::collection::vec(any::<u8>(), 0..64)) {
        let routes = MessageRoutes::new(&[outbox()], false);
        let m = routes.route(true, Lsn(1), "outbox", &Bytes::from(content), POS);
        prop_assert!(!matches!(m, RoutedMessage::Unrouted));
    }
}
