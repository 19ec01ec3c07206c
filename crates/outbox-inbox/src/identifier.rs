//! Table and column names go into SQL text (they cannot be bind parameters), so only plain
//! lowercase identifiers are accepted: nothing to quote, nothing to inject, and the name means
//! what it means in the relay's config and in hand-written SQL.

use crate::Error;

fn is_plain(part: &str) -> bool {
    let mut chars = part.chars();
    part.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A column (or envelope field) name.
pub(crate) fn column(what: &'static str, name: &str) -> Result<String, Error> {
    if is_plain(name) {
        Ok(name.to_string())
    } else {
        Err(Error::InvalidIdentifier {
            what,
            name: name.to_string(),
        })
    }
}

/// A table name, `table` or `schema.table`.
pub(crate) fn table(what: &'static str, name: &str) -> Result<String, Error> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() <= 2 && parts.iter().all(|p| is_plain(p)) {
        Ok(name.to_string())
    } else {
        Err(Error::InvalidIdentifier {
            what,
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names_only() {
        assert!(table("t", "public.outbox").is_ok());
        assert!(table("t", "outbox_2").is_ok());
        for bad in [
            "",
            "Outbox",
            "a.b.c",
            "x; DROP TABLE y",
            "\"q\"",
            "1abc",
            "a.",
        ] {
            assert!(table("t", bad).is_err(), "{bad:?} accepted");
        }
        assert!(column("c", "aggregate_id").is_ok());
        assert!(column("c", "a.b").is_err());
    }
}
