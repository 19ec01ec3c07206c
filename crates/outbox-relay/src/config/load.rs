//! Loading: the file is parsed into a TOML table, `OUTBOX_RELAY__*` variables are laid over it,
//! and the result is deserialized into [`Config`]. A deserialization error is rewritten to name
//! the option in full (`http.listen = "x": ...`) and the variable that set it, if any.

use std::{collections::BTreeMap, path::Path};

use relay_core::route::{MessageRoute, OutboxTable};

use super::{Config, ConfigError, ENV_PREFIX};

/// Dotted key (`http.listen`) → the environment variable that set it.
type Origins = BTreeMap<String, String>;

pub(super) fn from_file_and_environment(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let (mut table, origins) = read_table(path, env)?;
    // `[source.<name>]` tables: each is a config of its own over the rest of the file.
    let sources = table.remove("source");
    let mut cfg = build(table.clone(), "", &origins)?;
    if let Some(sources) = sources {
        cfg.sources =
            super::sources::expand(&table, sources, |t, prefix| build(t, prefix, &origins))?;
    }
    Ok(cfg)
}

/// One [`Config`] from its table; errors name options under `prefix` (`source.<name>`).
fn build(table: toml::Table, prefix: &str, origins: &Origins) -> Result<Config, ConfigError> {
    let under = |key: String| match prefix {
        "" => key,
        p => format!("{p}.{key}"),
    };
    // `[[outbox]]` entries one by one first: toml does not say which entry of an array failed.
    if let Some(toml::Value::Array(entries)) = table.get("outbox") {
        for (i, entry) in entries.iter().enumerate() {
            if let Err(e) = entry.clone().try_into::<OutboxTable>() {
                let prefix = under(format!("outbox[{i}]"));
                return Err(ConfigError::Parse(name_the_option(
                    &e, entry, &prefix, origins,
                )));
            }
        }
    }
    if let Some(toml::Value::Array(entries)) = table.get("message") {
        for (i, entry) in entries.iter().enumerate() {
            if let Err(e) = entry.clone().try_into::<MessageRoute>() {
                let prefix = under(format!("message[{i}]"));
                return Err(ConfigError::Parse(name_the_option(
                    &e, entry, &prefix, origins,
                )));
            }
        }
    }
    // `[[message]]` sections and no `outbox` key: a table-less outbox, not the default table.
    let tableless = !table.contains_key("outbox") && table.contains_key("message");
    let root = toml::Value::Table(table);
    let mut cfg: Config = root
        .clone()
        .try_into()
        .map_err(|e| ConfigError::Parse(name_the_option(&e, &root, prefix, origins)))?;
    if tableless {
        cfg.outbox.clear();
    }
    Ok(cfg)
}

/// The file's table with the `OUTBOX_RELAY__*` variables laid over it, and where each came from.
fn read_table(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(toml::Table, Origins), ConfigError> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
            path: p.to_path_buf(),
            source,
        })?,
        None => String::new(),
    };
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let origins = apply_environment(&mut table, env)?;
    Ok((table, origins))
}

/// Checks one entry of an array of tables (`[[handler]]`), so an error names its index.
pub(super) type EntryCheck = fn(&toml::Value) -> Result<(), toml::de::Error>;

/// Another config loaded the same way (the applier's, `outbox-relay apply`): errors name the
/// option in full, and the entries of the arrays in `arrays` by their index.
pub(super) fn load_as<T: serde::de::DeserializeOwned>(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    arrays: &[(&str, EntryCheck)],
) -> Result<T, ConfigError> {
    let (table, origins) = read_table(path, env)?;
    for (key, check) in arrays {
        if let Some(toml::Value::Array(entries)) = table.get(*key) {
            for (i, entry) in entries.iter().enumerate() {
                if let Err(e) = check(entry) {
                    let prefix = format!("{key}[{i}]");
                    return Err(ConfigError::Parse(name_the_option(
                        &e, entry, &prefix, &origins,
                    )));
                }
            }
        }
    }
    let root = toml::Value::Table(table);
    root.clone()
        .try_into()
        .map_err(|e| ConfigError::Parse(name_the_option(&e, &root, "", &origins)))
}

/// Sets `[section] key = "value"` for every `OUTBOX_RELAY__SECTION__KEY=value` (as text: the
/// typed fields parse it). Other variables are ignored.
fn apply_environment(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Origins, ConfigError> {
    let mut origins = Origins::new();
    for (var, value) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if path.iter().any(|p| p.is_empty()) || set_path(table, &path, value).is_err() {
            return Err(ConfigError::BadEnvKey(var));
        }
        origins.insert(path.join("."), var);
    }
    Ok(origins)
}

