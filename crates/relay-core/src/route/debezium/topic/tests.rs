use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::{
    Lsn,
    pgoutput::{Relation, Value},
    route::{ConfigError, OptionsError, OutboxTable, Plan, PlanEnv, Position, RouteError, connect},
};

fn routed(regex: &str, replacement: &str, value: &str) -> String {
    TopicRouter::compile(regex, replacement)
        .unwrap_or_else(|e| panic!("{e}"))
        .route(value.to_string())
}

fn refusal(regex: &str, replacement: &str) -> String {
    TopicRouter::compile(regex, replacement)
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn routes_as_kafka_connects_regex_router_does() {
    // (regex, replacement, value, topic): each topic is what Kafka Connect 4.3.1's RegexRouter
    // returned on Java 17 for the same three strings.
    let cases = [
        // Debezium's defaults.
        (
            "(?<routedByValue>.*)",
            "outbox.event.${routedByValue}",
            "order",
            "outbox.event.order",
        ),
        (
            "(?<routedByValue>.*)",
            "outbox.event.${routedByValue}",
            "",
            "outbox.event.",
        ),
        (
            "(?<routedByValue>.*)",
            "outbox.event.${routedByValue}",
            "é",
            "outbox.event.é",
        ),
        // `.` stops at Java's line terminators: no whole match, the value itself.
        (
            "(?<routedByValue>.*)",
            "outbox.event.${routedByValue}",
            "a\n",
            "a\n",
        ),
        (
            "(?<routedByValue>.*)",
            "outbox.event.${routedByValue}",
            "a\rb",
            "a\rb",
        ),
        (".*", "fixed", "a\u{85}", "a\u{85}"),
        (".*", "fixed", "a\u{2028}", "a\u{2028}"),
        // Kafka's config parser trims both strings.
        (
            " (?<routedByValue>.*) ",
            " outbox.event.${routedByValue} ",
            "j",
            "outbox.event.j",
        ),
        // replaceFirst searches again and replaces the first match only.
        ("(a*?)", "x$1", "aaa", "xaaa"),
        ("a|ab", "X", "ab", "Xb"),
        ("a.*?", "$0!", "aaa", "a!aa"),
        (".{2,3}", "$0.x", "abcd", "abcd"),
        (".{2,3}", "$0.x", "abc", "abc.x"),
        // Group references: greedy digits while the group exists, unmatched groups empty.
        ("(a)", "$12", "a", "a2"),
        (
            "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)",
            "$11$10$1",
            "abcdefghijk",
            "kja",
        ),
        ("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)", "$11", "abcdefghij", "a1"),
        ("(a)(b)?", "$2-$1", "a", "-a"),
        ("(?<x>a)(?<y>b)?", "${y}${x}", "ab", "ba"),
        ("(?<a>x)|(?<b>a)", "${a}${b}", "a", "a"),
        ("x(\\d+)?|(.*)", "t.$1$2", "x12", "t.12"),
        ("x(\\d+)?|(.*)", "t.$1$2", "y", "t.y"),
        ("((a)|b)*", "[$1][$2]", "ab", "[b][a]"),
        // Replacement escapes.
        ("(a)", "\\$1", "a", "$1"),
        ("(a)", "a\\\\b", "a", "a\\b"),
        // \d \w \s are ASCII in Java.
        ("\\d+", "n$0", "\u{663}", "\u{663}"),
        ("\\w+", "<$0>", "aé", "aé"),
        ("\\w+", "n$0", "\u{212a}", "\u{212a}"),
        ("\\w+", "<$0>", "a_b", "<a_b>"),
        ("\\s*a\\s*", "s$0", " a", "s a"),
        ("\\s*a\\s*", "s$0", "a\u{2028}", "a\u{2028}"),
        // Literals the regex crate would read otherwise (\< is a word boundary there).
        ("\\<a\\>", "X", "<a>", "X"),
        ("a#", "X", "a#", "X"),
        ("a b", "X", "a b", "X"),
        ("[a&b]+", "X", "a&b", "X"),
        ("[a~~b]+", "X", "a~b", "X"),
        // Classes.
        ("[]a]+", "B", "a", "B"),
        ("[a-b-c]+", "R", "a-b", "R"),
        ("[\\d-z]+", "R", "-", "R"),
        ("[\\d-z]+", "R", "x1", "x1"),
        ("[^\\D]+", "R", "123", "R"),
        ("[^\\D]+", "R", "a", "a"),
        ("[^.]+", "X", "a.b", "a.b"),
        ("\\x{1F600}", "E", "😀", "E"),
        ("\\u0061", "U", "a", "U"),
        // A realistic one.
        (
            "(?<kind>[a-z]+)\\.(?<v>v[0-9]+)",
            "${kind}-events.${v}",
            "order.v2",
            "order-events.v2",
        ),
        (
            "(?<kind>[a-z]+)\\.(?<v>v[0-9]+)",
            "${kind}-events.${v}",
            "Order.v2",
            "Order.v2",
        ),
    ];
    for (regex, replacement, value, topic) in cases {
        assert_eq!(
            routed(regex, replacement, value),
            topic,
            "{regex:?} / {replacement:?} on {value:?}"
        );
    }
}

#[test]
fn java_constructs_the_relay_cannot_reproduce_are_refused_by_name() {
    for (regex, says) in [
        ("(?=a)a", "lookahead"),
        ("(?!b)a", "lookahead"),
        ("(?<=a)b", "lookbehind"),
        ("(?<!a)b", "lookbehind"),
        ("(a)\\1", "backreference"),
        ("(?<n>a)\\k<n>", "backreference"),
        ("a*+", "possessive"),
        ("a{1,2}+", "possessive"),
        ("(?>a)", "atomic"),
        ("(?i)a", "inline flags"),
        ("(?s:a.)", "inline flags"),
        ("a$", "`$`"),
        ("\\ba", "\\b"),
        ("\\p{Lower}", "\\p"),
        ("\\Qa.b\\E", "\\Q"),
        ("\\01", "\\0"),
        ("[a[b]]", "nested"),
        ("[a&&b]", "intersection"),
        ("(a|)*", "empty string"),
        ("(?:[ab]+|\\w??)+", "empty string"),
        ("a**", "after another quantifier"),
        ("*a", "nothing before it"),
        ("a{", "repetition"),
        ("(?<_a>a)", "group name"),
        ("(?P<a>a)", "inline flags"),
        ("\\", "escapes nothing"),
        ("[b-a]", "backwards"),
        ("\\uD800", "surrogate"),
        ("\\x+1", "malformed"),
        ("\\x{}", "malformed"),
    ] {
        let e = refusal(regex, "x");
        assert!(
            e.starts_with("debezium.\"route.topic.regex\"") && e.contains(says),
            "{regex:?}: {e}"
        );
    }
    // Left to the regex crate's parser, still named.
    assert!(refusal("(a", "x").starts_with("debezium.\"route.topic.regex\" = \"(a\""));
}

#[test]
fn bad_replacements_are_refused() {
    for (replacement, says) in [
        ("x$", "a `$` that is not followed"),
        ("$x", "a `$` that is not followed"),
        ("${nope}", "no group named \"nope\""),
        ("${}", "is not a group reference"),
        ("${t", "is not a group reference"),
        ("$2", "the regex has 1 group(s)"),
        ("x\\", "escapes nothing"),
    ] {
        let e = refusal("(?<t>a)", replacement);
        assert!(
            e.starts_with("debezium.\"route.topic.replacement\"") && e.contains(says),
            "{replacement:?}: {e}"
        );
    }
}

/// A value without Java's line terminators (which `.` does not match).
fn one_line() -> impl Strategy<Value = String> {
    "[^\n\r\u{85}\u{2028}\u{2029}]{0,40}"
}

proptest! {
    #[test]
    fn the_default_regex_and_replacement_are_outbox_event_dot_the_value(v in one_line()) {
        let r = DebeziumOptions { route_by_field: Some("t".into()), ..DebeziumOptions::default() }
            .topic_router()
            .unwrap()
            .unwrap();
        prop_assert_eq!(r.route(v.clone()), format!("outbox.event.{v}"));
    }

    #[test]
    fn a_replacement_without_dollar_or_backslash_is_literal(
        v in one_line(),
        replacement in "[^$\\\\\u{0}-\u{20}][^$\\\\]{0,20}[^$\\\\\u{0}-\u{20}]",
    ) {
        prop_assert_eq!(routed(".*", &replacement, &v), replacement);
    }

    #[test]
    fn an_escaped_value_is_a_regex_matching_only_itself(v in "\\PC{1,20}") {
        // Java: a backslash before a non-alphanumeric character is that character.
        let java: String = v
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || !c.is_ascii() { c.to_string() } else { format!("\\{c}") })
            .collect();
        prop_assume!(java.trim_matches(|c| c <= ' ') == java);
        prop_assert_eq!(routed(&java, "hit", &v), "hit");
        prop_assert_eq!(routed(&java, "hit", &format!("{v}x")), format!("{v}x"));
    }
}

