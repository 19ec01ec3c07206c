//! [`Secret`]: a configuration string (password, token, webhook URL) that never appears in logs
//! or `Debug` output, and the password files it may be read from.

use std::{fmt, path::Path};

use serde::{Deserialize, Deserializer, de};

use super::ConfigError;

/// A string that never appears in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// Any TOML scalar is accepted as its text (`password = 12345` is the password `"12345"`).
impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use toml::Value;
        Ok(Secret(match Value::deserialize(d)? {
            Value::String(s) => s,
            Value::Integer(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Boolean(b) => b.to_string(),
            Value::Datetime(t) => t.to_string(),
            other => {
                return Err(de::Error::custom(format!(
                    "expected text, a number or a boolean, not {}",
                    other.type_str()
                )));
            }
        }))
    }
}

/// Reads a password file; a trailing newline is not part of the secret. `key` names the
/// option in the error (`postgres.password_file`, `kafka.sasl_password_file`).
pub fn read_secret_file(key: &'static str, p: &Path) -> Result<Secret, ConfigError> {
    std::fs::read_to_string(p)
        .map(|s| Secret(s.trim_end_matches(['\n', '\r']).to_string()))
        .map_err(|source| ConfigError::ReadSecret {
            key,
            path: p.to_path_buf(),
            source,
        })
}
