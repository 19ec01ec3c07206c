//! Loading: the file is parsed into a TOML table, `OUTBOX_RELAY__*` variables are laid over it,
//! and the result is deserialized into the program's config struct. A deserialization error is
//! rewritten to name the option in full (`http.listen = "x": ...`) and the variable that set
//! it, if any.

use std::{collections::BTreeMap, path::Path};

use super::{ConfigError, ENV_PREFIX};

/// Dotted key (`http.listen`) → the environment variable that set it.
pub type Origins = BTreeMap<String, String>;

/// The file's table with the `OUTBOX_RELAY__*` variables laid over it, and where each came from.
pub fn read_table(
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
pub type EntryCheck = fn(&toml::Value) -> Result<(), toml::de::Error>;

/// A config loaded from `path` and `env`: errors name the option in full, and the entries of
/// the arrays in `arrays` by their index.
pub fn load_as<T: serde::de::DeserializeOwned>(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    arrays: &[(&str, EntryCheck)],
) -> Result<T, ConfigError> {
    let (table, origins) = read_table(path, env)?;
    check_entries(&table, arrays, &origins)?;
    deserialize(table, "", &origins)
}

/// Checks the entries of the arrays in `arrays` one by one, so that an error names its index
/// (toml does not say which entry of an array failed).
pub fn check_entries(
    table: &toml::Table,
    arrays: &[(&str, EntryCheck)],
    origins: &Origins,
) -> Result<(), ConfigError> {
    for (key, check) in arrays {
        if let Some(toml::Value::Array(entries)) = table.get(*key) {
            for (i, entry) in entries.iter().enumerate() {
                if let Err(e) = check(entry) {
                    let prefix = format!("{key}[{i}]");
                    return Err(ConfigError::Parse(name_the_option(
                        &e, entry, &prefix, origins,
                    )));
                }
            }
        }
    }
    Ok(())
}

/// `table` (the config at `prefix`, "" for the whole file) as `T`; an error names the option.
pub fn deserialize<T: serde::de::DeserializeOwned>(
    table: toml::Table,
    prefix: &str,
    origins: &Origins,
) -> Result<T, ConfigError> {
    let root = toml::Value::Table(table);
    root.clone()
        .try_into()
        .map_err(|e| ConfigError::Parse(name_the_option(&e, &root, prefix, origins)))
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
pub fn name_the_option(
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

/// The keys `T` accepts (serde's field list of a struct deserialized with
/// `deny_unknown_fields`), read by asking `T` to deserialize itself from a deserializer that
/// records the list and stops.
pub fn struct_fields<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> de::Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

/// serde's message for a key no struct of the section has (what `deny_unknown_fields` says),
/// for a section read as two structs.
pub fn unknown_field(field: &str, expected: &[&str]) -> toml::de::Error {
    let list: Vec<String> = expected.iter().map(|k| format!("`{k}`")).collect();
    serde::de::Error::custom(format!(
        "unknown field `{field}`, expected one of {}",
        list.join(", ")
    ))
}
