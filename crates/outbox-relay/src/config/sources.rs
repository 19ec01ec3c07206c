//! `[source.<name>]`: several databases in one config (docs/configuration.md, "Several
//! databases").
//!
//! A source is what a single-database config describes: its `[postgres]`, `[[outbox]]`,
//! `[[message]]`, `[relay]` ... sections. Each `[source.<name>]` table is laid over the file's
//! top-level sections, key by key (arrays such as `outbox` and `message` are replaced whole), and
//! the result is loaded and checked like a single-database config. `[http]` is the process's and
//! cannot be set per source.
//!
//! Invariant: two sources never share anything that is one stream's: its slot (on one server),
//! its state file, or a Kafka transactional id. Derived values keep that true: a source that does
//! not set its own `kafka.transactional_id` gets `<id>.source.<name>` (and `<id>.source.<name>.2`)
//! and its own checkpoint topic `<kafka.checkpoint_topic>.<name>`,
//! and names are `[a-z0-9_]`, without dots, so no derived id equals another source's, nor the
//! single-database `<id>` / `<id>.2`. A file without `[source.*]` loads exactly as before.

use std::{collections::HashMap, path::PathBuf};

use super::{Config, ConfigError, InvalidOption};

/// The sections a source may set; the others are shared by every source.
const PER_SOURCE: &[&str] = &[
    "postgres",
    "outbox",
    "message",
    "relay",
    "kafka",
    "alerts",
    "heartbeat",
    "monitor",
];

/// `[relay]` keys that are the process's, not a source's.
const PROCESS_WIDE: &[&str] = &["max_sources", "max_in_flight_bytes_total"];

/// Arrays of tables: a source's list replaces the top-level one.
const REPLACED: &[&str] = &["outbox", "message"];

/// Longest source name: it becomes a metric label, a log field, and part of a transactional id.
const MAX_NAME: usize = 48;

/// The sources of `sources` (the file's `source` key), each over `root` (the rest of the file).
/// `build` loads one config from its table, naming options under the prefix it is given.
pub(super) fn expand(
    root: &toml::Table,
    sources: toml::Value,
    build: impl Fn(toml::Table, &str) -> Result<Config, ConfigError>,
) -> Result<Vec<Config>, ConfigError> {
    let toml::Value::Table(sources) = sources else {
        return Err(ConfigError::Parse(
            "source: expected one table per database, `[source.<name>]`".into(),
        ));
    };
    if sources.is_empty() {
        return Err(ConfigError::Parse(
            "source: no [source.<name>] table; remove the key to relay one database".into(),
        ));
    }
    let mut out = Vec::with_capacity(sources.len());
    for (name, own) in sources {
        check_name(&name)?;
        let toml::Value::Table(own) = own else {
            return Err(ConfigError::Parse(format!(
                "source.{name}: expected a table `[source.{name}]`"
            )));
        };
        for key in PROCESS_WIDE {
            if own.get("relay").and_then(|r| r.get(key)).is_some() {
                return Err(ConfigError::Invalid(InvalidOption::new(
                    format!("source.{name}.relay.{key}"),
                    format!(
                        "source.{name}.relay.{key}: the limit is the process's; set relay.{key} \
                         at the top level"
                    ),
                )));
            }
        }
        let mut table = root.clone();
        for (key, value) in &own {
            if !PER_SOURCE.contains(&key.as_str()) {
                return Err(ConfigError::Invalid(InvalidOption::new(
                    format!("source.{name}.{key}"),
                    format!(
                        "source.{name}.{key}: not a per-source setting; a source sets {} \
                         (the other sections are shared by every source)",
                        PER_SOURCE.join(", ")
                    ),
                )));
            }
            match table.get_mut(key) {
                Some(toml::Value::Table(base)) if !REPLACED.contains(&key.as_str()) => {
                    lay_over(base, value.clone())
                }
                _ => {
                    table.insert(key.clone(), value.clone());
                }
            }
        }
        let prefix = format!("source.{name}");
        let fingerprint = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            table.to_string().hash(&mut h);
            h.finish()
        };
        let mut cfg = build(table, &prefix)?;
        cfg.fingerprint = fingerprint;
        derive(&mut cfg, &name, root, &own);
        out.push(cfg);
    }
    Ok(out)
}

