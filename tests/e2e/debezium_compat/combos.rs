//! The combinations Debezium and the relay are compared in: each converter / router combination
//! with its options written once, as the relay's `[outbox.debezium]` spells them (converters by
//! class name or the short name [`class`] expands); the payloads every table gets; and the names
//! both sides derive from a combination (its tables, each side's topic prefix).

pub(super) const S: &str = "org.apache.kafka.connect.storage.StringConverter";
const J: &str = "org.apache.kafka.connect.json.JsonConverter";
const B: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";

/// One converter / router combination. Its options are written once, as the relay's
/// `[outbox.debezium]` spells them; [`super::sides::connector_properties`] gives the connector
/// the same ones (converters by class name, `table.*` and `route.*` under `transforms.outbox.`).
pub(super) struct Combo {
    pub(super) name: &'static str,
    /// Payload column types: j = jsonb, t = text, b = bytea (one table each).
    pub(super) types: &'static str,
    /// The options beyond `"extended.headers.enabled" = true` (Debezium's default); `<topic>`
    /// stands for the side's topic prefix, `<db>.dbz.<name>` or `<db>.rly.<name>`.
    pub(super) opts: &'static [(&'static str, &'static str)],
    /// The relay's plain path: no `[outbox.debezium]` table. `opts` go to the connector only,
    /// which writes no extended headers either.
    pub(super) plain: bool,
    /// The record timestamp comes from the `ts` column.
    pub(super) timestamp: bool,
}

const fn combo(
    name: &'static str,
    types: &'static str,
    opts: &'static [(&'static str, &'static str)],
) -> Combo {
    Combo {
        name,
        types,
        opts,
        plain: false,
        timestamp: false,
    }
}

const ENVELOPE: &[(&str, &str)] = &[
    ("key.converter", "JsonConverter"),
    ("value.converter", "JsonConverter"),
    (
        "table.fields.additional.placement",
        "ver:envelope,type:header:eventType,n:partition",
    ),
    ("table.field.event.schema.version", "n"),
    ("route.tombstone.on.empty.payload", "true"),
];

pub(super) const COMBOS: &[Combo] = &[
    Combo {
        plain: true,
        ..combo(
            "plain",
            "jt",
            &[("table.fields.additional.placement", "type:header:eventType")],
        )
    },
    Combo {
        timestamp: true,
        ..combo(
            "str",
            "jt",
            &[
                ("table.fields.additional.placement", "type:header:eventType"),
                ("table.field.event.timestamp", "ts"),
            ],
        )
    },
    combo(
        "jsoff",
        "jtb",
        &[
            ("key.converter", J),
            ("key.converter.schemas.enable", "false"),
            ("value.converter", J),
            ("value.converter.schemas.enable", "false"),
        ],
    ),
    combo(
        "json",
        "jtb",
        &[("key.converter", J), ("value.converter", J)],
    ),
    Combo {
        timestamp: true,
        ..combo(
            "bytes",
            "b",
            &[
                ("value.converter", "ByteArrayConverter"),
                ("header.converter", J),
                (
                    "table.fields.additional.placement",
                    "type:header:eventType,n:header,ver:header",
                ),
                ("table.field.event.timestamp", "ts"),
            ],
        )
    },
    // Debezium caches the envelope's value schema by schema version alone, across tables: a
    // connector reading a jsonb and a text outbox gives the second the first's schema (name
    // and payload type). One table per connector here; the guide lists the quirk.
    combo("env", "j", ENVELOPE),
    combo("envt", "t", ENVELOPE),
    combo(
        "envoff",
        "jtb",
        &[
            ("key.converter", "JsonConverter"),
            ("value.converter", "JsonConverter"),
            ("value.converter.schemas.enable", "false"),
            ("table.fields.additional.placement", "ver:envelope:v"),
        ],
    ),
    // Expanded payloads: the struct Debezium infers from the JSON (a bytea payload is not
    // expanded, on both sides).
    combo(
        "expoff",
        "jtb",
        &[
            ("key.converter", "JsonConverter"),
            ("key.converter.schemas.enable", "false"),
            ("value.converter", "JsonConverter"),
            ("value.converter.schemas.enable", "false"),
            ("table.expand.json.payload", "true"),
        ],
    ),
    combo(
        "exp",
        "jt",
        &[
            ("key.converter", "JsonConverter"),
            ("value.converter", "JsonConverter"),
            ("table.expand.json.payload", "true"),
            ("table.json.payload.null.behavior", "optional_bytes"),
        ],
    ),
    // route.topic.regex + route.topic.replacement (the relay's `topic` is left unset): the
    // topic from a named group, while the envelope schema's name keeps the raw aggregatetype.
    combo(
        "regex",
        "j",
        &[
            ("key.converter", "JsonConverter"),
            ("value.converter", "JsonConverter"),
            ("table.fields.additional.placement", "ver:envelope"),
            ("route.topic.regex", "(?<t>[a-z])"),
            ("route.topic.replacement", "<topic>.${t}"),
        ],
    ),
    // Several aggregate types in one table with an envelope under schemas: the value schema's
    // name carries the routed value.
    combo(
        "mixenv",
        "jt",
        &[
            ("key.converter", "JsonConverter"),
            ("value.converter", "JsonConverter"),
            (
                "table.fields.additional.placement",
                "type:envelope:eventType",
            ),
            ("route.topic.regex", "(?<t>[a-z])-[0-9]"),
            ("route.topic.replacement", "<topic>.${t}"),
        ],
    ),
    // The same with expanded payloads: the cache is per payload schema. One table: Debezium's
    // cache is the connector's, so a second table would get the first one's names (the guide
    // lists the quirk).
    combo(
        "mixexp",
        "j",
        &[
            ("key.converter", "JsonConverter"),
            ("value.converter", "JsonConverter"),
            ("table.expand.json.payload", "true"),
            (
                "table.fields.additional.placement",
                "type:envelope:eventType",
            ),
            ("route.topic.regex", "(?<t>[a-z])-[0-9]"),
            ("route.topic.replacement", "<topic>.${t}"),
        ],
    ),
];

