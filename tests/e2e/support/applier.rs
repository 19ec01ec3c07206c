//! What the applier's end-to-end tests share: an `Add` event as the relay publishes it, an
//! effect table with its handler, an applier config, `apply setup` and the one-shot `apply`
//! subcommands.

use std::{path::Path, process::Output, time::Duration};

use rdkafka::{
    ClientConfig,
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};

use super::{TestDb, kafka_brokers, relay::Relay};

pub async fn count(db: &TestDb, sql: &str) -> i64 {
    db.client.query_one(sql, &[]).await.unwrap().get(0)
}

pub fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap()
}

/// One event as the relay publishes it: headers `id` and `eventType` (`Add`), value `{"n": n}`.
pub async fn send(p: &FutureProducer, topic: &str, id: &str, n: i64) {
    send_event(p, topic, id, "Add", &format!("{{\"n\": {n}}}")).await
}

/// One event with headers `id` and `eventType` and key `k`.
pub async fn send_event(p: &FutureProducer, topic: &str, id: &str, event_type: &str, value: &str) {
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "id",
            value: Some(id),
        })
        .insert(Header {
            key: "eventType",
            value: Some(event_type),
        });
    p.send(
        FutureRecord::to(topic)
            .key("k")
            .payload(value)
            .headers(headers),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
}

/// The effect table and its handler: one row per applied event, naming the instance (its
/// `application_name`) and the topic; `sleep` seconds of work per event.
pub async fn effect_schema(db: &TestDb, sleep: f64) {
    db.client
        .batch_execute(&format!(
            "CREATE TABLE effects (event_id text NOT NULL, n int NOT NULL, topic text NOT NULL,
               applied_by text NOT NULL);
             CREATE FUNCTION add_effect(v jsonb, id text, t text) RETURNS void LANGUAGE sql AS $$
               SELECT pg_sleep({sleep});
               INSERT INTO effects VALUES (id, (v->>'n')::int, t, current_setting('application_name'));
             $$;"
        ))
        .await
        .unwrap();
}

pub fn config(db: &TestDb, subscription: &str, instance: &str, extra_kafka: &str) -> String {
    format!(
        "[postgres]\nport = {}\ndatabase = \"{}\"\napplication_name = \"{instance}\"\n\n\
         [kafka]\nbrokers = \"{}\"\ngroup_id = \"{}-group\"\n{subscription}\n{extra_kafka}\n\
         [apply]\nconsumer = \"edges\"\n\n[[handler]]\nevent_type = \"Add\"\n\
         sql = \"SELECT add_effect(:value, :event_id, :topic)\"\n\n\
         [http]\nlisten = \"127.0.0.1:{}\"\n",
        db.port,
        db.name,
        kafka_brokers(),
        db.name,
        crate::support::http::free_port()
    )
}

/// The `ops` handler's table and function: `ops_add` raises on a negative `n` and otherwise
/// records it in `ops_sum` with the event id.
pub async fn ops_schema(db: &TestDb) {
    db.client
        .batch_execute(
            "CREATE TABLE ops_sum (n int NOT NULL, event_id text NOT NULL);
             CREATE FUNCTION ops_add(v jsonb, id text) RETURNS void LANGUAGE plpgsql AS $$
             BEGIN
               IF (v->>'n')::int < 0 THEN RAISE EXCEPTION 'negative %', v->>'n'; END IF;
               INSERT INTO ops_sum VALUES ((v->>'n')::int, id);
             END $$;",
        )
        .await
        .unwrap();
}

/// The `ops` handler's call.
pub const OPS_ADD: &str = "SELECT ops_add(:value, :event_id)";

/// An applier of `db` subscribed to `topic` (group `<db>-group`), with `sections` (`[apply]`,
/// its handlers, …) and its endpoint on `port` (`None`: no endpoint).
pub fn subscribed_config(db: &TestDb, topic: &str, sections: &str, port: Option<u16>) -> String {
    let http = match port {
        Some(port) => format!("listen = \"127.0.0.1:{port}\""),
        None => "enabled = false".into(),
    };
    format!(
        "[postgres]\nport = {}\ndatabase = \"{}\"\n\n[kafka]\nbrokers = \"{}\"\n\
         group_id = \"{}-group\"\ntopics = [\"{topic}\"]\n\n{sections}\n[http]\n{http}\n",
        db.port,
        db.name,
        kafka_brokers(),
        db.name
    )
}

/// Consumer `ops` of `topic` with `on_failure = policy` and one handler of `Add` events running
/// `sql` ([`subscribed_config`]).
pub fn ops_config(db: &TestDb, topic: &str, policy: &str, sql: &str, port: Option<u16>) -> String {
    let sections = format!(
        "[apply]\nconsumer = \"ops\"\non_failure = \"{policy}\"\n\n\
         [[handler]]\nevent_type = \"Add\"\nsql = \"{sql}\"\n"
    );
    subscribed_config(db, topic, &sections, port)
}

/// `apply setup` with `cfg`, which must succeed.
pub fn setup(db: &TestDb, cfg: &str) {
    let (status, log) = Relay::once(&format!("{}-setup", db.name), cfg, &["apply", "setup"], &[]);
    assert!(status.success(), "apply setup: {log}");
}

/// `outbox-relay apply <action> --config <config> <args>`, run to its end (warnings only).
pub fn apply_cmd(action: &str, config: &Path, args: &[&str]) -> Output {
    std::process::Command::new(super::relay::binary())
        .args(["apply", action, "--config"])
        .arg(config)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}