/// `value` laid over `base`, key by key; nested tables merge, anything else replaces.
fn lay_over(base: &mut toml::Table, value: toml::Value) {
    let toml::Value::Table(over) = value else {
        return;
    };
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), v @ toml::Value::Table(_)) => lay_over(b, v),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn check_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        return Ok(());
    }
    Err(ConfigError::Invalid(InvalidOption::new(
        format!("source.{name}"),
        format!(
            "source.{name:?}: a source name is 1 to {MAX_NAME} of a-z, 0-9 and _ (it names the \
             source in metrics, logs, environment variables and transactional ids)"
        ),
    )))
}

/// What a source takes from the top level but must not share with another source.
fn derive(cfg: &mut Config, name: &str, root: &toml::Table, own: &toml::Table) {
    let own_key = |section: &str, key: &str| own.get(section).and_then(|s| s.get(key)).is_some();
    let root_key = |section: &str, key: &str| root.get(section).and_then(|s| s.get(key)).is_some();
    cfg.source = Some(name.to_string());
    if !own_key("kafka", "transactional_id")
        && root_key("kafka", "transactional_id")
        && let Some(id) = &cfg.kafka.transactional_id
    {
        cfg.kafka.transactional_id = Some(format!("{id}.source.{name}"));
    }
    // The checkpoint topic has one partition, read read-committed from its start: a source's
    // Kafka transaction left open by a crash would hold every other source's start behind it.
    if !own_key("kafka", "checkpoint_topic") {
        cfg.kafka.checkpoint_topic = format!("{}.{name}", cfg.kafka.checkpoint_topic);
    }
    if !own_key("relay", "state_file")
        && let Some(path) = &cfg.relay.state_file
    {
        cfg.relay.state_file = Some(per_source_file(path, name));
    }
}

/// `dir/state.json` → `dir/state.<name>.json`.
fn per_source_file(path: &std::path::Path, name: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match path.extension() {
        Some(ext) => format!("{stem}.{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{name}"),
    };
    path.with_file_name(file)
}

/// Checks each source and that no two share a slot, a state file or a transactional id.
pub(super) fn validate(sources: &[Config]) -> Result<(), InvalidOption> {
    let mut slots = HashMap::new();
    let mut files = HashMap::new();
    let mut ids = HashMap::new();
    for s in sources {
        let name = s.source.as_deref().unwrap_or_default();
        s.validate().map_err(|e| {
            InvalidOption::new(
                format!("source.{name}.{}", e.option),
                format!("source.{name}: {}", e.message),
            )
        })?;
        let pg = &s.postgres;
        let slot = (pg.host.clone(), pg.port, pg.slot.clone());
        if let Some(other) = slots.insert(slot, name) {
            return Err(InvalidOption::new(
                format!("source.{name}.postgres.slot"),
                format!(
                    "source.{name}.postgres.slot = {:?}: source.{other} uses the same slot on \
                     {}:{}; each source needs a slot of its own (slot names are per server)",
                    pg.slot, pg.host, pg.port
                ),
            ));
        }
        if let Some(f) = &s.relay.state_file
            && let Some(other) = files.insert(f.clone(), name)
        {
            return Err(InvalidOption::new(
                format!("source.{name}.relay.state_file"),
                format!(
                    "source.{name}.relay.state_file = {:?}: source.{other} uses the same file; \
                     give each source its own",
                    f.display()
                ),
            ));
        }
        for id in s.kafka.transactional_ids() {
            if let Some(other) = ids.insert(id.clone(), name) {
                return Err(InvalidOption::new(
                    format!("source.{name}.kafka.transactional_id"),
                    format!(
                        "source.{name}.kafka.transactional_id: the producer id {id:?} is also \
                         source.{other}'s; two sources sharing a transactional id fence each \
                         other"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "sources_tests.rs"]
mod tests;