// The plan: route.by.field routes, the envelope schema keeps the raw value.

const POS: Position = Position {
    commit_lsn: Lsn(0x10),
    commit_time_unix_us: 5,
    seq: 2,
};

fn rel() -> Relation {
    crate::route::debezium::tests::rel(&[
        ("id", connect::oid::UUID),
        ("aggregatetype", connect::oid::VARCHAR),
        ("aggregateid", connect::oid::VARCHAR),
        ("kind", connect::oid::VARCHAR),
        ("payload", connect::oid::JSONB),
    ])
}

fn table(opts: DebeziumOptions) -> OutboxTable {
    OutboxTable {
        table: "public.ob".into(),
        headers: BTreeMap::from([("id".into(), "id".into())]),
        debezium: Some(opts),
        ..OutboxTable::default()
    }
}

fn row(kind: Option<&str>) -> Vec<Value> {
    let t = |s: &str| Value::Text(Bytes::copy_from_slice(s.as_bytes()));
    vec![
        t("00000000-0000-0000-0000-000000000005"),
        t("order"),
        t("agg-2"),
        kind.map_or(Value::Null, t),
        t("{}"),
    ]
}

fn by_kind(regex: &str, replacement: &str) -> DebeziumOptions {
    DebeziumOptions {
        route_by_field: Some("kind".into()),
        route_topic_regex: Some(regex.into()),
        route_topic_replacement: Some(replacement.into()),
        ..DebeziumOptions::default()
    }
}