/// Payloads as JSON text: objects, nesting, escapes, non-BMP characters, numbers PostgreSQL's
/// jsonb renormalises, scalars, the JSON `null`, and a NULL column (None).
const PAYLOADS: &[Option<&str>] = &[
    Some(r#"{"a": 1, "b": "x"}"#),
    Some(r#"{"nested": {"k": [1, 2.5, -3e2, true, null]}, "s": "q\"uo\\te é \u00e9 😀"}"#),
    None,
    Some(r#"[1, "two", {"three": 3}]"#),
    Some(r#""just a string""#),
    Some("12345678901234567890"),
    Some("{}"),
    Some("null"),
    Some(r#"{"zz": 1, "a": 2, "mm": {"y": 1, "b": 2}}"#),
    Some(r#"{"f": 1.10, "g": 1E+2, "h": 0.000001}"#),
    Some(r#"{"ctl": "tab\tnl\nbs\bff\fcr\r\u0001\u001f\u007f slash/ <>&\u2028"}"#),
    Some(r#"{"long": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#),
    // For the expansion: arrays of objects, empty arrays, nulls, nested arrays, 64-bit integers,
    // a top-level empty array (no schema) and an empty key (Debezium keeps the string).
    Some(
        r#"{"items": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, null], "e": [], "n": null, "deep": [[1, 2], [3]], "big": 9007199254740993, "d": [1.5, 2.25], "neg": -2147483649}"#,
    ),
    Some("[]"),
    Some(r#"{"": 1, "k": {"z": [true, false], "s": "é"}}"#),
];

pub(super) fn table(combo: &Combo, ty: char) -> String {
    format!("{}_{ty}", combo.name)
}

/// The topic prefix of one side (`dbz` or `rly`) of a combination: `<db>.<side>.<name>`.
pub(super) fn topic_prefix(db: &str, side: &str, combo: &Combo) -> String {
    format!("{db}.{side}.{}", combo.name)
}

/// A converter's class, as the relay's `[outbox.debezium]` may shorten it.
pub(super) fn class(v: &str) -> &str {
    match v {
        "StringConverter" => S,
        "JsonConverter" => J,
        "ByteArrayConverter" => B,
        _ => v,
    }
}

/// The payloads a combination's tables get: all of them, except the top-level `[]` where an
/// expanded payload goes into an envelope (its null schema fails Debezium's task there).
pub(super) fn rows_of(combo: &Combo) -> Vec<(usize, Option<&'static str>)> {
    let refused = combo.name == "mixexp";
    PAYLOADS
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, p)| !(refused && *p == Some("[]")))
        .collect()
}
