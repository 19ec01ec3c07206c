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

/// One converter / router combination, as both sides spell it.
struct Combo {
    name: &'static str,
    /// Payload column types: j = jsonb, t = text, b = bytea (one table each).
    types: &'static str,
    /// Connector properties (converters, `transforms.outbox.*`) beyond the common ones.
    dbz: &'static [(&'static str, &'static str)],
    /// The `[outbox.debezium]` body (`None`: no table, the relay's plain path).
    relay: Option<&'static str>,
    /// The record timestamp comes from the `ts` column.
    timestamp: bool,
}

const COMBOS: &[Combo] = &[
    Combo {
        name: "plain",
        types: "jt",
        dbz: &[
            ("key.converter", S),
            ("value.converter", S),
            ("extended.headers.enabled", "false"),
            (
                "transforms.outbox.table.fields.additional.placement",
                "type:header:eventType",
            ),
        ],
        relay: None,
        timestamp: false,
    },
    Combo {
        name: "str",
        types: "jt",
        dbz: &[
            ("key.converter", S),
            ("value.converter", S),
            (
                "transforms.outbox.table.fields.additional.placement",
                "type:header:eventType",
            ),
            ("transforms.outbox.table.field.event.timestamp", "ts"),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"table.fields.additional.placement" = "type:header:eventType"
"table.field.event.timestamp" = "ts""#,
        ),
        timestamp: true,
    },
    Combo {
        name: "jsoff",
        types: "jtb",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            ("key.converter.schemas.enable", "false"),
            ("value.converter.schemas.enable", "false"),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "org.apache.kafka.connect.json.JsonConverter"
"key.converter.schemas.enable" = false
"value.converter" = "org.apache.kafka.connect.json.JsonConverter"
"value.converter.schemas.enable" = false"#,
        ),
        timestamp: false,
    },
    Combo {
        name: "json",
        types: "jtb",
        dbz: &[("key.converter", J), ("value.converter", J)],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "org.apache.kafka.connect.json.JsonConverter"
"value.converter" = "org.apache.kafka.connect.json.JsonConverter""#,
        ),
        timestamp: false,
    },
    Combo {
        name: "bytes",
        types: "b",
        dbz: &[
            ("key.converter", S),
            ("value.converter", B),
            ("header.converter", J),
            (
                "transforms.outbox.table.fields.additional.placement",
                "type:header:eventType,n:header,ver:header",
            ),
            ("transforms.outbox.table.field.event.timestamp", "ts"),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"value.converter" = "ByteArrayConverter"
"header.converter" = "org.apache.kafka.connect.json.JsonConverter"
"table.fields.additional.placement" = "type:header:eventType,n:header,ver:header"
"table.field.event.timestamp" = "ts""#,
        ),
        timestamp: true,
    },
    // Debezium caches the envelope's value schema by schema version alone, across tables: a
    // connector reading a jsonb and a text outbox gives the second the first's schema (name
    // and payload type). One table per connector here; the guide lists the quirk.
    Combo {
        name: "env",
        types: "j",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            (
                "transforms.outbox.table.fields.additional.placement",
                "ver:envelope,type:header:eventType,n:partition",
            ),
            ("transforms.outbox.table.field.event.schema.version", "n"),
            ("transforms.outbox.route.tombstone.on.empty.payload", "true"),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"table.fields.additional.placement" = "ver:envelope,type:header:eventType,n:partition"
"table.field.event.schema.version" = "n"
"route.tombstone.on.empty.payload" = true"#,
        ),
        timestamp: false,
    },
    Combo {
        name: "envt",
        types: "t",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            (
                "transforms.outbox.table.fields.additional.placement",
                "ver:envelope,type:header:eventType,n:partition",
            ),
            ("transforms.outbox.table.field.event.schema.version", "n"),
            ("transforms.outbox.route.tombstone.on.empty.payload", "true"),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"table.fields.additional.placement" = "ver:envelope,type:header:eventType,n:partition"
"table.field.event.schema.version" = "n"
"route.tombstone.on.empty.payload" = true"#,
        ),
        timestamp: false,
    },
    Combo {
        name: "envoff",
        types: "jtb",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            ("value.converter.schemas.enable", "false"),
            (
                "transforms.outbox.table.fields.additional.placement",
                "ver:envelope:v",
            ),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"value.converter.schemas.enable" = false
"table.fields.additional.placement" = "ver:envelope:v""#,
        ),
        timestamp: false,
    },
    // Expanded payloads: the struct Debezium infers from the JSON (a bytea payload is not
    // expanded, on both sides).
    Combo {
        name: "expoff",
        types: "jtb",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            ("key.converter.schemas.enable", "false"),
            ("value.converter.schemas.enable", "false"),
            ("transforms.outbox.table.expand.json.payload", "true"),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"key.converter.schemas.enable" = false
"value.converter" = "JsonConverter"
"value.converter.schemas.enable" = false
"table.expand.json.payload" = true"#,
        ),
        timestamp: false,
    },
    Combo {
        name: "exp",
        types: "jt",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            ("transforms.outbox.table.expand.json.payload", "true"),
            (
                "transforms.outbox.table.json.payload.null.behavior",
                "optional_bytes",
            ),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"table.expand.json.payload" = true
"table.json.payload.null.behavior" = "optional_bytes""#,
        ),
        timestamp: false,
    },
    // route.topic.regex + route.topic.replacement (`<db>`: the test database's name; the relay's
    // `topic` is left unset): the topic from a named group, while the envelope schema's name
    // keeps the raw aggregatetype.
    Combo {
        name: "regex",
        types: "j",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            (
                "transforms.outbox.table.fields.additional.placement",
                "ver:envelope",
            ),
            ("transforms.outbox.route.topic.regex", "(?<t>[a-z])"),
            (
                "transforms.outbox.route.topic.replacement",
                "<db>.dbz.regex.${t}",
            ),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"table.fields.additional.placement" = "ver:envelope"
"route.topic.regex" = "(?<t>[a-z])"
"route.topic.replacement" = "<db>.rly.regex.${t}""#,
        ),
        timestamp: false,
    },
    // Several aggregate types in one table with an envelope under schemas: the value schema's
    // name carries the routed value.
    Combo {
        name: "mixenv",
        types: "jt",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            (
                "transforms.outbox.table.fields.additional.placement",
                "type:envelope:eventType",
            ),
            ("transforms.outbox.route.topic.regex", "(?<t>[a-z])-[0-9]"),
            (
                "transforms.outbox.route.topic.replacement",
                "<db>.dbz.mixenv.${t}",
            ),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"table.fields.additional.placement" = "type:envelope:eventType"
"route.topic.regex" = "(?<t>[a-z])-[0-9]"
"route.topic.replacement" = "<db>.rly.mixenv.${t}""#,
        ),
        timestamp: false,
    },
    // The same with expanded payloads: the cache is per payload schema. One table: Debezium's
    // cache is the connector's, so a second table would get the first one's names (the guide
    // lists the quirk).
    Combo {
        name: "mixexp",
        types: "j",
        dbz: &[
            ("key.converter", J),
            ("value.converter", J),
            ("transforms.outbox.table.expand.json.payload", "true"),
            (
                "transforms.outbox.table.fields.additional.placement",
                "type:envelope:eventType",
            ),
            ("transforms.outbox.route.topic.regex", "(?<t>[a-z])-[0-9]"),
            (
                "transforms.outbox.route.topic.replacement",
                "<db>.dbz.mixexp.${t}",
            ),
        ],
        relay: Some(
            r#""extended.headers.enabled" = true
"key.converter" = "JsonConverter"
"value.converter" = "JsonConverter"
"table.expand.json.payload" = true
"table.fields.additional.placement" = "type:envelope:eventType"
"route.topic.regex" = "(?<t>[a-z])-[0-9]"
"route.topic.replacement" = "<db>.rly.mixexp.${t}""#,
        ),
        timestamp: false,
    },
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

