//! Side by side with the real thing: Debezium 3.6.1 (Kafka Connect 4.3.1 standalone, the
//! PostgreSQL connector and the Outbox Event Router from Maven, `infra/debezium/`) and
//! outbox-relay read the same rows, and every record is compared by event id: key bytes, value
//! bytes, header names (in order) and bytes, partition, and the timestamp where
//! `table.field.event.timestamp` sets it.
//!
//! One Connect worker runs one connector per combination (own slot, publication, topics), and
//! one relay runs one `[[outbox]]` per combination and payload type; the worker is stopped
//! when the test ends, passed or not.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, Message, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};

use crate::support::{
    TestDb,
    debezium::{Worker, turn},
    kafka_brokers, pg_port,
    relay::Relay,
    repo_root,
};

const REST_PORT: u16 = 28200;
const S: &str = "org.apache.kafka.connect.storage.StringConverter";
const J: &str = "org.apache.kafka.connect.json.JsonConverter";
const B: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";

/// One converter / router combination. Its options are written once, as the relay's
/// `[outbox.debezium]` spells them; [`connector_properties`] gives the connector the same ones
/// (converters by class name, `table.*` and `route.*` under `transforms.outbox.`).
struct Combo {
    name: &'static str,
    /// Payload column types: j = jsonb, t = text, b = bytea (one table each).
    types: &'static str,
    /// The options beyond `"extended.headers.enabled" = true` (Debezium's default); `<topic>`
    /// stands for the side's topic prefix, `<db>.dbz.<name>` or `<db>.rly.<name>`.
    opts: &'static [(&'static str, &'static str)],
    /// The relay's plain path: no `[outbox.debezium]` table. `opts` go to the connector only,
    /// which writes no extended headers either.
    plain: bool,
    /// The record timestamp comes from the `ts` column.
    timestamp: bool,
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

const COMBOS: &[Combo] = &[
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

fn table(combo: &Combo, ty: char) -> String {
    format!("{}_{ty}", combo.name)
}

fn plugins() -> PathBuf {
    repo_root().join("infra/debezium/plugins/debezium-connector-postgres")
}

/// The topic prefix of one side (`dbz` or `rly`) of a combination: `<db>.<side>.<name>`.
fn topic_prefix(db: &str, side: &str, combo: &Combo) -> String {
    format!("{db}.{side}.{}", combo.name)
}

/// A converter's class, as the relay's `[outbox.debezium]` may shorten it.
fn class(v: &str) -> &str {
    match v {
        "StringConverter" => S,
        "JsonConverter" => J,
        "ByteArrayConverter" => B,
        _ => v,
    }
}

/// The connector of one combination: the common properties, String converters unless the
/// combination names others, and its options (`table.*`, `route.*` as the router's).
fn connector_properties(db: &str, combo: &Combo) -> String {
    let tables: Vec<String> = combo
        .types
        .chars()
        .map(|t| format!("public.{}", table(combo, t)))
        .collect();
    let opt = |k: &str| combo.opts.iter().find(|(o, _)| *o == k).map(|(_, v)| *v);
    let mut p = format!(
        "name={db}-{c}\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n\
         tasks.max=1\ndatabase.hostname=127.0.0.1\ndatabase.port={port}\ndatabase.user=postgres\n\
         database.password=postgres\ndatabase.dbname={db}\ntopic.prefix={db}{c}\n\
         plugin.name=pgoutput\nslot.name={db}_{c}\npublication.name={db}_{c}\n\
         publication.autocreate.mode=filtered\ntable.include.list={tables}\n\
         snapshot.mode=no_data\ntombstones.on.delete=false\npoll.interval.ms=50\n\
         message.prefix.exclude.list=.*\n\
         transforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
         transforms.outbox.route.topic.replacement={db}.dbz.{c}.${{routedByValue}}\n\
         transforms.outbox.table.op.invalid.behavior=warn\n\
         key.converter={key}\nvalue.converter={value}\n",
        c = combo.name,
        port = pg_port(),
        tables = tables.join(","),
        key = class(opt("key.converter").unwrap_or(S)),
        value = class(opt("value.converter").unwrap_or(S)),
    );
    if combo.plain {
        p.push_str("extended.headers.enabled=false\n");
    }
    // A combination's keys come later, so they override the common ones.
    let topic = topic_prefix(db, "dbz", combo);
    for (k, v) in combo.opts {
        let v = v.replace("<topic>", &topic);
        match *k {
            "key.converter" | "value.converter" => {}
            "header.converter" => {
                let _ = writeln!(p, "{k}={}", class(&v));
            }
            _ if k.starts_with("table.") || k.starts_with("route.") => {
                let _ = writeln!(p, "transforms.outbox.{k}={v}");
            }
            _ => {
                let _ = writeln!(p, "{k}={v}");
            }
        }
    }
    p
}

fn relay_sections(db: &str) -> String {
    let mut out = String::new();
    for combo in COMBOS {
        let topic = topic_prefix(db, "rly", combo);
        for ty in combo.types.chars() {
            let _ = writeln!(out, "[[outbox]]\ntable = \"public.{}\"", table(combo, ty));
            // With route.topic.* the options route, and `topic` must stay unset.
            if !combo
                .opts
                .iter()
                .any(|(k, _)| k.starts_with("route.topic."))
            {
                let _ = writeln!(out, "topic = \"{topic}.{{aggregatetype}}\"");
            }
            if combo.plain {
                out.push('\n');
                continue;
            }
            let _ = write!(
                out,
                "headers = {{ id = \"id\" }}\n[outbox.debezium]\n\"topic.prefix\" = \"{db}{}\"\n\
                 \"extended.headers.enabled\" = true\n",
                combo.name
            );
            for (k, v) in combo.opts {
                let v = v.replace("<topic>", &topic);
                // TOML: the booleans bare, every other value a string.
                if v == "true" || v == "false" {
                    let _ = writeln!(out, "\"{k}\" = {v}");
                } else {
                    let _ = writeln!(out, "\"{k}\" = \"{v}\"");
                }
            }
            out.push('\n');
        }
    }
    out
}

async fn create_tables(db: &TestDb) {
    let mut sql = String::new();
    for combo in COMBOS {
        for ty in combo.types.chars() {
            let payload = match ty {
                'j' => "jsonb",
                't' => "text",
                _ => "bytea",
            };
            let _ = writeln!(
                sql,
                "CREATE TABLE {} (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
                 aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, \
                 payload {payload}, ts timestamp, tracingspancontext text, ver varchar(10), \
                 n int);",
                table(combo, ty)
            );
        }
    }
    db.client.batch_execute(&sql).await.unwrap();
}

/// The payloads a combination's tables get: all of them, except the top-level `[]` where an
/// expanded payload goes into an envelope (its null schema fails Debezium's task there).
fn rows_of(combo: &Combo) -> Vec<(usize, Option<&'static str>)> {
    let refused = combo.name == "mixexp";
    PAYLOADS
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, p)| !(refused && *p == Some("[]")))
        .collect()
}

