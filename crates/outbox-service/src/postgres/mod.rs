//! PostgreSQL as both programs reach it: the connection section (`[postgres]`'s server, role,
//! password and TLS keys), opening a connection, and the helpers every user of a connection
//! shares: identifier checks and quoting, and error text.

mod connection;
mod tls;

pub use connection::{ConnectError, Driver, PgConnection, PgSslMode};
pub use tls::connector;

/// Double-quotes an identifier for SQL.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Names interpolated into SQL or replication commands (slot, publication, the applier's
/// tables): only plain identifiers are accepted, so nothing in the config can inject SQL.
pub fn valid_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Turns a tokio-postgres error into one sentence with the SQLSTATE's meaning.
pub fn describe_pg(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s.push_str(": ");
                s.push_str(&inner.to_string());
                src = inner.source();
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_plain_and_quoting_doubles_quotes() {
        assert!(valid_identifier("_outbox_relay2"));
        assert!(!valid_identifier("2slot") && !valid_identifier(&"a".repeat(64)));
        assert!(!valid_identifier("Pub") && !valid_identifier(""));
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