/// The Connect worker; stopped (SIGTERM, then SIGKILL) when dropped, also on a failed assert,
/// and its connectors' slots dropped (an inactive slot would hold WAL on the shared server).
fn connector_properties(db: &TestDb, combo: &Combo) -> String {
    let tables: Vec<String> = combo
        .types
        .chars()
        .map(|t| format!("public.{}", table(combo, t)))
        .collect();
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
         transforms.outbox.table.op.invalid.behavior=warn\n",
        db = db.name,
        c = combo.name,
        port = pg_port(),
        tables = tables.join(","),
    );
    // A combination's keys come later, so they override the common ones.
    for (k, v) in combo.dbz {
        let _ = writeln!(p, "{k}={}", v.replace("<db>", &db.name));
    }
    p
}

fn relay_sections(db: &TestDb) -> String {
    let mut out = String::new();
    for combo in COMBOS {
        for ty in combo.types.chars() {
            let _ = writeln!(out, "[[outbox]]\ntable = \"public.{}\"", table(combo, ty));
            // With route.topic.* the options route, and `topic` must stay unset.
            if !combo.relay.is_some_and(|b| b.contains("\"route.topic.")) {
                let _ = writeln!(
                    out,
                    "topic = \"{}.rly.{}.{{aggregatetype}}\"",
                    db.name, combo.name
                );
            }
            match combo.relay {
                None => out.push('\n'),
                Some(body) => {
                    let _ = write!(
                        out,
                        "headers = {{ id = \"id\" }}\n[outbox.debezium]\n\"topic.prefix\" = \"{}{}\"\n{body}\n\n",
                        db.name,
                        combo.name,
                        body = body.replace("<db>", &db.name)
                    );
                }
            }
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
        std::fs::write(&f, connector_properties(&db, combo)).unwrap();
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
        relay_sections(&db)
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
                .map(|t| format!("{}.{side}.{}.{t}", db.name, combo.name))
                .collect()
        };
        let per_table = rows_of(combo).len();
        let want = combo.types.len() * per_table;
        let dbz = read_all(&topics("dbz"), want);
        let rly = read_all(&topics("rly"), want);
        let (mut n, mut key, mut value, mut headers, mut part, mut ts) = (0, 0, 0, 0, 0, 0);
        for ty in combo.types.chars() {
            let by_id = |m: &BTreeMap<String, Vec<Raw>>, side: &str| -> BTreeMap<String, Raw> {
                m.get(&format!("{}.{side}.{}.{ty}", db.name, combo.name))
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
                if dr.key == rr.key {
                    key += 1
                } else {
                    bad.push(format!(
                        "key\n    debezium {}\n    relay    {}",
                        show(&dr.key),
                        show(&rr.key)
                    ))
                }
                if dr.value == rr.value {
                    value += 1
                } else {
                    bad.push(format!(
                        "value\n    debezium {}\n    relay    {}",
                        show(&dr.value),
                        show(&rr.value)
                    ))
                }
                let (mut dh, mut rh) = (normalise_headers(dr), normalise_headers(rr));
                if combo.relay.is_none() {
                    // The plain path writes its headers in name order, Debezium id first.
                    dh.sort();
                    rh.sort();
                }
                if dh == rh {
                    headers += 1
                } else {
                    let fmt = |h: &[(String, Option<Vec<u8>>)]| {
                        h.iter()
                            .map(|(k, v)| format!("{k}={}", show(v)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    bad.push(format!(
                        "headers\n    debezium {}\n    relay    {}",
                        fmt(&dh),
                        fmt(&rh)
                    ));
                }
                if dr.partition == rr.partition {
                    part += 1
                } else {
                    bad.push(format!(
                        "partition: debezium {} relay {}",
                        dr.partition, rr.partition
                    ))
                }
                if !combo.timestamp || dr.timestamp == rr.timestamp {
                    ts += 1
                } else {
                    bad.push(format!(
                        "timestamp: debezium {} relay {}",
                        dr.timestamp, rr.timestamp
                    ))
                }
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