async fn insert_rows(db: &TestDb) {
    for combo in COMBOS {
        for ty in combo.types.chars() {
            // `ts` becomes the record timestamp in two combinations, and Kafka's retention
            // (7 days, checked every 5 minutes) deletes older records mid-test: keep it recent.
            let mut sql = format!("INSERT INTO {} VALUES ", table(combo, ty));
            for (n, (i, p)) in rows_of(combo).into_iter().enumerate() {
                let payload = match (p, ty) {
                    (None, _) => "NULL".to_string(),
                    (Some(p), 'b') => format!("convert_to({}, 'UTF8')", quote(p)),
                    (Some(p), _) => quote(p),
                };
                // A `mix…` combination's rows carry three aggregate types (`j-0`, `j-1`, `j-2`)
                // that its route.topic.regex brings back to one topic.
                let aggregate_type = if combo.name.starts_with("mix") {
                    format!("{ty}-{}", i % 3)
                } else {
                    ty.to_string()
                };
                let _ = write!(
                    sql,
                    "{}('00000000-0000-0000-0000-{i:012}', '{aggregate_type}', 'agg-{k}', 'T{i}', {payload}, \
                     date_trunc('second', localtimestamp) - interval '1 hour' \
                     + interval '0.678912 second' + {i} * interval '1.0013 second', \
                     NULL, 'v{i}', {n})",
                    if n == 0 { "" } else { ", " },
                    k = i % 5,
                    n = i % 3,
                );
            }
            db.client.batch_execute(&sql).await.unwrap();
        }
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[derive(Debug, Clone, PartialEq)]
struct Raw {
    partition: i32,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Reads `topics` from the beginning until `want` records are there (60 s at most).
fn read_all(topics: &[String], want: usize) -> BTreeMap<String, Vec<Raw>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", "relay-tests-unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        loop {
            let md = c.fetch_metadata(Some(t), Duration::from_secs(5));
            let parts = md.ok().and_then(|m| {
                m.topics()
                    .first()
                    .filter(|t| t.error().is_none())
                    .map(|t| t.partitions().len())
            });
            match parts {
                Some(n) if n > 0 => {
                    for p in 0..n as i32 {
                        tpl.add_partition_offset(t, p, rdkafka::Offset::Beginning)
                            .unwrap();
                    }
                    break;
                }
                _ if Instant::now() > deadline => panic!("topic {t} never appeared"),
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
    c.assign(&tpl).unwrap();
    let mut out: BTreeMap<String, Vec<Raw>> = BTreeMap::new();
    let mut n = 0;
    while n < want && Instant::now() < deadline {
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap();
        let headers = m.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        out.entry(m.topic().to_string()).or_default().push(Raw {
            partition: m.partition(),
            timestamp: m.timestamp().to_millis().unwrap_or(-1),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
        });
        n += 1;
    }
    out
}

/// The event id in an `id` header, whatever its converter wrapped around it.
fn event_id(r: &Raw) -> String {
    let h = r
        .headers
        .iter()
        .find(|(k, _)| k == "id")
        .and_then(|(_, v)| v.as_ref())
        .expect("an id header");
    let s = String::from_utf8_lossy(h);
    let at = s.find("00000000-").expect("a uuid in the id header");
    s[at..at + 36].to_string()
}

/// The run id differs by construction: replaced by a placeholder once checked to be a UUID.
fn normalise_headers(r: &Raw) -> Vec<(String, Option<Vec<u8>>)> {
    r.headers
        .iter()
        .map(|(k, v)| {
            if k != "__debezium.context.runId" {
                return (k.clone(), v.clone());
            }
            let s = String::from_utf8_lossy(v.as_deref().unwrap_or_default()).into_owned();
            let uuid = s
                .split('"')
                .find(|p| p.len() == 36 && p.matches('-').count() == 4)
                .or((s.len() == 36).then_some(s.as_str()))
                .unwrap_or_else(|| panic!("runId header {s:?} holds no UUID"))
                .to_string();
            (k.clone(), Some(s.replace(&uuid, "<run-id>").into_bytes()))
        })
        .collect()
}

/// How a field differs: Debezium's above the relay's.
fn both(what: &str, debezium: String, relay: String) -> String {
    format!("{what}\n    debezium {debezium}\n    relay    {relay}")
}

fn show(b: &Option<Vec<u8>>) -> String {
    match b {
        None => "<none>".into(),
        Some(b) => format!("{:?}", String::from_utf8_lossy(b)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_and_the_relay_write_the_same_bytes() {
    let _turn = turn().await;
    assert!(
        plugins()
            .join("debezium-connector-postgres-3.6.1.Final.jar")
            .exists(),
        "no Debezium plugin jars in {}: run infra/install-deps.sh",
        plugins().display()
    );
    let db = TestDb::new("dbzc").await;
    create_tables(&db).await;
    let data = std::env::temp_dir().join(format!("{}-connect", db.name));
    std::fs::create_dir_all(&data).unwrap();
    let mut files = Vec::new();
    for combo in COMBOS {
        let f = data.join(format!("{}.properties", combo.name));
        std::fs::write(&f, connector_properties(&db.name, combo)).unwrap();
        files.push(f);
    }
    let t0 = Instant::now();
    let slots: Vec<String> = COMBOS
        .iter()
        .map(|c| format!("{}_{}", db.name, c.name))
        .collect();
    let worker = Worker {
        data: data.clone(),
        slots: slots.clone(),
    };
    let started = Command::new(repo_root().join("infra/debezium/start.sh"))
        .args(&files)
        .env("CONNECT_DATA", &data)
        .env("CONNECT_REST_PORT", REST_PORT.to_string())
        .env("KAFKA_BOOTSTRAP", kafka_brokers())
        .env("CONNECT_HEAP_OPTS", "-Xms128M -Xmx512M")
        .status()
        .unwrap();
    assert!(
        started.success(),
        "Connect did not start; see {}",
        data.display()
    );
    // A drop-in runs without the relay's own position headers.
    let cfg = db.relay_config(&format!(
        "[relay]\nrelay_headers = false\n\n{}",
        relay_sections(&db.name)
    ));
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    // RUNNING is not "streaming": wait until every connector's slot is in use.
    crate::support::eventually(
        "the Debezium slots are active",
        Duration::from_secs(60),
        || async {
            let n: i64 = db
            .client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE active AND slot_name = ANY($1)",
                &[&slots],
            )
            .await
            .unwrap()
            .get(0);
            (n == slots.len() as i64).then_some(())
        },
    )
    .await;
    insert_rows(&db).await;

    let mut report = String::from(
        "| combination | records | key | value | headers | partition | timestamp |\n|---|---|---|---|---|---|---|\n",
    );
    let mut diffs = String::new();
    let mut all_equal = true;
    for combo in COMBOS {
        let topics = |side: &str| -> Vec<String> {
            combo
                .types
                .chars()
                .map(|t| format!("{}.{t}", topic_prefix(&db.name, side, combo)))
                .collect()
        };
        let per_table = rows_of(combo).len();
        let want = combo.types.len() * per_table;
        let dbz = read_all(&topics("dbz"), want);
        let rly = read_all(&topics("rly"), want);
        let (mut n, mut key, mut value, mut headers, mut part, mut ts) = (0, 0, 0, 0, 0, 0);
        for ty in combo.types.chars() {
            let by_id = |m: &BTreeMap<String, Vec<Raw>>, side: &str| -> BTreeMap<String, Raw> {
                m.get(&format!("{}.{ty}", topic_prefix(&db.name, side, combo)))
                    .into_iter()
                    .flatten()
                    .map(|r| (event_id(r), r.clone()))
                    .collect()
            };
            let (d, r) = (by_id(&dbz, "dbz"), by_id(&rly, "rly"));
            if d.len() != per_table || r.len() != per_table {
                all_equal = false;
                let _ = writeln!(
                    diffs,
                    "{} {ty}: {per_table} rows, Debezium wrote {} records, the relay {}",
                    combo.name,
                    d.len(),
                    r.len()
                );
            }
            for (id, dr) in &d {
                let Some(rr) = r.get(id) else { continue };
                n += 1;
                let mut bad = Vec::new();
                let mut tally = |count: &mut usize, same: bool, diff: &dyn Fn() -> String| {
                    if same { *count += 1 } else { bad.push(diff()) }
                };
                let (mut dh, mut rh) = (normalise_headers(dr), normalise_headers(rr));
                if combo.plain {
                    // The plain path writes its headers in name order, Debezium id first.
                    dh.sort();
                    rh.sort();
                }
                let fmt = |h: &[(String, Option<Vec<u8>>)]| {
                    h.iter()
                        .map(|(k, v)| format!("{k}={}", show(v)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                tally(&mut key, dr.key == rr.key, &|| {
                    both("key", show(&dr.key), show(&rr.key))
                });
                tally(&mut value, dr.value == rr.value, &|| {
                    both("value", show(&dr.value), show(&rr.value))
                });
                tally(&mut headers, dh == rh, &|| {
                    both("headers", fmt(&dh), fmt(&rh))
                });
                tally(&mut part, dr.partition == rr.partition, &|| {
                    format!(
                        "partition: debezium {} relay {}",
                        dr.partition, rr.partition
                    )
                });
                tally(
                    &mut ts,
                    !combo.timestamp || dr.timestamp == rr.timestamp,
                    &|| {
                        format!(
                            "timestamp: debezium {} relay {}",
                            dr.timestamp, rr.timestamp
                        )
                    },
                );
                if !bad.is_empty() {
                    all_equal = false;
                    let _ = writeln!(
                        diffs,
                        "{} {ty} event {id}:\n  {}",
                        combo.name,
                        bad.join("\n  ")
                    );
                }
            }
        }
        let _ = writeln!(
            report,
            "| {} | {n} | {key}/{n} | {value}/{n} | {headers}/{n} | {part}/{n} | {} |",
            combo.name,
            if combo.timestamp {
                format!("{ts}/{n}")
            } else {
                "(processing time)".into()
            }
        );
    }
    eprintln!(
        "{report}\n(side by side in {:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    relay.terminate(Duration::from_secs(10));
    drop(worker);
    db.cleanup().await;
    let _ = std::fs::remove_dir_all(&data);
    assert!(
        all_equal,
        "records differ from Debezium's:\n{diffs}\n{report}"
    );
}
