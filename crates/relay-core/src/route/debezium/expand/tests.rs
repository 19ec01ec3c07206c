use proptest::prelude::*;

use super::*;

fn exp(text: &str) -> Expansion {
    expand(text, "payload", NullBehavior::Ignore)
}

fn encoded(e: Expansion, schemas: bool) -> String {
    match e {
        Expansion::Expanded(i) => String::from_utf8(i.encode(schemas).unwrap().to_vec()).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn expanded(text: &str, schemas: bool) -> String {
    encoded(exp(text), schemas)
}

#[test]
fn an_object_becomes_a_struct_in_document_order() {
    assert_eq!(
        expanded(r#"{"zz": 1, "a": "x", "m": {"y": true, "b": 2.5}}"#, false),
        r#"{"zz":1,"a":"x","m":{"y":true,"b":2.5}}"#
    );
    assert_eq!(
        expanded(r#"{"zz": 1, "m": {"y": true}}"#, true),
        concat!(
            r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"zz"},"#,
            r#"{"type":"struct","fields":[{"type":"boolean","optional":true,"field":"y"}],"#,
            r#""optional":true,"name":"payload.m","field":"m"}],"optional":true,"name":"payload"},"#,
            r#""payload":{"zz":1,"m":{"y":true}}}"#
        )
    );
}

#[test]
fn numbers_are_retyped_as_jackson_reads_them() {
    assert_eq!(
        expanded(
            r#"{"f": 1.10, "g": 1E+2, "h": 0.000001, "i": 9007199254740993, "j": -0}"#,
            true
        ),
        concat!(
            r#"{"schema":{"type":"struct","fields":[{"type":"double","optional":true,"field":"f"},"#,
            r#"{"type":"double","optional":true,"field":"g"},{"type":"double","optional":true,"field":"h"},"#,
            r#"{"type":"int64","optional":true,"field":"i"},{"type":"int32","optional":true,"field":"j"}],"#,
            r#""optional":true,"name":"payload"},"payload":{"f":1.1,"g":100.0,"h":1.0E-6,"#,
            r#""i":9007199254740993,"j":0}}"#
        )
    );
}

#[test]
fn nulls_and_empty_arrays_leave_the_schema_unless_asked() {
    let text = r#"{"n": null, "e": [], "a": [null, 1]}"#;
    assert_eq!(expanded(text, false), r#"{"a":[null,1]}"#);
    assert_eq!(
        encoded(expand(text, "payload", NullBehavior::OptionalBytes), true),
        concat!(
            r#"{"schema":{"type":"struct","fields":[{"type":"bytes","optional":true,"field":"n"},"#,
            r#"{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"a"}],"#,
            r#""optional":true,"name":"payload"},"payload":{"n":null,"a":[null,1]}}"#
        )
    );
}

#[test]
fn arrays_of_objects_share_one_merged_element_schema() {
    assert_eq!(
        expanded(r#"{"items": [{"a": 1}, {"a": 2, "b": "x"}, null]}"#, true),
        concat!(
            r#"{"schema":{"type":"struct","fields":[{"type":"array","items":{"type":"struct","fields":["#,
            r#"{"type":"int32","optional":true,"field":"a"},{"type":"string","optional":true,"field":"b"}],"#,
            r#""optional":true,"name":"payload.items"},"optional":true,"field":"items"}],"#,
            r#""optional":true,"name":"payload"},"payload":{"items":[{"a":1,"b":null},{"a":2,"b":"x"},null]}}"#
        )
    );
}

#[test]
fn where_debezium_keeps_the_string() {
    for text in [
        r#""just a string""#,
        " {\"a\": 1}",
        "12345",
        "null",
        "{\"a\": 1",
        r#"[1, "two"]"#,
        r#"{"k": [1, 2.5]}"#,
        r#"{"k": [true, 1]}"#,
        r#"{"": 1}"#,
        r#"[null]"#,
        r#"{"k": [[], [1]]}"#,
    ] {
        assert_eq!(exp(text), Expansion::Unchanged, "{text}");
    }
}

#[test]
fn where_debezium_fails_its_task() {
    for text in [
        r#"[1, 2]"#,
        r#"[{"a": 1}]"#,
        r#"{"big": 12345678901234567890}"#,
        r#"{"k": [[1], ["x"]]}"#,
        r#"{"k": [{"a": 1}, {"a": "x"}]}"#,
        r#"{"k": [{"a": 1}, {"a": [1]}]}"#,
    ] {
        assert!(matches!(exp(text), Expansion::Fails(_)), "{text}");
    }
    assert_eq!(exp("[]"), Expansion::NullSchema);
}

#[test]
fn a_nested_field_of_a_blank_key_starts_a_new_name() {
    // Inside an array of arrays the element key is null, so a struct there names its children
    // from their own field names.
    assert_eq!(
        expanded(r#"{"k": [[{"x": {"y": 1}}]]}"#, true),
        concat!(
            r#"{"schema":{"type":"struct","fields":[{"type":"array","items":{"type":"array","items":"#,
            r#"{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":true,"field":"y"}],"#,
            r#""optional":true,"name":"x","field":"x"}],"optional":true},"optional":true},"optional":true,"field":"k"}],"#,
            r#""optional":true,"name":"payload"},"payload":{"k":[[{"x":{"y":1}}]]}}"#
        )
    );
}

#[test]
fn strings_are_escaped_as_jackson_writes_them() {
    assert_eq!(
        expanded(r#"{"s": "q\"\\ é 😀 \u0001 \ud800 /"}"#, false),
        r#"{"s":"q\"\\ é \uD83D\uDE00 \u0001 \uD800 /"}"#
    );
}

#[test]
fn deep_schemas_fail_where_jackson_stops_writing() {
    // 600 nested objects: the value is 600 levels deep, its schema (a struct and its fields
    // array per level) 1202.
    let text = format!("{}1{}", r#"{"a":"#.repeat(600), "}".repeat(600));
    let Expansion::Expanded(i) = exp(&text) else {
        panic!("not expanded");
    };
    assert!(i.encode(false).is_ok());
    assert!(i.encode(true).is_err());
}

#[test]
fn java_prints_doubles_this_way() {
    for (d, java) in [
        (1.1, "1.1"),
        (100.0, "100.0"),
        (1e-6, "1.0E-6"),
        (1e7, "1.0E7"),
        (1_234_567.0, "1234567.0"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (12_345_678.9, "1.23456789E7"),
        (-300.0, "-300.0"),
        (-0.0, "-0.0"),
        (9_999_999.999, "9999999.999"),
        (1.797_693_134_862_315_7e308, "1.7976931348623157E308"),
        (0.1 + 0.2, "0.30000000000000004"),
    ] {
        let mut s = String::new();
        java_double(&mut s, d);
        assert_eq!(s, java, "{d:e}");
    }
}

proptest! {
    /// Whatever Java prints reads back as the same double.
    #[test]
    fn java_doubles_read_back(bits in any::<u64>()) {
        let d = f64::from_bits(bits);
        prop_assume!(d.is_finite());
        let mut s = String::new();
        java_double(&mut s, d);
        prop_assert_eq!(s.parse::<f64>().unwrap().to_bits(), d.to_bits());
    }

    /// A flat object of strings and small integers comes out as the same JSON, compact.
    #[test]
    fn flat_objects_come_out_as_they_went_in(
        fields in proptest::collection::btree_map("[a-z]{1,8}", prop_oneof![
            any::<i32>().prop_map(|i| i.to_string()),
            "[a-zA-Z0-9 ]{0,12}".prop_map(|s| format!("\"{s}\"")),
        ], 0..8)
    ) {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        let text = format!("{{{}}}", body.join(", "));
        let compact: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        prop_assert_eq!(expanded(&text, false), format!("{{{}}}", compact.join(",")));
    }
}
