//! One relay, many databases (`[source.<name>]`), end to end:
//! - `failures`: every source streams on its own, and a source's failure stops it alone;
//! - `reload`: SIGHUP changes sources one by one; `setup` and `status` per source;
//! - `share`: three instances share the sources of one config, exactly once through kills and
//!   a rolling restart;
//! - `slow_start`: three instances start together on a slow broker and stop no source;
//! - `network`: sources cut off or black-holed from their database recover alone, and a
//!   SIGTERM restart of the process in the middle loses nothing.
//!
//! The counts come from the environment so that `scripts/sources-heavy.sh` runs the long forms.

mod creation;
mod failures;
mod network;
mod reload;
mod share;
mod slow_start;

use std::time::Duration;

use crate::support::{TestDb, check, eventually, kafka::Rec, kafka_brokers, writer::Written};

/// `var` from the environment, else `default`; never under `min`.
fn count_from_env(var: &str, default: usize, min: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
        .max(min)
}

fn source_section(name: &str, db: &TestDb, extra: &str) -> String {
    format!(
        "[source.{name}]\npostgres = {{ database = \"{db}\", slot = \"{db}\", publication = \
         \"{db}\" }}\n{extra}[[source.{name}.outbox]]\ntable = \"public.outbox\"\n\
         topic = \"{db}.{{aggregatetype}}\"\n\n",
        db = db.name
    )
}

/// `cfg` as the pass runs it: in the fenced pass with a transactional id, as
/// [`TestDb::relay_config`] gives single-database tests one; a config that names its own (the
/// exactly-once tests `share` and `slow_start`) is left as it is.
fn as_the_pass_runs(cfg: String, first: &TestDb) -> String {
    if !crate::support::fenced_pass() || cfg.contains("transactional_id") {
        return cfg;
    }
    cfg.replacen(
        "[kafka]\n",
        &format!(
            "[kafka]\ntransactional_id = \"outbox-relay-{}\"\n",
            first.name
        ),
        1,
    )
}

/// The top level of a multi-source config on the shared test cluster.
fn top_level(first: &TestDb, port: u16) -> String {
    format!(
        "[postgres]\nport = {port}\ncreate_slot = true\n\n[kafka]\nbrokers = \"{brokers}\"\n\
         checkpoint_topic = \"{first}.checkpoints\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n",
        brokers = kafka_brokers(),
        first = first.name,
    )
}

/// Checks what source `i` (`db`) delivered, exactly once, records its figures as
/// `<test>_s<i>` and adds them to `total`.
fn check_source(
    test: &str,
    i: usize,
    db: &TestDb,
    written: &[Written],
    got: &[Rec],
    total: &mut check::Figures,
) {
    let f = check::check(&format!("{test}_s{i:02}"), |t| db.topic(t), written, got);
    f.assert_exactly_once(&format!("source s{i:02}"));
    total.written += f.written;
    total.delivered += f.delivered;
}

/// Waits until every one of `dbs` has its slot complete and active (a relay streams from it):
/// writers started before a slot is complete may commit before its consistent point
/// (`TestDb::slot_streaming_pid`, `creation.rs`).
async fn all_streaming(dbs: &[&TestDb], timeout: Duration) {
    for db in dbs {
        eventually(&format!("{} to stream", db.name), timeout, || async {
            db.slot_streaming_pid().await.map(|_| ())
        })
        .await;
    }
}
