//! `[postgres]`: where the replication stream comes from (server, role, TLS, slot and
//! publication), and the identifier rule that keeps slot and publication names out of SQL
//! injection's reach.

use super::InvalidOption;
use std::path::PathBuf;

use serde::Deserialize;

use super::{
    ConfigError,
    lenient::{from_str_or_native, option_from_str_or_native},
    secret::{Secret, read_secret_file},
};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Host name or IP address of the server: the primary, or a standby (PostgreSQL 16+,
    /// docs/platforms.md). Default `127.0.0.1`.
    #[serde(default = "default_host")]
    pub host: String,
    /// Port. Default 5432.
    #[serde(default = "default_port", deserialize_with = "from_str_or_native")]
    pub port: u16,
    /// Role to connect as. It needs the REPLICATION attribute (see docs/security.md).
    #[serde(default = "default_user")]
    pub user: String,
    /// Password. Prefer the environment (`OUTBOX_RELAY__POSTGRES__PASSWORD`) or `password_file`.
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password (trailing newline ignored). Not together with `password`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// TLS to PostgreSQL, for both the replication and the control connection: `disable`
    /// (default) or `verify-full` (encrypt, check the server certificate against
    /// `sslrootcert` and its name against `host`).
    #[serde(default)]
    pub sslmode: PgSslMode,
    /// CA certificate file (PEM) that signed the server certificate; required by
    /// `verify-full`.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// Database holding the outbox table(s). Default `postgres`.
    #[serde(default = "default_database")]
    pub database: String,
    /// Logical replication slot (pgoutput). Default `outbox_relay`.
    #[serde(default = "default_slot")]
    pub slot: String,
    /// Publication listing the outbox table(s). Default `outbox_relay`.
    #[serde(default = "default_publication")]
    pub publication: String,
    /// Create the publication at start (`FOR TABLE <outbox tables> WITH (publish = 'insert')`)
    /// when it does not exist. Default true.
    #[serde(
        default = "default_create_publication",
        deserialize_with = "from_str_or_native"
    )]
    pub create_publication: bool,
    /// Create the slot at start when it does not exist. Default **false**: a slot that
    /// disappeared means events written since are lost to the relay, so `run` refuses and says
    /// so; create it once with `outbox-relay setup`.
    #[serde(default, deserialize_with = "from_str_or_native")]
    pub create_slot: bool,
    /// The PostgreSQL system identifier the relay must stream from (`SELECT system_identifier
    /// FROM pg_control_system()`, or the `systemid` of IDENTIFY_SYSTEM). When set, a server
    /// with another identifier (a restored backup, another cluster at the same address) is
    /// refused. Unset: the first server seen by the process is pinned until it exits.
    #[serde(default)]
    pub system_identifier: Option<String>,
    /// Create the slot as a failover slot (`failover => true`, PostgreSQL 17+), so standbys
    /// with `sync_replication_slots = on` keep a copy that survives promotion. Default false.
    #[serde(default, deserialize_with = "from_str_or_native")]
    pub failover_slot: bool,
    /// `application_name` of the connections (shown in pg_stat_replication). Default `outbox-relay`.
    #[serde(default = "default_application_name")]
    pub application_name: String,
    /// Connect timeout in milliseconds. Default 10000.
    #[serde(
        default = "default_connect_timeout_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub connect_timeout_ms: u64,
    /// When `host` is a standby (PostgreSQL 16+): the host of its primary, reached with the same
    /// role, password, TLS and database. The relay then writes its heartbeat there (a standby is
    /// read-only), asks it for a running-transactions record (`pg_log_standby_snapshot()`)
    /// while `setup` creates the slot on the standby, and refuses a slot whose name the primary
    /// also uses (they would share a checkpoint key). Unset: none of that (docs/platforms.md).
    #[serde(default)]
    pub primary_host: Option<String>,
    /// Port of `primary_host`. Default: `port`.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub primary_port: Option<u16>,
}

fn default_host() -> String {
    "127.0.0.1".into()
}
fn default_port() -> u16 {
    5432
}
fn default_user() -> String {
    "postgres".into()
}
fn default_database() -> String {
    "postgres".into()
}
fn default_slot() -> String {
    "outbox_relay".into()
}
fn default_publication() -> String {
    "outbox_relay".into()
}
fn default_create_publication() -> bool {
    true
}
fn default_application_name() -> String {
    "outbox-relay".into()
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}

/// See [`PostgresConfig::sslmode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    #[default]
    Disable,
    VerifyFull,
}

impl PostgresConfig {
    /// The password, from `password_file` or `password`.
    pub(super) fn password(&self) -> Result<Option<Secret>, ConfigError> {
        match &self.password_file {
            Some(p) => read_secret_file("postgres.password_file", p).map(Some),
            None => Ok(self.password.clone()),
        }
    }

    pub(super) fn validate(&self) -> Result<(), InvalidOption> {
        for (key, name) in [
            ("postgres.slot", &self.slot),
            ("postgres.publication", &self.publication),
        ] {
            if !valid_identifier(name) {
                return Err(InvalidOption::new(
                    key,
                    format!(
                        "{key} = {name:?}: use 1-63 characters of lower-case letters, digits and \
                     underscores, starting with a letter or underscore"
                    ),
                ));
            }
        }
        if self.sslmode == PgSslMode::VerifyFull && self.sslrootcert.is_none() {
            return Err(InvalidOption::new(
                "postgres.sslrootcert",
                "postgres.sslmode = \"verify-full\" needs postgres.sslrootcert (the CA file)",
            ));
        }
        if self.password.is_some() && self.password_file.is_some() {
            return Err(InvalidOption::new(
                "postgres.password",
                "set postgres.password or postgres.password_file, not both",
            ));
        }
        Ok(())
    }
}

/// Slot and publication names are interpolated into replication commands: only plain
/// identifiers are accepted, so nothing in the config can inject SQL.
pub(crate) fn valid_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;
    use super::*;

    #[test]
    fn slot_and_publication_must_be_plain_identifiers() {
        let e = load("[postgres]\nslot = \"x'; DROP TABLE t; --\"\n", &[]);
        assert!(e.unwrap_err().to_string().contains("postgres.slot"));
        let e = load("[postgres]\npublication = \"Pub\"\n", &[]);
        assert!(e.unwrap_err().to_string().contains("postgres.publication"));
        assert!(valid_identifier("_outbox_relay2"));
        assert!(!valid_identifier("2slot") && !valid_identifier(&"a".repeat(64)));
    }

    #[test]
    fn tls_and_password_combinations_are_checked() {
        let e = load("[postgres]\nsslmode = \"verify-full\"\n", &[]).unwrap_err();
        assert!(e.to_string().contains("postgres.sslrootcert"), "{e}");
        let c = load(
            "[postgres]\nsslmode = \"verify-full\"\nsslrootcert = \"ca.pem\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.postgres.sslmode, PgSslMode::VerifyFull);
        let e = load(
            "[postgres]\npassword = \"x\"\npassword_file = \"/p\"\n",
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
    }

    #[test]
    fn password_file_is_read_and_trimmed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let pw = dir.join("pg-password");
        std::fs::write(&pw, "from-file\r\n").unwrap();
        let c = load(
            &format!("[postgres]\npassword_file = \"{}\"\n", pw.display()),
            &[],
        )
        .unwrap();
        assert_eq!(
            c.postgres_password().unwrap().as_ref().map(Secret::expose),
            Some("from-file")
        );
    }
}
