//! `[postgres]`: where the replication stream comes from. The server, role, password, TLS and
//! database keys are the section both programs share ([`PgConnection`], read by the loader
//! from the same table); here are the relay's own: slot and publication (plain identifiers, out
//! of SQL injection's reach), their creation, the pinned server and a standby's primary.

use std::{fmt, ops::Deref};

use outbox_service::postgres::{PgConnection, valid_identifier};
use serde::Deserialize;

use super::{
    ConfigError, InvalidOption,
    lenient::{from_str_or_native, option_from_str_or_native},
    secret::Secret,
};

/// The relay's `application_name` when the file sets none.
pub(super) const APPLICATION_NAME: &str = "outbox-relay";

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// The server, role, password, TLS, database, `application_name` and connect timeout:
    /// the keys of `[postgres]` both programs share, taken from the table by the loader
    /// ([`PgConnection::take`]); `cfg.postgres.host` reads through to them.
    #[serde(skip, default = "relay_connection")]
    pub connection: PgConnection,
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

fn relay_connection() -> PgConnection {
    PgConnection::defaults(APPLICATION_NAME)
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

impl Deref for PostgresConfig {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

/// The keys flat, in the order `check-config` printed them when they were all fields here.
impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PostgresConfig");
        self.connection.debug_server(&mut d);
        d.field("slot", &self.slot)
            .field("publication", &self.publication)
            .field("create_publication", &self.create_publication)
            .field("create_slot", &self.create_slot)
            .field("system_identifier", &self.system_identifier)
            .field("failover_slot", &self.failover_slot);
        self.connection.debug_naming(&mut d);
        d.field("primary_host", &self.primary_host)
            .field("primary_port", &self.primary_port)
            .finish()
    }
}

impl PostgresConfig {
    /// The password, from `password_file` or `password`.
    pub(super) fn password(&self) -> Result<Option<Secret>, ConfigError> {
        self.connection.password()
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
        self.connection.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::load;
    use super::*;
    use outbox_service::postgres::PgSslMode;

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
        // A socket directory: a Unix-domain socket, which carries no TLS.
        let e = load(
            "[postgres]\nhost = \"/var/run/postgresql\"\nsslmode = \"verify-full\"\n\
             sslrootcert = \"ca.pem\"\n",
            &[],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("postgres.sslmode") && e.to_string().contains("no TLS"),
            "{e}"
        );
        let c = load("[postgres]\nhost = \"/var/run/postgresql\"\n", &[]).unwrap();
        assert!(c.postgres.is_unix_socket());
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
