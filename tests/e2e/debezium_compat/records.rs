//! The records of both sides, read back from Kafka as bytes and compared by event id: key,
//! value, header names (in order) and bytes, partition, and the timestamp where the combination
//! sets it. The Connect worker's run id, different by construction, is compared as a placeholder.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, Message, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    message::Headers,
};

use super::combos::{Combo, rows_of, topic_prefix};
use crate::support::kafka_brokers;

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

/// One combination side by side: its row of the report, what differs, and whether anything did.
pub(super) struct Compared {
    pub(super) row: String,
    pub(super) diffs: String,
    pub(super) equal: bool,
}

/// Reads both sides' records of `combo` (database `db`) and compares them record by record.
pub(super) fn compare(db: &str, combo: &Combo) -> Compared {
    let topics = |side: &str| -> Vec<String> {
        combo
            .types
            .chars()
            .map(|t| format!("{}.{t}", topic_prefix(db, side, combo)))
            .collect()
    };
    let per_table = rows_of(combo).len();
    let want = combo.types.len() * per_table;
    let dbz = read_all(&topics("dbz"), want);
    let rly = read_all(&topics("rly"), want);
    let mut out = Compared {
        row: String::new(),
        diffs: String::new(),
        equal: true,
    };
    let (mut n, mut key, mut value, mut headers, mut part, mut ts) = (0, 0, 0, 0, 0, 0);
    for ty in combo.types.chars() {
        let by_id = |m: &BTreeMap<String, Vec<Raw>>, side: &str| -> BTreeMap<String, Raw> {
            m.get(&format!("{}.{ty}", topic_prefix(db, side, combo)))
                .into_iter()
                .flatten()
                .map(|r| (event_id(r), r.clone()))
                .collect()
        };
        let (d, r) = (by_id(&dbz, "dbz"), by_id(&rly, "rly"));
        if d.len() != per_table || r.len() != per_table {
            out.equal = false;
            let _ = writeln!(
                out.diffs,
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
                out.equal = false;
                let _ = writeln!(
                    out.diffs,
                    "{} {ty} event {id}:\n  {}",
                    combo.name,
                    bad.join("\n  ")
                );
            }
        }
    }
    let _ = writeln!(
        out.row,
        "| {} | {n} | {key}/{n} | {value}/{n} | {headers}/{n} | {part}/{n} | {} |",
        combo.name,
        if combo.timestamp {
            format!("{ts}/{n}")
        } else {
            "(processing time)".into()
        }
    );
    out
}