fn set_path(table: &mut toml::Table, path: &[String], value: String) -> Result<(), ()> {
    let (last, parents) = path.split_last().ok_or(())?;
    let mut t = table;
    for p in parents {
        t = t
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or(())?;
    }
    t.insert(last.clone(), toml::Value::String(value));
    Ok(())
}

/// `<key> = <value> (from <VARIABLE>): <reason>`, or `<key>: <reason>` when the value is a
/// table, an array or a secret. `root` is the value at `prefix` (the whole config for "").
fn name_the_option(
    e: &toml::de::Error,
    root: &toml::Value,
    prefix: &str,
    origins: &Origins,
) -> String {
    // toml records the path of the failing value but shows it only in its `Display`, as a last
    // line "in `a.b`" (a deserialized `Value` has no source position to show instead).
    let display = e.to_string();
    let path = display
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("in `")?.strip_suffix('`'))
        .unwrap_or_default();
    let mut keys: Vec<String> = path
        .split('.')
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect();
    let mut reason = e.message().to_string();
    // An unknown key is reported at its table: name the key itself (but not its value, which
    // may be a misspelt secret). serde's "unknown field `x`, expected one of ..." stays as is.
    let unknown = match reason
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
    {
        Some((field, _)) => {
            keys.push(field.to_string());
            true
        }
        None => false,
    };
    let dotted = keys.join(".");
    let key = match (prefix, dotted.as_str()) {
        ("", "") => return reason,
        ("", k) => k.to_string(),
        (p, "") => p.to_string(),
        (p, k) => format!("{p}.{k}"),
    };
    let origin = origins
        .get(&key)
        .map(|var| format!(" (from {var})"))
        .unwrap_or_default();
    let found = keys.iter().try_fold(root, |v, k| v.get(k));
    let secret = is_secret(&key);
    // serde's messages may quote the value: `invalid type: string "...", expected a map`.
    if secret && let Some(toml::Value::String(s)) = found {
        reason = reason.replace(&format!("{s:?}"), "\"<redacted>\"");
    }
    let hide_value = secret || unknown;
    match found.filter(|v| !hide_value && !v.is_table() && !v.is_array()) {
        Some(v) => format!("{key} = {v}{origin}: {reason}"),
        None => format!("{key}{origin}: {reason}"),
    }
}

fn is_secret(key: &str) -> bool {
    // A source's options are its section's: `source.<name>.postgres.password`.
    let key = match key.strip_prefix("source.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, k)| k),
        None => key,
    };
    matches!(
        key,
        "postgres.password"
            | "kafka.sasl_password"
            | "alerts.webhook.url"
            | "alerts.webhook.authorization"
    ) || key.starts_with("kafka.properties")
}

#[cfg(test)]
mod tests {
    use super::super::{Secret, test_support::load};

    #[test]
    fn environment_overrides_the_file_with_typed_values() {
        let c = load(
            "[postgres]\nport = 1\n",
            &[
                ("OUTBOX_RELAY__POSTGRES__PORT", "6543"),
                ("OUTBOX_RELAY__POSTGRES__PASSWORD", "12345"),
                ("OUTBOX_RELAY__RELAY__RELAY_HEADERS", "false"),
                ("OTHER", "ignored"),
            ],
        )
        .unwrap();
        assert_eq!(c.postgres.port, 6543);
        assert_eq!(
            c.postgres.password.as_ref().map(Secret::expose),
            Some("12345")
        );
        assert!(!c.relay.relay_headers);
    }

