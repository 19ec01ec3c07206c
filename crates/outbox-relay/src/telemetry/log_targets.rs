//! `RUST_LOG` written for the module paths before the re-housing of 2026-12-06 keeps selecting
//! the same lines.
//!
//! A log line's target is the module that wrote it, so moving modules moved targets: the relay's
//! `outbox_relay::source` is now `outbox_relay::postgres::session`, the applier left
//! `outbox_relay::apply` for its own crate `outbox_apply`, the HTTP endpoint and librdkafka's
//! forwarded lines live in `outbox_service`. An operator's `RUST_LOG=outbox_relay::source=debug`
//! would silently select nothing. Invariant: every directive naming an old path is kept and
//! joined by the same directive on each path its code lives at now; directives naming current
//! paths pass through unchanged (no current top-level module reuses an old name with another
//! meaning), so the translation only ever adds lines, never hides one.

/// Old top-level module of `outbox_relay` → where its code logs from now.
const MOVED: &[(&str, &[&str])] = &[
    ("alert", &["outbox_relay::observe::alert"]),
    ("apply", &["outbox_apply"]),
    (
        "apply_cli",
        &["outbox_apply::cli", "outbox_relay::cli::apply"],
    ),
    ("budget", &["outbox_relay::sink::budget"]),
    ("carry", &["outbox_relay::postgres::carry"]),
    ("checkpoint", &["outbox_relay::sink::checkpoint_topic"]),
    ("failover", &["outbox_relay::postgres::failover"]),
    ("fleet", &["outbox_relay::supervise::fleet"]),
    ("health", &["outbox_relay::observe::health"]),
    ("heartbeat", &["outbox_relay::supervise::heartbeat"]),
    ("http", &["outbox_service::http"]),
    ("http_client", &["outbox_service::http_client"]),
    ("monitor", &["outbox_relay::observe::monitor"]),
    ("outbox_health", &["outbox_relay::observe::outbox_tables"]),
    ("passive", &["outbox_relay::postgres::passive"]),
    ("pg", &["outbox_relay::postgres::control"]),
    ("publication", &["outbox_relay::postgres::publication"]),
    ("reader_thread", &["outbox_relay::postgres::reader_thread"]),
    ("replication_role", &["outbox_relay::postgres::role"]),
    ("run", &["outbox_relay::supervise::run"]),
    ("setup", &["outbox_relay::postgres::setup"]),
    // librdkafka's lines were written from the sink for every client, the applier's included.
    ("sink", &["outbox_relay::sink", "outbox_service::kafka_log"]),
    ("slot", &["outbox_relay::postgres::slot"]),
    ("slot_keeper", &["outbox_relay::supervise::slot_keeper"]),
    ("source", &["outbox_relay::postgres::session"]),
    ("source_scope", &["outbox_relay::telemetry::source_scope"]),
    ("standby", &["outbox_relay::postgres::standby"]),
    ("state", &["outbox_relay::postgres::state_file"]),
    ("status", &["outbox_relay::observe::status"]),
    ("stop", &["outbox_relay::pipeline::stop"]),
    ("tls", &["outbox_relay::postgres::tls"]),
    ("webhook", &["outbox_relay::observe::webhook"]),
];

/// The applier's old modules (`outbox_relay::apply::<module>`) → their place in `outbox_apply`.
const APPLY_MOVED: &[(&str, &str)] = &[
    ("assignment", "outbox_apply::partition::assignment"),
    ("error", "outbox_apply::error"),
    ("handler", "outbox_apply::postgres::handler"),
    ("partition", "outbox_apply::partition"),
    ("pool", "outbox_apply::postgres::pool"),
    ("reader", "outbox_apply::kafka::reader"),
    ("rebalance", "outbox_apply::kafka::rebalance"),
    ("record", "outbox_apply::record"),
    ("redrive", "outbox_apply::operate::redrive"),
    ("retention", "outbox_apply::retention"),
    ("status", "outbox_apply::operate::status"),
    ("store", "outbox_apply::postgres::store"),
    ("txn", "outbox_apply::postgres::txn"),
];

/// Old modules in `MOVED` that are still current top-level modules: their submodules stayed.
const STILL_HERE: &[&str] = &["sink"];

/// The crates that were all `outbox_relay` before: a bare `outbox_relay` directive covers them.
const SPLIT_OFF: &[&str] = &["outbox_apply", "outbox_service"];

