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
pub(super) fn read_secret_file(key: &'static str, p: &Path) -> Result<Secret, ConfigError> {
    std::fs::read_to_string(p)
        .map(|s| Secret(s.trim_end_matches(['\n', '\r']).to_string()))
        .map_err(|source| ConfigError::ReadSecret {
            key,
            path: p.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;

    #[test]
    fn secrets_never_appear_in_debug_output() {
        let c = load(
            "[postgres]\npassword = \"hunter2\"\n[kafka]\nsecurity_protocol = \"sasl_ssl\"\n\
             sasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"\nsasl_password = \"pl41n\"\n\
             [kafka.properties]\n\"ssl.key.password\" = \"s3cr3t\"\n",
            &[],
        )
        .unwrap();
        let dump = format!("{c:?}");
        assert!(
            !dump.contains("hunter2") && !dump.contains("s3cr3t") && !dump.contains("pl41n"),
            "{dump}"
        );
        assert!(dump.contains("<redacted>"));
    }

    #[test]
    fn scalars_are_taken_as_text_and_other_values_are_refused_without_echoing_them() {
        let c = load("[postgres]\npassword = 12345\n", &[]).unwrap();
        assert_eq!(c.postgres.password.unwrap().expose(), "12345");
        let e = load("[postgres]\npassword = [\"hunter2\"]\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("postgres.password") && e.contains("array"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
    }
}
