use proptest::prelude::*;

use super::*;

fn s(kind: ConnectType, optional: bool, name: Option<&'static str>) -> ColumnSchema {
    ColumnSchema {
        kind,
        optional,
        name,
    }
}

#[test]
fn json_strings_escape_as_kafka_connects_jackson_does() {
    // Bytes read off Debezium 3.6.1 + JsonConverter (rows 2 and 12 of the side-by-side test).
    let mut out = String::new();
    write_json_string(&mut out, "q\"uo\\te é 😀");
    assert_eq!(out, r#""q\"uo\\te é \uD83D\uDE00""#);
    out.clear();
    write_json_string(
        &mut out,
        "tab\tnl\nbs\u{8}ff\u{c}cr\r\u{1}\u{1f}\u{7f} slash/ <>&\u{2028}",
    );
    assert_eq!(
        out,
        "\"tab\\tnl\\nbs\\bff\\fcr\\r\\u0001\\u001F\u{7f} slash/ <>&\u{2028}\""
    );
}

#[test]
fn converters_encode_as_debezium_does() {
    let key = s(ConnectType::String, false, None);
    let k = Bytes::from("agg-2");
    assert_eq!(
        encode(Converter::String, true, &key, Some(&k)).unwrap(),
        "agg-2"
    );
    assert_eq!(
        encode(Converter::Json, false, &key, Some(&k)).unwrap(),
        "\"agg-2\""
    );
    assert_eq!(
        encode(Converter::Json, true, &key, Some(&k)).unwrap(),
        r#"{"schema":{"type":"string","optional":false},"payload":"agg-2"}"#
    );
    let json = ColumnSchema::of(oid::JSONB, false).unwrap();
    let json = ColumnSchema {
        optional: true,
        ..json
    };
    assert_eq!(
        encode(Converter::Json, true, &json, None).unwrap(),
        r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}"#
    );
    assert_eq!(encode(Converter::Json, false, &json, None).unwrap(), "null");
    assert_eq!(encode(Converter::String, false, &json, None), None);
    let bytes = ColumnSchema::of(oid::BYTEA, true).unwrap();
    let raw = raw_bytes(ConnectType::Bytes, &Bytes::from("\\x00ff10")).unwrap();
    assert_eq!(&raw[..], &[0, 0xff, 0x10]);
    assert_eq!(
        encode(Converter::Json, true, &bytes, Some(&raw)).unwrap(),
        r#"{"schema":{"type":"bytes","optional":false},"payload":"AP8Q"}"#
    );
    assert_eq!(
        encode(Converter::ByteArray, false, &bytes, Some(&raw)).unwrap(),
        raw
    );
    let int = ColumnSchema::of(oid::INT4, false).unwrap();
    assert_eq!(
        encode_header(
            HeaderConverter::Json,
            true,
            &ColumnSchema {
                optional: true,
                ..int
            },
            Some(&Bytes::from("2"))
        )
        .unwrap(),
        r#"{"schema":{"type":"int32","optional":true},"payload":2}"#
    );
    let uuid = ColumnSchema::of(oid::UUID, true).unwrap();
    assert_eq!(
        uuid.json(),
        r#"{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1}"#
    );
}

#[test]
fn what_debezium_fails_on_or_garbles_is_refused() {
    let bytes = ColumnSchema::of(oid::BYTEA, false).unwrap();
    let text = ColumnSchema::of(oid::TEXT, false).unwrap();
    assert!(Converter::ByteArray.check(&text, "the key").is_err());
    assert!(Converter::String.check(&bytes, "the payload").is_err());
    assert!(Converter::ByteArray.check(&bytes, "the payload").is_ok());
    assert!(ColumnSchema::of(1700, false).is_none(), "numeric");
    assert_eq!(raw_bytes(ConnectType::Bytes, &Bytes::from("\\x0")), None);
    assert_eq!(raw_bytes(ConnectType::Bytes, &Bytes::from("00")), None);
}

#[test]
fn span_context_properties() {
    let p = "traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n# c\ntracestate : rojo=00f067aa0ba902b7\\,x";
    let tp = property(p, "traceparent").unwrap();
    assert!(valid_traceparent(&tp), "{tp}");
    assert_eq!(
        property(p, "tracestate").unwrap(),
        "rojo=00f067aa0ba902b7,x"
    );
    assert_eq!(property(p, "nope"), None);
    assert!(!valid_traceparent(
        "00-00000000000000000000000000000000-b7ad6b7169203331-01"
    ));
    assert!(!valid_traceparent(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01"
    ));
}

proptest! {
    #[test]
    fn json_strings_round_trip_through_a_json_parser(s in any::<String>()) {
        let mut out = String::new();
        write_json_string(&mut out, &s);
        let back: String = serde_json::from_str(&out).unwrap();
        prop_assert_eq!(back, s);
    }

    #[test]
    fn bytea_hex_decodes_to_the_bytes(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let raw = raw_bytes(ConnectType::Bytes, &Bytes::from(format!("\\x{hex}"))).unwrap();
        prop_assert_eq!(&raw[..], &b[..]);
    }
}