/// `RUST_LOG`'s directives with every old module path joined by its current ones.
pub fn translate(directives: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for directive in directives.split(',') {
        let directive = directive.trim();
        if directive.is_empty() {
            continue;
        }
        out.push(directive.to_string());
        // A directive is `target[span{fields}]=level`, `target=level`, `target` or `level`.
        let end = directive.find(['[', '=']).unwrap_or(directive.len());
        let (target, rest) = directive.split_at(end);
        for new_target in current_paths(target) {
            let joined = format!("{new_target}{rest}");
            if !out.contains(&joined) {
                out.push(joined);
            }
        }
    }
    out.join(",")
}

/// The current paths an old target names, or none when it names no moved module.
fn current_paths(target: &str) -> Vec<String> {
    if target == "outbox_relay" {
        return SPLIT_OFF.iter().map(|c| (*c).to_string()).collect();
    }
    let Some(path) = target.strip_prefix("outbox_relay::") else {
        return Vec::new();
    };
    let (head, tail) = match path.split_once("::") {
        Some((head, tail)) => (head, Some(tail)),
        None => (path, None),
    };
    if tail.is_some() && STILL_HERE.contains(&head) {
        // `outbox_relay::sink::kick` is where it was: only the module's own lines moved.
        return Vec::new();
    }
    if let (&"apply", Some(tail)) = (&head, tail) {
        let (module, rest) = match tail.split_once("::") {
            Some((module, rest)) => (module, Some(rest)),
            None => (tail, None),
        };
        let Some((_, new)) = APPLY_MOVED.iter().find(|(old, _)| *old == module) else {
            return Vec::new();
        };
        return vec![match rest {
            Some(rest) => format!("{new}::{rest}"),
            None => (*new).to_string(),
        }];
    }
    let Some((_, news)) = MOVED.iter().find(|(old, _)| *old == head) else {
        return Vec::new();
    };
    news.iter()
        .filter(|new| **new != target)
        .map(|new| match tail {
            Some(tail) => format!("{new}::{tail}"),
            None => (*new).to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn current_paths_and_levels_pass_through_unchanged() {
        for d in [
            "info",
            "info,outbox_relay::pipeline=debug",
            "outbox_relay::postgres::session=trace",
            "rdkafka=warn,outbox_apply=debug",
            "outbox_relay::sink::checkpoint_topic[checkpoint]=debug",
        ] {
            assert_eq!(translate(d), d, "{d}");
        }
    }

    #[test]
    fn an_old_path_keeps_selecting_the_code_that_moved() {
        assert_eq!(
            translate("info,outbox_relay::source=debug"),
            "info,outbox_relay::source=debug,outbox_relay::postgres::session=debug"
        );
        assert_eq!(
            translate("outbox_relay::state"),
            "outbox_relay::state,outbox_relay::postgres::state_file"
        );
        assert_eq!(
            translate("outbox_relay::checkpoint[x{a=1}]=trace"),
            "outbox_relay::checkpoint[x{a=1}]=trace,outbox_relay::sink::checkpoint_topic[x{a=1}]=trace"
        );
        assert_eq!(
            translate("outbox_relay=debug"),
            "outbox_relay=debug,outbox_apply=debug,outbox_service=debug"
        );
        assert_eq!(
            translate("outbox_relay::apply::reader=debug"),
            "outbox_relay::apply::reader=debug,outbox_apply::kafka::reader=debug"
        );
        assert_eq!(
            translate("outbox_relay::apply::partition::assignment=trace"),
            "outbox_relay::apply::partition::assignment=trace,outbox_apply::partition::assignment=trace"
        );
        assert_eq!(
            translate("outbox_relay::apply=info"),
            "outbox_relay::apply=info,outbox_apply=info"
        );
        assert_eq!(
            translate("outbox_relay::sink=debug"),
            "outbox_relay::sink=debug,outbox_service::kafka_log=debug"
        );
    }

    #[test]
    fn a_name_that_only_begins_like_an_old_module_is_not_moved() {
        // `stop` moved; `stopper` never existed and must not be rewritten as `stop`.
        assert_eq!(
            translate("outbox_relay::stopper=debug"),
            "outbox_relay::stopper=debug"
        );
        assert_eq!(translate("outbox_relayx=debug"), "outbox_relayx=debug");
        assert_eq!(translate(" info , ,warn"), "info,warn");
    }
}
