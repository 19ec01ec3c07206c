//! TLS and SASL to Kafka: `kafka.security_protocol`, `kafka.sasl_*` and
//! `kafka.ssl_ca_location`, and the check that they are set together sensibly.

use super::InvalidOption;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, de};

use super::{
    ConfigError, KafkaConfig,
    secret::{Secret, read_secret_file},
};

/// See [`KafkaConfig::security_protocol`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KafkaSecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl KafkaSecurityProtocol {
    /// The librdkafka value of `security.protocol`.
    pub fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }
    pub fn is_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
    pub fn is_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
}

impl FromStr for KafkaSecurityProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "plaintext" => Ok(Self::Plaintext),
            "ssl" => Ok(Self::Ssl),
            "sasl_plaintext" => Ok(Self::SaslPlaintext),
            "sasl_ssl" => Ok(Self::SaslSsl),
            _ => Err(format!(
                "unknown security protocol {s:?}: use plaintext, ssl, sasl_plaintext or sasl_ssl"
            )),
        }
    }
}

/// See [`KafkaConfig::sasl_mechanism`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// The librdkafka value of `sasl.mechanisms`.
    pub fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl FromStr for SaslMechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().replace('_', "-").as_str() {
            "PLAIN" => Ok(Self::Plain),
            "SCRAM-SHA-256" => Ok(Self::ScramSha256),
            "SCRAM-SHA-512" => Ok(Self::ScramSha512),
            _ => Err(format!(
                "unknown SASL mechanism {s:?}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 \
                 (GSSAPI and OAUTHBEARER are not supported)"
            )),
        }
    }
}

/// Deserializes a string through `FromStr` (case-insensitive enums with a helpful error).
macro_rules! deserialize_from_str {
    ($($t:ty),*) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(de::Error::custom)
            }
        }
    )*};
}
deserialize_from_str!(KafkaSecurityProtocol, SaslMechanism);

impl KafkaConfig {
    /// The SASL password, from `sasl_password_file` or `sasl_password`.
    pub fn sasl_password(&self) -> Result<Option<Secret>, ConfigError> {
        match &self.sasl_password_file {
            Some(p) => read_secret_file("kafka.sasl_password_file", p).map(Some),
            None => Ok(self.sasl_password.clone()),
        }
    }

