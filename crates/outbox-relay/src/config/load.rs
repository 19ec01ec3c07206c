//! Loading the relay's config with the shared loader (`outbox_service::config::load`): the file
//! is parsed into a TOML table, `OUTBOX_RELAY__*` variables are laid over it, `[postgres]`'s
//! connection keys are taken out ([`PgConnection::take`]), and the rest is deserialized into
//! [`Config`]. A deserialization error is rewritten to name
//! the option in full (`http.listen = "x": ...`) and the variable that set it, if any.

use std::path::Path;

use relay_core::route::{MessageRoute, OutboxTable};

use outbox_service::config::load::{Origins, name_the_option, read_table};

use super::{Config, ConfigError, PgConnection, PostgresConfig};

pub(super) fn from_file_and_environment(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let (mut table, origins) = read_table(path, env)?;
    // `[source.<name>]` tables: each is a config of its own over the rest of the file.
    let sources = table.remove("source");
    let mut cfg = build(table.clone(), "", &origins)?;
    if let Some(sources) = sources {
        cfg.sources =
            super::sources::expand(&table, sources, |t, prefix| build(t, prefix, &origins))?;
    }
    Ok(cfg)
}

/// One [`Config`] from its table; errors name options under `prefix` (`source.<name>`).
fn build(mut table: toml::Table, prefix: &str, origins: &Origins) -> Result<Config, ConfigError> {
    // `[postgres]`'s connection keys are the shared section's; the rest are `PostgresConfig`'s.
    let connection = PgConnection::take::<PostgresConfig>(
        &mut table,
        super::postgres::APPLICATION_NAME,
        prefix,
        origins,
    )?;
    let under = |key: String| match prefix {
        "" => key,
        p => format!("{p}.{key}"),
    };
    // `[[outbox]]` entries one by one first: toml does not say which entry of an array failed.
    if let Some(toml::Value::Array(entries)) = table.get("outbox") {
        for (i, entry) in entries.iter().enumerate() {
            if let Err(e) = entry.clone().try_into::<OutboxTable>() {
                let prefix = under(format!("outbox[{i}]"));
                return Err(ConfigError::Parse(name_the_option(
                    &e, entry, &prefix, origins,
                )));
            }
        }
    }
    if let Some(toml::Value::Array(entries)) = table.get("message") {
        for (i, entry) in entries.iter().enumerate() {
            if let Err(e) = entry.clone().try_into::<MessageRoute>() {
                let prefix = under(format!("message[{i}]"));
                return Err(ConfigError::Parse(name_the_option(
                    &e, entry, &prefix, origins,
                )));
            }
        }
    }
    // `[[message]]` sections and no `outbox` key: a table-less outbox, not the default table.
    let tableless = !table.contains_key("outbox") && table.contains_key("message");
    let root = toml::Value::Table(table);
    let mut cfg: Config = root
        .clone()
        .try_into()
        .map_err(|e| ConfigError::Parse(name_the_option(&e, &root, prefix, origins)))?;
    if tableless {
        cfg.outbox.clear();
    }
    cfg.postgres.connection = connection;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::super::{Secret, test_support::load};

    #[test]
    fn environment_overrides_the_file_with_typed_values() {
        let c = load(
            "[postgres]\nport = 1\n",
            &[
                ("OUTBOX_RELAY__POSTGRES__PORT", "6543"),
                ("OUTBOX_RELAY__POSTGRES__PASSWORD", "12345"),
                ("OUTBOX_RELAY__RELAY__RELAY_HEADERS", "false"),
                ("OTHER", "ignored"),
            ],
        )
        .unwrap();
        assert_eq!(c.postgres.port, 6543);
        assert_eq!(
            c.postgres.password.as_ref().map(Secret::expose),
            Some("12345")
        );
        assert!(!c.relay.relay_headers);
    }

    #[test]
    fn unknown_keys_are_rejected_in_file_and_environment_with_their_full_name() {
        let e = load("[postgres]\nhots = \"x\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("postgres.hots: unknown field `hots`, expected one of"),
            "{e}"
        );
        let e = load("", &[("OUTBOX_RELAY__KAFKA__BROKER", "x")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kafka.broker (from OUTBOX_RELAY__KAFKA__BROKER): unknown field `broker`"),
            "{e}"
        );
        let e = load("[postgres]\npasword = \"hunter2\"\n", &[]).unwrap_err();
        assert!(
            e.to_string().contains("postgres.pasword: unknown field"),
            "{e}"
        );
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = load("[postgress]\n", &[]).unwrap_err().to_string();
        assert!(e.contains("postgress: unknown field `postgress`"), "{e}");
        let e = load("[[outbox]]\ntable = \"public.o\"\nkey = \"k\"\n", &[]).unwrap_err();
        assert!(
            e.to_string().contains("outbox[0].key: unknown field `key`"),
            "{e}"
        );
    }

    #[test]
    fn environment_variables_that_name_no_key_are_rejected() {
        for var in ["OUTBOX_RELAY__", "OUTBOX_RELAY__HTTP____LISTEN"] {
            let e = load("", &[(var, "x")]).unwrap_err().to_string();
            assert!(
                e.contains(var) && e.contains("does not name a config key"),
                "{e}"
            );
        }
        let e = load(
            "[postgres]\nport = 1\n",
            &[("OUTBOX_RELAY__POSTGRES__PORT__X", "1")],
        );
        assert!(e.unwrap_err().to_string().contains("POSTGRES__PORT__X"));
    }

    /// Typed values (ports, numbers, booleans, addresses, enums, strings) that do not parse:
    /// the error names the full key and the value, in the file and from the environment.
    #[test]
    fn a_value_of_the_wrong_type_names_its_key_in_the_file_and_the_environment() {
        for (toml, env, needle) in [
            (
                "[http]\nlisten = \"not-an-address\"\n",
                None,
                "http.listen = \"not-an-address\": invalid socket address syntax; use host:port",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__HTTP__LISTEN", "not-an-address")),
                "http.listen = \"not-an-address\" (from OUTBOX_RELAY__HTTP__LISTEN): invalid \
                 socket address syntax",
            ),
            (
                "[postgres]\nport = 70000\n",
                None,
                "postgres.port = 70000: invalid value: integer `70000`, expected u16; use a \
                 whole number from 0 to 65535",
            ),
            ("[postgres]\nport = true\n", None, "postgres.port = true: "),
            (
                "",
                Some(("OUTBOX_RELAY__POSTGRES__PORT", "70000")),
                "postgres.port = \"70000\" (from OUTBOX_RELAY__POSTGRES__PORT): number too \
                 large",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__HTTP__ENABLED", "yes")),
                "http.enabled = \"yes\" (from OUTBOX_RELAY__HTTP__ENABLED): provided string \
                 was not `true` or `false`; use true or false",
            ),
            ("[http]\nenabled = 1\n", None, "http.enabled = 1: "),
            (
                "[relay]\nstatus_interval_ms = \"soon\"\n",
                None,
                "relay.status_interval_ms = \"soon\": invalid digit",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__RELAY__BUFFER_EVENTS", "-1")),
                "relay.buffer_events = \"-1\" (from OUTBOX_RELAY__RELAY__BUFFER_EVENTS)",
            ),
            (
                "",
                Some(("OUTBOX_RELAY__RELAY__ON_POISON", "skip")),
                "relay.on_poison = \"skip\" (from OUTBOX_RELAY__RELAY__ON_POISON): unknown \
                 variant `skip`",
            ),
            (
                "[postgres]\nsslmode = \"require\"\n",
                None,
                "postgres.sslmode = \"require\": unknown variant",
            ),
            (
                "[kafka]\nsecurity_protocol = 5\n",
                None,
                "kafka.security_protocol = 5: invalid type",
            ),
            (
                "[postgres]\nhost = 5\n",
                None,
                "postgres.host = 5: invalid type",
            ),
            (
                "[[outbox]]\ntable = 5\n",
                None,
                "outbox[0].table = 5: invalid type",
            ),
            ("http = 5\n", None, "http = 5: invalid type"),
            (
                "",
                Some(("OUTBOX_RELAY__ALERTS__WEBHOOK__TIMEOUT_MS", "5s")),
                "alerts.webhook.timeout_ms = \"5s\" (from \
                 OUTBOX_RELAY__ALERTS__WEBHOOK__TIMEOUT_MS)",
            ),
        ] {
            let env: Vec<_> = env.into_iter().collect();
            let e = load(toml, &env).unwrap_err().to_string();
            assert!(
                e.contains(needle),
                "{toml:?} {env:?}\n -> {e}\n wanted {needle}"
            );
        }
    }

    #[test]
    fn errors_never_repeat_a_secret_value() {
        let e = load("", &[("OUTBOX_RELAY__KAFKA__PROPERTIES", "s3cr3t")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kafka.properties (from OUTBOX_RELAY__KAFKA__PROPERTIES)"),
            "{e}"
        );
        assert!(!e.contains("s3cr3t") && e.contains("expected a map"), "{e}");
        // Only the quoted value is redacted, not its letters elsewhere in the message.
        let e = load("", &[("OUTBOX_RELAY__KAFKA__PROPERTIES", "x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("string \"<redacted>\", expected a map"), "{e}");
    }

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
        assert_eq!(c.postgres.password.as_ref().unwrap().expose(), "12345");
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