fn plan(cfg: &OutboxTable) -> Plan {
    cfg.validate().unwrap();
    Plan::compile_in(cfg, &rel(), &PlanEnv::default()).unwrap()
}

#[test]
fn route_by_field_routes_and_the_envelope_schema_keeps_the_raw_value() {
    let cfg = table(DebeziumOptions {
        value_converter: connect::Converter::Json,
        additional_placement: "aggregateid:envelope".into(),
        topic_prefix: Some("dbserver1".into()),
        ..by_kind("(?<k>[a-z]+)Created", "events.${k}")
    });
    assert!(
        cfg.mapped_columns()
            .contains(&("kind".into(), "[outbox.debezium] \"route.by.field\"".into()))
    );
    assert!(
        !cfg.mapped_columns()
            .iter()
            .any(|(c, _)| c == "aggregatetype")
    );
    let p = plan(&cfg);
    let rec = p.route(&row(Some("orderCreated")), POS).unwrap();
    assert_eq!(rec.topic, "events.order");
    let value = String::from_utf8(rec.value.unwrap().to_vec()).unwrap();
    assert!(
        value.contains(r#""name":"dbserver1.public.ob.orderCreated.Value""#),
        "{value}"
    );
    // No whole match: the value itself is the topic.
    assert_eq!(
        p.route(&row(Some("shipped")), POS).unwrap().topic,
        "shipped"
    );
}

#[test]
fn a_null_missing_or_unroutable_value_takes_the_existing_error_paths() {
    let p = plan(&table(by_kind(".*", "x.$0")));
    let role = "[outbox.debezium] \"route.by.field\"";
    assert!(matches!(
        p.route(&row(None), POS),
        Err(RouteError::Null { column, role: r, .. }) if column == "kind" && r == role
    ));
    assert!(matches!(
        p.route(&row(Some("a b")), POS),
        Err(RouteError::InvalidTopic { topic, .. }) if topic == "x.a b"
    ));
    let missing = table(DebeziumOptions {
        route_by_field: Some("nope".into()),
        ..DebeziumOptions::default()
    });
    assert!(matches!(
        Plan::compile_in(&missing, &rel(), &PlanEnv::default()),
        Err(RouteError::MissingColumn { column, role: r, .. }) if column == "nope" && r == role
    ));
}

#[test]
fn without_route_keys_the_template_routes_and_with_them_it_must_stay_default() {
    let mut cfg = table(DebeziumOptions::default());
    cfg.topic = "fixed.{aggregatetype}".into();
    cfg.validate().unwrap();
    let p = Plan::compile_in(&cfg, &rel(), &PlanEnv::default()).unwrap();
    assert_eq!(p.route(&row(Some("k")), POS).unwrap().topic, "fixed.order");
    // Only the replacement set: route.by.field and the regex take Debezium's defaults.
    cfg.debezium = Some(DebeziumOptions {
        route_topic_replacement: Some("t.${routedByValue}".into()),
        ..DebeziumOptions::default()
    });
    assert_eq!(
        cfg.validate(),
        Err(ConfigError::TopicAndRoute("fixed.{aggregatetype}".into()))
    );
    cfg.topic = OutboxTable::default().topic;
    assert_eq!(
        plan(&cfg).route(&row(Some("k")), POS).unwrap().topic,
        "t.order"
    );
}

#[test]
fn config_load_refuses_bad_route_options() {
    let bad = |o: DebeziumOptions| match table(o).validate() {
        Err(ConfigError::Debezium(OptionsError::Topic(e))) => e,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        bad(by_kind("(?<t>a)", "${u}")),
        TopicError::Replacement { .. }
    ));
    assert!(matches!(
        bad(by_kind("(?=a).*", "x")),
        TopicError::Regex { detail, .. } if detail.contains("lookahead")
    ));
    assert_eq!(
        bad(DebeziumOptions {
            route_by_field: Some(String::new()),
            ..DebeziumOptions::default()
        }),
        TopicError::EmptyRouteByField
    );
}

#[test]
fn the_options_parse_under_debeziums_names() {
    let o: DebeziumOptions = serde_json::from_str(
        r#"{"route.by.field": "kind", "route.topic.regex": "(?<t>.*)",
            "route.topic.replacement": "a.${t}"}"#,
    )
    .unwrap();
    assert_eq!(o, by_kind("(?<t>.*)", "a.${t}"));
    assert_eq!(DebeziumOptions::default().route_by_field(), None);
}
