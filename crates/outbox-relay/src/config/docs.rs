//! Ties docs/configuration.md to the config structs, as the metrics test ties docs/operations.md
//! to the metric names: every field of every section is documented in that section's table,
//! and nothing is documented that does not exist (unknown keys are rejected, so a documented
//! key that is not a field would make a config fail that the docs promised to work).
//!
//! The structs are read from their source (field names are what serde accepts: no struct here
//! renames a field except `[outbox.debezium]`'s, whose `rename = "…"` is read too).

use std::collections::BTreeSet;

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The TOML keys of `pub struct <name>` in `source`: its `pub` fields, or their serde renames.
fn struct_keys(source: &str, name: &str) -> BTreeSet<String> {
    let start = source
        .find(&format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("no struct {name}"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("struct end")];
    let mut keys = BTreeSet::new();
    let mut rename: Option<String> = None;
    for line in body.lines().skip(1).map(str::trim) {
        if let Some(r) = line.split("rename = \"").nth(1) {
            rename = r.split('"').next().map(str::to_string);
        }
        if let Some(field) = line.strip_prefix("pub ").and_then(|l| l.split(':').next()) {
            keys.insert(rename.take().unwrap_or_else(|| field.trim().to_string()));
        }
    }
    keys
}

/// The keys of the Markdown table under `heading` (up to the next heading): rows
/// ``| `key` | …``.
fn documented_keys(doc: &str, heading: &str) -> BTreeSet<String> {
    let start = doc
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("no heading {heading:?} in docs/configuration.md"));
    let section = &doc[start + heading.len() + 1..];
    let end = section.find("\n#").unwrap_or(section.len());
    section[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        // Dotted keys are quoted in TOML: `"key.converter"`.
        .map(|k| k.trim_matches('"').to_string())
        .collect()
}

/// The connection keys both `[postgres]` sections share.
const SHARED_CONNECTION: &str = "crates/outbox-service/src/postgres/connection.rs";

#[test]
fn every_config_field_is_documented_and_nothing_else() {
    let doc = repo_file("docs/configuration.md");
    let sections: &[(&str, &str, &str, &[&str])] = &[
        (
            "## `[postgres]`",
            "crates/outbox-relay/src/config/postgres.rs",
            "PostgresConfig",
            &["connection"],
        ),
        (
            "## `[kafka]`",
            "crates/outbox-relay/src/config/kafka.rs",
            "KafkaConfig",
            &[],
        ),
        (
            "## `[[outbox]]`",
            "crates/relay-core/src/route/table.rs",
            "OutboxTable",
            // The sub-table has its own section below (its row points there).
            &["debezium"],
        ),
        (
            "### `[outbox.debezium]`",
            "crates/relay-core/src/route/debezium/mod.rs",
            "DebeziumOptions",
            &[],
        ),
        (
            "## `[[message]]`",
            "crates/relay-core/src/route/message/mod.rs",
            "MessageRoute",
            &[],
        ),
        (
            "## `[relay]`",
            "crates/outbox-relay/src/config/relay.rs",
            "RelayConfig",
            &[],
        ),
        (
            "## `[http]`",
            "crates/outbox-relay/src/config/observability.rs",
            "HttpConfig",
            &[],
        ),
        (
            "## `[monitor]`",
            "crates/outbox-relay/src/config/observability.rs",
            "MonitorConfig",
            &[],
        ),
        (
            "## `[alerts]`",
            "crates/outbox-relay/src/config/alerts.rs",
            "AlertsConfig",
            &["webhook"],
        ),
        (
            "### `[alerts.webhook]`",
            "crates/outbox-relay/src/config/alerts.rs",
            "WebhookConfig",
            &[],
        ),
        (
            "## apply: `[postgres]`",
            "crates/outbox-apply/src/config/connections.rs",
            "ApplyPostgres",
            &["connection"],
        ),
        (
            "## apply: `[kafka]`",
            "crates/outbox-apply/src/config/connections.rs",
            "ApplyKafka",
            &[],
        ),
        (
            "## apply: `[apply]`",
            "crates/outbox-apply/src/config/section.rs",
            "ApplySection",
            &[],
        ),
        (
            "## apply: `[[handler]]`",
            "crates/outbox-apply/src/config/section.rs",
            "Handler",
            &[],
        ),
        (
            "## apply: `[retention]`",
            "crates/outbox-apply/src/config/section.rs",
            "ApplyRetention",
            &[],
        ),
        (
            "## apply: `[http]`",
            "crates/outbox-apply/src/config/connections.rs",
            "ApplyHttp",
            &[],
        ),
        (
            "## `[heartbeat]`",
            "crates/outbox-relay/src/config/observability.rs",
            "HeartbeatConfig",
            &[],
        ),
    ];
    let mut problems = Vec::new();
    for (heading, file, name, sub_tables) in sections {
        let mut fields: BTreeSet<String> = struct_keys(&repo_file(file), name)
            .into_iter()
            .filter(|k| !sub_tables.contains(&k.as_str()))
            .collect();
        // A `[postgres]` section also holds the shared connection keys (read from the same
        // table by the loader).
        if sub_tables.contains(&"connection") {
            fields.extend(struct_keys(&repo_file(SHARED_CONNECTION), "PgConnection"));
        }
        let documented: BTreeSet<String> = documented_keys(&doc, heading)
            .into_iter()
            .filter(|k| !sub_tables.contains(&k.as_str()))
            .collect();
        for missing in fields.difference(&documented) {
            problems.push(format!("{heading}: {name}.{missing} is not documented"));
        }
        for extra in documented.difference(&fields) {
            problems.push(format!(
                "{heading}: documents `{extra}`, which {name} does not have"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md:\n{}",
        problems.join("\n")
    );
}