    pub(super) fn validate_security(&self) -> Result<(), InvalidOption> {
        let protocol = self.security_protocol;
        let named = format!("kafka.security_protocol = \"{}\"", protocol.as_librdkafka());
        if self.sasl_password.is_some() && self.sasl_password_file.is_some() {
            return Err(InvalidOption::new(
                "kafka.sasl_password",
                "set kafka.sasl_password or kafka.sasl_password_file, not both",
            ));
        }
        if protocol.is_sasl() {
            if self.sasl_mechanism.is_none() {
                return Err(InvalidOption::new(
                    "kafka.sasl_mechanism",
                    format!(
                        "{named} needs kafka.sasl_mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 \
                     (the one the broker's listener enables)"
                    ),
                ));
            }
            if self.sasl_username.as_deref().is_none_or(str::is_empty) {
                return Err(InvalidOption::new(
                    "kafka.sasl_username",
                    format!("{named} needs kafka.sasl_username"),
                ));
            }
            if self.sasl_password.is_none() && self.sasl_password_file.is_none() {
                return Err(InvalidOption::new(
                    "kafka.sasl_password",
                    format!(
                        "{named} needs a password: set OUTBOX_RELAY__KAFKA__SASL_PASSWORD, \
                     kafka.sasl_password_file or kafka.sasl_password"
                    ),
                ));
            }
        } else {
            let set: Vec<&str> = [
                ("kafka.sasl_mechanism", self.sasl_mechanism.is_some()),
                ("kafka.sasl_username", self.sasl_username.is_some()),
                ("kafka.sasl_password", self.sasl_password.is_some()),
                (
                    "kafka.sasl_password_file",
                    self.sasl_password_file.is_some(),
                ),
            ]
            .into_iter()
            .filter_map(|(k, on)| on.then_some(k))
            .collect();
            if !set.is_empty() {
                let suggestion = if protocol.is_tls() {
                    "\"sasl_ssl\""
                } else {
                    "\"sasl_ssl\" (or \"sasl_plaintext\" without TLS)"
                };
                return Err(InvalidOption::new(
                    set[0],
                    format!(
                        "{} only appl{} to SASL, but {named}: set kafka.security_protocol = \
                     {suggestion}, or remove {}",
                        set.join(", "),
                        if set.len() == 1 { "ies" } else { "y" },
                        if set.len() == 1 { "it" } else { "them" },
                    ),
                ));
            }
        }
        if self.ssl_ca_location.is_some() && !protocol.is_tls() {
            return Err(InvalidOption::new(
                "kafka.ssl_ca_location",
                format!(
                    "kafka.ssl_ca_location only applies to TLS, but {named}: set \
                 kafka.security_protocol = \"ssl\" or \"sasl_ssl\", or remove it"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;
    use super::*;

    #[test]
    fn kafka_security_defaults_to_plaintext_without_sasl() {
        let k = load("", &[]).unwrap().kafka;
        assert_eq!(k.security_protocol, KafkaSecurityProtocol::Plaintext);
        assert!(k.sasl_mechanism.is_none() && k.sasl_username.is_none());
        assert!(k.sasl_password().unwrap().is_none() && k.ssl_ca_location.is_none());
    }

    #[test]
    fn kafka_sasl_ssl_from_file_and_password_from_environment() {
        let c = load(
            "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"relay\"\nssl_ca_location = \"/etc/kafka-ca.pem\"\n",
            &[("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", "pa55-w0rd")],
        )
        .unwrap();
        let k = &c.kafka;
        assert_eq!(k.security_protocol, KafkaSecurityProtocol::SaslSsl);
        assert_eq!(k.security_protocol.as_librdkafka(), "sasl_ssl");
        assert_eq!(k.sasl_mechanism, Some(SaslMechanism::ScramSha512));
        assert_eq!(k.sasl_username.as_deref(), Some("relay"));
        assert_eq!(
            k.sasl_password().unwrap().as_ref().map(Secret::expose),
            Some("pa55-w0rd")
        );
        assert_eq!(
            k.ssl_ca_location.as_deref(),
            Some(std::path::Path::new("/etc/kafka-ca.pem"))
        );
        let dump = format!("{c:?}");
        assert!(!dump.contains("pa55-w0rd"), "{dump}");

        // Everything from the environment; Kafka's own spellings are accepted.
        let k = load(
            "",
            &[
                ("OUTBOX_RELAY__KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
                ("OUTBOX_RELAY__KAFKA__SASL_MECHANISM", "plain"),
                ("OUTBOX_RELAY__KAFKA__SASL_USERNAME", "u"),
                ("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", "p"),
            ],
        )
        .unwrap()
        .kafka;
        assert_eq!(k.security_protocol, KafkaSecurityProtocol::SaslPlaintext);
        assert_eq!(
            k.sasl_mechanism.map(SaslMechanism::as_librdkafka),
            Some("PLAIN")
        );
        let k = load(
            "[kafka]\nsecurity_protocol = \"ssl\"\nssl_ca_location = \"ca.pem\"\n",
            &[],
        )
        .unwrap()
        .kafka;
        assert!(k.security_protocol.is_tls() && !k.security_protocol.is_sasl());
        let k = load(
            "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"scram-sha-256\"\n\
             sasl_username = \"u\"\nsasl_password = \"p\"\n",
            &[],
        )
        .unwrap()
        .kafka;
        assert_eq!(k.sasl_mechanism, Some(SaslMechanism::ScramSha256));
    }

    #[test]
    fn kafka_sasl_password_file_is_read_and_trimmed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let pw = dir.join("kafka-password");
        std::fs::write(&pw, "from-file\n").unwrap();
        let base = "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\n\
                    sasl_username = \"u\"\n";
        let k = load(
            &format!("{base}sasl_password_file = \"{}\"\n", pw.display()),
            &[],
        )
        .unwrap()
        .kafka;
        assert_eq!(
            k.sasl_password().unwrap().as_ref().map(Secret::expose),
            Some("from-file")
        );
        // A missing file is reported with the key and the path when the producer is built.
        let k = load(
            &format!(
                "{base}sasl_password_file = \"{}\"\n",
                dir.join("missing").display()
            ),
            &[],
        )
        .unwrap()
        .kafka;
        let e = k.sasl_password().unwrap_err().to_string();
        assert!(
            e.contains("kafka.sasl_password_file") && e.contains("missing"),
            "{e}"
        );
        // Both a password and a file: refused.
        let e = load(
            &format!("{base}sasl_password_file = \"{}\"\n", pw.display()),
            &[("OUTBOX_RELAY__KAFKA__SASL_PASSWORD", "x")],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn kafka_security_combinations_are_validated_with_actionable_errors() {
        for (toml, needles) in [
            (
                "[kafka]\nsasl_username = \"u\"\nsasl_password = \"p\"\n",
                &[
                    "kafka.sasl_username, kafka.sasl_password only apply to SASL",
                    "security_protocol = \"sasl_ssl\"",
                ][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"ssl\"\nsasl_mechanism = \"PLAIN\"\n",
                &["kafka.sasl_mechanism only applies to SASL", "\"ssl\""][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_username = \"u\"\n\
                 sasl_password = \"p\"\n",
                &["needs kafka.sasl_mechanism", "SCRAM-SHA-512"][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"PLAIN\"\n\
                 sasl_password = \"p\"\n",
                &["needs kafka.sasl_username"][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\n\
                 sasl_username = \"u\"\n",
                &["needs a password", "OUTBOX_RELAY__KAFKA__SASL_PASSWORD"][..],
            ),
            (
                "[kafka]\nssl_ca_location = \"ca.pem\"\n",
                &["kafka.ssl_ca_location only applies to TLS", "\"plaintext\""][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"tls\"\n",
                &["kafka.security_protocol", "\"tls\"", "sasl_ssl"][..],
            ),
            (
                "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl_mechanism = \"GSSAPI\"\n",
                &["kafka.sasl_mechanism", "GSSAPI", "SCRAM-SHA-512"][..],
            ),
        ] {
            let e = load(toml, &[]).unwrap_err().to_string();
            for needle in needles {
                assert!(e.contains(needle), "{toml:?} -> {e}");
            }
        }
    }
}
