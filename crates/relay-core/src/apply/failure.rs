//! Transient or definite: what an error from the consumer's PostgreSQL means for the records of
//! the transaction it broke.
//!
//! Invariant: only an error that says something about the *record* is definite; anything that
//! may pass by itself (a lost connection, a serialization failure or deadlock, even when raised
//! inside a handler, a server shutting down, a standby that is being promoted) is transient, and
//! a transient error retries the whole transaction, so no record is dead-lettered or halted on
//! because the database was briefly unavailable.

/// How the applier treats an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Roll back, wait (backoff), retry the whole transaction; nothing is lost or skipped.
    Transient,
    /// The record cannot be applied as it is: the configured policy (`halt` or `dead-letter`).
    Definite,
}

/// SQLSTATE `57014`: the statement ran into `statement_timeout` (the handler's time limit).
pub const QUERY_CANCELED: &str = "57014";

/// Classifies an error by its SQLSTATE; `None` (no server error: I/O, a closed connection, a
/// timeout of the client itself) is transient.
///
/// Transient: class 08 (connection exception), 40001 (serialization failure), 40P01 (deadlock),
/// 40003 (statement completion unknown), class 53 (insufficient resources: disk full, out of
/// memory, too many connections), 55P03 (lock not available), 57P01/57P02/57P03 (the server
/// shutting down, crashed, or not yet accepting connections), 25006 (read-only transaction: a
/// standby, e.g. during a failover), 58000/58030 (system and I/O errors on the server).
/// Everything else a server sends (a handler's `RAISE`, a constraint, a type error, `57014` a
/// handler over its `statement_timeout_ms`, `XX000` an internal error) is definite: retrying
/// would fail the same way.
pub fn classify(sqlstate: Option<&str>) -> Kind {
    let Some(code) = sqlstate else {
        return Kind::Transient;
    };
    let transient = code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            "40001"
                | "40P01"
                | "40003"
                | "55P03"
                | "57P01"
                | "57P02"
                | "57P03"
                | "25006"
                | "58000"
                | "58030"
        );
    if transient {
        Kind::Transient
    } else {
        Kind::Definite
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_being_away_or_busy_is_transient() {
        for code in [
            None,
            Some("08006"),
            Some("08001"),
            Some("40001"),
            Some("40P01"),
            Some("53300"),
            Some("57P01"),
            Some("57P03"),
            Some("25006"),
            Some("55P03"),
        ] {
            assert_eq!(classify(code), Kind::Transient, "{code:?}");
        }
    }

    #[test]
    fn what_the_record_or_its_handler_did_is_definite() {
        // RAISE EXCEPTION, unique violation, invalid JSON, undefined function, statement
        // timeout, check violation, internal error.
        for code in [
            "P0001",
            "23505",
            "22P02",
            "42883",
            QUERY_CANCELED,
            "23514",
            "XX000",
        ] {
            assert_eq!(classify(Some(code)), Kind::Definite, "{code}");
        }
    }
}
