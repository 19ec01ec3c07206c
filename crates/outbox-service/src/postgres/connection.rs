//! [`PgConnection`]: the keys of `[postgres]` that say how to reach a server (address, role,
//! password, TLS, database, application name, timeout), shared by the relay's `[postgres]` and
//! the applier's, and opening a SQL connection with them.
//!
//! A `[postgres]` table holds these keys and the program's own (the relay's slot and
//! publication, the applier's pool size). serde's `flatten` would read both but drops
//! `deny_unknown_fields`, so the loader splits the table instead ([`PgConnection::take`]):
//! these keys are read here, the rest by the program's struct, and a key neither has is
//! rejected naming both lists, as before.

use std::{fmt, future::Future, path::PathBuf, pin::Pin, time::Duration};

use serde::Deserialize;
use tokio_postgres::{Client, NoTls};

use crate::config::{
    ConfigError, InvalidOption,
    lenient::from_str_or_native,
    load::{Origins, deserialize, name_the_option, struct_fields, unknown_field},
    secret::{Secret, read_secret_file},
};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PgConnection {
    /// Host name or IP address of the server, or its socket directory (starting with `/`) for a
    /// Unix-domain socket. Default `127.0.0.1`. (The relay's may be the primary or a standby,
    /// PostgreSQL 16+, docs/platforms.md.)
    #[serde(default = "default_host")]
    pub host: String,
    /// Port. Default 5432.
    #[serde(default = "default_port", deserialize_with = "from_str_or_native")]
    pub port: u16,
    /// Role to connect as. Default `postgres`. The relay's needs the REPLICATION attribute
    /// (docs/security.md); the applier's writes its tables and whatever the handlers touch.
    #[serde(default = "default_user")]
    pub user: String,
    /// Password. Prefer the environment (`OUTBOX_RELAY__POSTGRES__PASSWORD`) or `password_file`.
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password (trailing newline ignored). Not together with `password`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// TLS to PostgreSQL, on every connection: `disable` (default) or `verify-full` (encrypt,
    /// check the server certificate against `sslrootcert` and its name against `host`).
    #[serde(default)]
    pub sslmode: PgSslMode,
    /// CA certificate file (PEM) that signed the server certificate; required by
    /// `verify-full`.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// Database. Default `postgres`.
    #[serde(default = "default_database")]
    pub database: String,
    /// `application_name` of the connections (shown in pg_stat_activity and
    /// pg_stat_replication; SQL connections add `-<purpose>`). Default: the program's,
    /// `outbox-relay` or `outbox-relay-apply`, filled in by [`PgConnection::take`].
    pub application_name: String,
    /// Connect timeout in milliseconds. Default 10000.
    #[serde(
        default = "default_connect_timeout_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub connect_timeout_ms: u64,
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
fn default_connect_timeout_ms() -> u64 {
    10_000
}

/// See [`PgConnection::sslmode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgSslMode {
    #[default]
    Disable,
    VerifyFull,
}

/// The task that drives a connection: spawn it (the client answers only while it runs).
pub type Driver = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// A connection could not be opened.
#[derive(Debug)]
pub enum ConnectError {
    /// `postgres.password_file` cannot be read.
    Config(ConfigError),
    /// `postgres.sslrootcert` cannot be used: one sentence naming what to fix.
    Tls(String),
    /// The server refused or could not be reached.
    Postgres(tokio_postgres::Error),
}

impl PgConnection {
    /// Every key default, with the program's `application_name`.
    pub fn defaults(application_name: &str) -> PgConnection {
        let table = toml::Table::from_iter([(
            "application_name".to_string(),
            toml::Value::String(application_name.into()),
        )]);
        toml::Value::Table(table)
            .try_into()
            .expect("every other field has a default")
    }

    /// Takes this section's keys out of `table`'s `[postgres]` and reads them (the rest is left
    /// for `Rest`, the program's own `[postgres]` struct). `prefix` is where `table` sits in
    /// the file ("" or `source.<name>`), for error messages. A key that neither this struct
    /// nor `Rest` has is refused with serde's message listing both; a `postgres` that is not a
    /// table is left for `Rest`'s deserialization to refuse.
    pub fn take<'de, Rest: Deserialize<'de>>(
        table: &mut toml::Table,
        application_name: &str,
        prefix: &str,
        origins: &Origins,
    ) -> Result<PgConnection, ConfigError> {
        let section = match prefix {
            "" => "postgres".to_string(),
            p => format!("{p}.postgres"),
        };
        let Some(toml::Value::Table(pg)) = table.get_mut("postgres") else {
            return Ok(PgConnection::defaults(application_name));
        };
        let ours = struct_fields::<PgConnection>();
        let theirs = struct_fields::<Rest>();
        let mut mine = toml::Table::new();
        for key in ours {
            if let Some(v) = pg.remove(*key) {
                mine.insert(key.to_string(), v);
            }
        }
        if let Some(key) = pg.keys().find(|k| !theirs.contains(&k.as_str())) {
            let all: Vec<&str> = ours.iter().chain(theirs).copied().collect();
            let e = unknown_field(key, &all);
            let root = toml::Value::Table(pg.clone());
            return Err(ConfigError::Parse(name_the_option(
                &e, &root, &section, origins,
            )));
        }
        mine.entry("application_name")
            .or_insert_with(|| toml::Value::String(application_name.into()));
        deserialize(mine, &section, origins)
    }

