//! What each side is told: the Connect worker's connector properties of a combination, and the
//! relay's `[[outbox]]` sections (one per combination and payload type) with the same options
//! under `[outbox.debezium]`.

use std::fmt::Write as _;

use super::combos::{COMBOS, Combo, S, class, table, topic_prefix};
use crate::support::pg_port;

/// The connector of one combination: the common properties, String converters unless the
/// combination names others, and its options (`table.*`, `route.*` as the router's).
pub(super) fn connector_properties(db: &str, combo: &Combo) -> String {
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

/// The relay's `[[outbox]]` sections, every combination's.
pub(super) fn relay_sections(db: &str) -> String {
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
