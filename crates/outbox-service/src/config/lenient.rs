//! Lenient deserializers for typed options (numbers, booleans, addresses): a value may be
//! written natively in TOML (`port = 5432`) or as text (`port = "5432"`), because every
//! environment override arrives as text. Errors say what a valid value looks like; the loader
//! ([`super::load`]) prefixes them with the option's full key and value.

use std::{fmt, net::SocketAddr, str::FromStr};

use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeOwned},
};

/// A type of option value accepted natively or as text.
pub trait Lenient: FromStr<Err: fmt::Display> + DeserializeOwned {
    /// What a valid value looks like, appended to error messages as "; use ...".
    const EXPECTED: &'static str;
}

impl Lenient for bool {
    const EXPECTED: &'static str = "true or false";
}
impl Lenient for u16 {
    const EXPECTED: &'static str = "a whole number from 0 to 65535";
}
impl Lenient for u32 {
    const EXPECTED: &'static str = "a whole number, 0 or more";
}
impl Lenient for u64 {
    const EXPECTED: &'static str = "a whole number, 0 or more";
}
impl Lenient for usize {
    const EXPECTED: &'static str = "a whole number, 0 or more";
}
impl Lenient for f64 {
    const EXPECTED: &'static str = "a number such as 0.5";
}
impl Lenient for SocketAddr {
    const EXPECTED: &'static str =
        "host:port such as 127.0.0.1:9559 (an IP address, not a host name)";
}

/// Takes a native TOML value or parses its text.
pub fn from_str_or_native<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Lenient,
{
    let parsed = match toml::Value::deserialize(d)? {
        toml::Value::String(s) => s.trim().parse::<T>().map_err(|e| e.to_string()),
        native => T::deserialize(native).map_err(|e| e.message().to_string()),
    };
    parsed.map_err(|reason| de::Error::custom(format!("{reason}; use {}", T::EXPECTED)))
}

/// [`from_str_or_native`] for an optional value (absent = `None`, via `#[serde(default)]`).
pub fn option_from_str_or_native<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Lenient,
{
    from_str_or_native(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        #[serde(deserialize_with = "from_str_or_native")]
        n: u16,
    }

    fn n(v: toml::Value) -> Result<u16, String> {
        let table = toml::Table::from_iter([("n".to_string(), v)]);
        toml::Value::Table(table)
            .try_into::<T>()
            .map(|t| t.n)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn native_values_and_their_text_are_both_accepted() {
        assert_eq!(n(toml::Value::Integer(5432)), Ok(5432));
        assert_eq!(n(toml::Value::String(" 5432 ".into())), Ok(5432));
    }

    #[test]
    fn errors_say_what_a_valid_value_looks_like() {
        for bad in [
            toml::Value::Integer(70_000),
            toml::Value::String("70000".into()),
            toml::Value::Boolean(true),
            toml::Value::String("often".into()),
        ] {
            let e = n(bad.clone()).unwrap_err();
            assert!(
                e.ends_with("; use a whole number from 0 to 65535"),
                "{bad} -> {e}"
            );
        }
    }
}
