use super::super::{Delivery, Secret, test_support::load};

const TWO: &str = r#"
[postgres]
host = "db.internal"
user = "relay"
create_slot = true

[kafka]
brokers = "k:9092"
transactional_id = "relay"

[relay]
state_file = "/var/lib/outbox-relay/state.json"

[source.orders.postgres]
database = "orders"
slot = "outbox_orders"

[source.billing]
postgres = { database = "billing", slot = "outbox_billing", port = 6432 }
relay = { delivery = "exactly-once" }
[[source.billing.outbox]]
table = "public.billing_outbox"
"#;

#[test]
fn each_source_is_the_top_level_with_its_own_sections_laid_over() {
    let c = load(TWO, &[]).unwrap();
    assert_eq!(c.sources.len(), 2);
    let names: Vec<_> = c.streams().iter().map(|s| s.source.clone()).collect();
    assert_eq!(
        names,
        [Some("billing".to_string()), Some("orders".to_string())]
    );
    let (billing, orders) = (&c.sources[0], &c.sources[1]);
    // Inherited key by key, overridden where the source says so.
    assert_eq!(orders.postgres.host, "db.internal");
    assert_eq!(orders.postgres.user, "relay");
    assert!(orders.postgres.create_slot);
    assert_eq!(orders.postgres.port, 5432);
    assert_eq!(billing.postgres.port, 6432);
    assert_eq!(
        (
            orders.postgres.database.as_str(),
            orders.postgres.slot.as_str()
        ),
        ("orders", "outbox_orders")
    );
    assert_eq!(billing.relay.delivery, Delivery::ExactlyOnce);
    assert_eq!(orders.relay.delivery, Delivery::AtLeastOnce);
    assert_eq!(billing.kafka.brokers, "k:9092");
    // Arrays are replaced whole.
    assert_eq!(billing.outbox.len(), 1);
    assert_eq!(billing.outbox[0].table, "public.billing_outbox");
    assert_eq!(orders.outbox, c.outbox);
    // What must not be shared is derived per source.
    assert_eq!(
        orders.kafka.transactional_id.as_deref(),
        Some("relay.source.orders")
    );
    assert_eq!(
        orders.relay.state_file.as_deref(),
        Some(std::path::Path::new(
            "/var/lib/outbox-relay/state.orders.json"
        ))
    );
    assert_eq!(
        billing.relay.state_file.as_deref(),
        Some(std::path::Path::new(
            "/var/lib/outbox-relay/state.billing.json"
        ))
    );
}

#[test]
fn a_file_without_sources_is_one_stream_unchanged() {
    let c = load("[kafka]\ntransactional_id = \"relay\"\n", &[]).unwrap();
    assert!(c.sources.is_empty() && c.source.is_none());
    let streams = c.streams();
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].kafka.transactional_id.as_deref(), Some("relay"));
}

#[test]
fn a_source_may_keep_an_explicit_transactional_id() {
    // Moving a single-database relay into a multi-source file: its id (and fencing) stay.
    let toml = format!("{TWO}\n[source.orders.kafka]\ntransactional_id = \"relay\"\n");
    let c = load(&toml, &[]).unwrap();
    assert_eq!(
        c.sources[1].kafka.transactional_id.as_deref(),
        Some("relay")
    );
    assert_eq!(
        c.sources[0].kafka.transactional_id.as_deref(),
        Some("relay.source.billing")
    );
}

#[test]
fn environment_variables_address_a_source_by_name() {
    let c = load(
        TWO,
        &[
            ("OUTBOX_RELAY__SOURCE__ORDERS__POSTGRES__PASSWORD", "s3cr3t"),
            ("OUTBOX_RELAY__SOURCE__BILLING__POSTGRES__PORT", "7000"),
            ("OUTBOX_RELAY__POSTGRES__PASSWORD", "shared"),
        ],
    )
    .unwrap();
    assert_eq!(c.sources[0].postgres.port, 7000);
    assert_eq!(
        c.sources[1].postgres.password.as_ref().map(Secret::expose),
        Some("s3cr3t")
    );
    assert_eq!(
        c.sources[0].postgres.password.as_ref().map(Secret::expose),
        Some("shared")
    );
    let e = load(
        TWO,
        &[("OUTBOX_RELAY__SOURCE__ORDERS__POSTGRES__PORT", "x")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "source.orders.postgres.port = \"x\" (from OUTBOX_RELAY__SOURCE__ORDERS__POSTGRES__PORT)"
        ),
        "{e}"
    );
}

#[test]
fn sources_are_checked_and_named() {
    for (extra, needle) in [
        (
            "[source.Orders.postgres]\nslot = \"x\"\n",
            "a source name is 1 to 48 of a-z, 0-9 and _",
        ),
        (
            "[source.a.http]\nlisten = \"0.0.0.0:1\"\n",
            "source.a.http: not a per-source setting",
        ),
        (
            "[source.a.postgres]\nslot = \"outbox_orders\"\n",
            "source.orders.postgres.slot = \"outbox_orders\": source.a uses the same slot",
        ),
        (
            "[source.a.postgres]\nslot = \"a\"\nhots = \"h\"\n",
            "source.a.postgres.hots: unknown field",
        ),
        (
            "[source.a.postgres]\nslot = \"a\"\n[source.a.relay]\nstate_file = \
             \"/var/lib/outbox-relay/state.orders.json\"\n",
            "source.orders.relay.state_file",
        ),
        (
            "[source.a.postgres]\nslot = \"a\"\n[source.a.kafka]\ntransactional_id = \
             \"relay.source.orders\"\n",
            "is also source.a's",
        ),
        (
            "[source.a]\npostgres = { slot = \"a\" }\nrelay = { max_sources = 2 }\n",
            "source.a.relay.max_sources: the limit is the process's",
        ),
        (
            "[source.a]\npostgres = { slot = \"a\" }\nrelay = { max_in_flight_bytes_total = 2 }\n",
            "source.a.relay.max_in_flight_bytes_total: the limit is the process's",
        ),
        (
            "[source.a.postgres]\nslot = \"Bad-Slot\"\n",
            "source.a: postgres.slot",
        ),
        (
            "[source.a]\npostgres = { slot = \"a\" }\nrelay = { delivery = \"exactly-once\" \
             }\nkafka = { transactional_id = \"\" }\n",
            "source.a",
        ),
    ] {
        let e = load(&format!("{TWO}\n{extra}"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{extra:?}\n -> {e}\n wanted {needle}");
    }
    let e = load("source = 5\n", &[]).unwrap_err().to_string();
    assert!(e.contains("expected one table per database"), "{e}");
    let e = load("[source]\n", &[]).unwrap_err().to_string();
    assert!(e.contains("no [source.<name>] table"), "{e}");
}

#[test]
fn a_source_error_never_repeats_its_secret() {
    let e = load(
        TWO,
        &[("OUTBOX_RELAY__SOURCE__ORDERS__KAFKA__PROPERTIES", "s3cr3t")],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("source.orders.kafka.properties"), "{e}");
    assert!(!e.contains("s3cr3t"), "{e}");
}