    /// The password, from `password_file` or `password`.
    pub fn password(&self) -> Result<Option<Secret>, ConfigError> {
        match &self.password_file {
            Some(p) => read_secret_file("postgres.password_file", p).map(Some),
            None => Ok(self.password.clone()),
        }
    }

    /// The checks a deserializer cannot make: TLS needs its CA file, one password source.
    pub fn validate(&self) -> Result<(), InvalidOption> {
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
        if self.sslmode == PgSslMode::VerifyFull && self.is_unix_socket() {
            return Err(InvalidOption::new(
                "postgres.sslmode",
                format!(
                    "postgres.host = {:?} is a socket directory, and a Unix-domain socket carries \
                     no TLS: set postgres.sslmode = \"disable\", or give the server's name for \
                     verify-full over TCP",
                    self.host
                ),
            ));
        }
        Ok(())
    }

    /// Whether `host` is a socket directory (it starts with `/`, as libpq reads it): the
    /// connections go over the Unix-domain socket `<host>/.s.PGSQL.<port>`, not TCP.
    pub fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// Opens a SQL connection to `host:port` (this section's, or another server reached with
    /// the same role, password, TLS and database) named `<application_name>-<purpose>`. The
    /// caller spawns the returned [`Driver`].
    pub async fn connect_to(
        &self,
        host: &str,
        port: u16,
        purpose: &str,
    ) -> Result<(Client, Driver), ConnectError> {
        let mut c = tokio_postgres::Config::new();
        c.host(host)
            .port(port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name(format!("{}-{purpose}", self.application_name))
            .connect_timeout(Duration::from_millis(self.connect_timeout_ms));
        if let Some(pw) = self.password().map_err(ConnectError::Config)? {
            c.password(pw.expose());
        }
        let tls = super::connector(self.sslmode, self.sslrootcert.as_deref())
            .map_err(ConnectError::Tls)?;
        Ok(match tls {
            None => {
                let (client, conn) = c.connect(NoTls).await.map_err(ConnectError::Postgres)?;
                (client, Box::pin(conn))
            }
            Some(tls) => {
                c.ssl_mode(tokio_postgres::config::SslMode::Require);
                let (client, conn) = c.connect(tls).await.map_err(ConnectError::Postgres)?;
                (client, Box::pin(conn))
            }
        })
    }

    /// Adds `host` to `database` to `d`, and [`debug_naming`](Self::debug_naming) the last two
    /// fields: a program's `[postgres]` prints them flat among its own, in the order its
    /// `check-config` has always shown.
    pub fn debug_server(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password)
            .field("password_file", &self.password_file)
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .field("database", &self.database);
    }

    /// See [`debug_server`](Self::debug_server).
    pub fn debug_naming(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("application_name", &self.application_name)
            .field("connect_timeout_ms", &self.connect_timeout_ms);
    }

    /// [`connect_to`](Self::connect_to) this section's `host:port`.
    pub async fn connect(&self, purpose: &str) -> Result<(Client, Driver), ConnectError> {
        self.connect_to(&self.host, self.port, purpose).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // only its field list is read
    struct Rest {
        #[serde(default)]
        slot: Option<String>,
    }

    fn take(toml: &str) -> Result<(PgConnection, toml::Table), String> {
        let mut table: toml::Table = toml::from_str(toml).unwrap();
        let c = PgConnection::take::<Rest>(&mut table, "prog", "", &Origins::new())
            .map_err(|e| e.to_string())?;
        Ok((c, table))
    }

    #[test]
    fn the_section_is_split_between_the_connection_and_the_rest() {
        let (c, rest) = take("[postgres]\nhost = \"db\"\nport = \"6543\"\nslot = \"s\"\n").unwrap();
        assert_eq!((c.host.as_str(), c.port), ("db", 6543));
        assert_eq!(c.application_name, "prog");
        assert_eq!(rest.to_string(), "[postgres]\nslot = \"s\"\n");
        let (c, _) = take("").unwrap();
        assert_eq!((c.port, c.application_name.as_str()), (5432, "prog"));
        let (c, _) = take("[postgres]\napplication_name = \"mine\"\n").unwrap();
        assert_eq!(c.application_name, "mine");
    }

    #[test]
    fn a_key_of_neither_struct_is_refused_naming_both_lists() {
        let e = take("[postgres]\nhots = \"x\"\n").unwrap_err();
        assert!(
            e.contains("postgres.hots: unknown field `hots`, expected one of `host`, `port`"),
            "{e}"
        );
        assert!(e.contains("`connect_timeout_ms`, `slot`"), "{e}");
        let e = take("[postgres]\nport = 70000\n").unwrap_err();
        assert!(e.contains("postgres.port = 70000: invalid value"), "{e}");
    }

    #[test]
    fn tls_and_password_combinations_are_checked() {
        let mut c = PgConnection::defaults("p");
        c.sslmode = PgSslMode::VerifyFull;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("postgres.sslrootcert")
        );
        c.sslrootcert = Some("ca.pem".into());
        c.password = Some(Secret::new("x"));
        c.password_file = Some("/p".into());
        assert!(c.validate().unwrap_err().to_string().contains("not both"));
    }
}