    #[test]
    fn unknown_keys_are_rejected_in_file_and_environment_with_their_full_name() {
        let e = load("[postgres]\nhots = \"x\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("postgres.hots: unknown field `hots`, expected one of"),
            "{e}"
        );
        let e = load("", &[("OUTBOX_RELAY__KAFKA__BROKER", "x")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kafka.broker (from OUTBOX_RELAY__KAFKA__BROKER): unknown field `broker`"),
            "{e}"
        );
        let e = load("[postgres]\npasword = \"hunter2\"\n", &[]).unwrap_err();
        assert!(
            e.to_string().contains("postgres.pasword: unknown field"),
            "{e}"
        );
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = load("[postgress]\n", &[]).unwrap_err().to_string();
        assert!(e.contains("postgress: unknown field `postgress`"), "{e}");
        let e = load("[[outbox]]\ntable = \"public.o\"\nkey = \"k\"\n", &[]).unwrap_err();
        assert!(
            e.to_string().contains("outbox[0].key: unknown field `key`"),
            "{e}"
        );
    }

    #[test]
    fn environment_variables_that_name_no_key_are_rejected() {
        for var in ["OUTBOX_RELAY__", "OUTBOX_RELAY__HTTP____LISTEN"] {
            let e = load("", &[(var, "x")]).unwrap_err().to_string();
            assert!(
                e.contains(var) && e.contains("does not name a config key"),
                "{e}"
            );
        }
        let e = load(
            "[postgres]\nport = 1\n",
            &[("OUTBOX_RELAY__POSTGRES__PORT__X", "1")],
        );
        assert!(e.unwrap_err().to_string().contains("POSTGRES__PORT__X"));
    }

    /// Typed values (ports, numbers, booleans, addresses, enums, strings) that do not parse:
    /// the error names the full key and the value, in the file and from the environment.
    #[test]
    fn a_value_of_the_wrong_type_names_its_key_in_the_file_and_the_environment() {
        for (toml, env, needle) in [
            (
                "[http]\nlisten = \"not-an-address\"\n",
                None,
                "http.listen = \"not-an-address\": invalid socket address syntax; use host:port",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__HTTP__LISTEN", "not-an-address")),
                "http.listen = \"not-an-address\" (from OUTBOX_RELAY__HTTP__LISTEN): invalid \
                 socket address syntax",
            ),
            (
                "[postgres]\nport = 70000\n",
                None,
                "postgres.port = 70000: invalid value: integer `70000`, expected u16; use a \
                 whole number from 0 to 65535",
            ),
            ("[postgres]\nport = true\n", None, "postgres.port = true: "),
            (
                "",
                Some(("OUTBOX_RELAY__POSTGRES__PORT", "70000")),
                "postgres.port = \"70000\" (from OUTBOX_RELAY__POSTGRES__PORT): number too \
                 large",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__HTTP__ENABLED", "yes")),
                "http.enabled = \"yes\" (from OUTBOX_RELAY__HTTP__ENABLED): provided string \
                 was not `true` or `false`; use true or false",
            ),
            ("[http]\nenabled = 1\n", None, "http.enabled = 1: "),
            (
                "[relay]\nstatus_interval_ms = \"soon\"\n",
                None,
                "relay.status_interval_ms = \"soon\": invalid digit",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__RELAY__BUFFER_EVENTS", "-1")),
                "relay.buffer_events = \"-1\" (from OUTBOX_RELAY__RELAY__BUFFER_EVENTS)",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__RELAY__ON_POISON", "skip")),
                "relay.on_poison = \"skip\" (from OUTBOX_RELAY__RELAY__ON_POISON): unknown \
                 variant `skip`",
            ),
            (
                "[postgres]\nsslmode = \"require\"\n",
                None,
                "postgres.sslmode = \"require\": unknown variant",
            ),
            (
                "[kafka]\nsecurity_protocol = 5\n",
                None,
                "kafka.security_protocol = 5: invalid type",
            ),
            (
                "[postgres]\nhost = 5\n",
                None,
                "postgres.host = 5: invalid type",
            ),
            (
                "[[outbox]]\ntable = 5\n",
                None,
                "outbox[0].table = 5: invalid type",
            ),
            ("http = 5\n", None, "http = 5: invalid type"),
            (
                "",
                Some(("OUTBOX_RELAY__ALERTS__WEBHOOK__TIMEOUT_MS", "5s")),
                "alerts.webhook.timeout_ms = \"5s\" (from \
                 OUTBOX_RELAY__ALERTS__WEBHOOK__TIMEOUT_MS)",
            ),
        ] {
            let env: Vec<_> = env.into_iter().collect();
            let e = load(toml, &env).unwrap_err().to_string();
            assert!(
                e.contains(needle),
                "{toml:?} {env:?}\n -> {e}\n wanted {needle}"
            );
        }
    }

    #[test]
    fn errors_never_repeat_a_secret_value() {
        let e = load("", &[("OUTBOX_RELAY__KAFKA__PROPERTIES", "s3cr3t")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kafka.properties (from OUTBOX_RELAY__KAFKA__PROPERTIES)"),
            "{e}"
        );
        assert!(!e.contains("s3cr3t") && e.contains("expected a map"), "{e}");
        // Only the quoted value is redacted, not its letters elsewhere in the message.
        let e = load("", &[("OUTBOX_RELAY__KAFKA__PROPERTIES", "x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("string \"<redacted>\", expected a map"), "{e}");
    }
}
