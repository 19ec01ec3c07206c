//! The metric names against the files that use them: code, docs, alert rules, dashboard.
use std::collections::BTreeSet;

use super::*;

fn repo_file(rel: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Every `outbox_relay_*` token in `text`, histogram suffixes stripped.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("outbox_relay_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let mut name = &tail[..end];
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix)
                && known().contains(base)
            {
                name = base;
            }
        }
        if name.len() > "outbox_relay_".len() {
            out.insert(name.to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// The relay's names and the applier's (both programs' series are documented together).
fn known() -> BTreeSet<String> {
    ALL.iter()
        .chain(outbox_apply::telemetry::metrics::ALL)
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn names_follow_prometheus_conventions_and_render_unchanged() {
    let recorder = builder().unwrap().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        describe();
        init(crate::observe::alert::LABELS);
        metrics::histogram!(COMMIT_TO_ACK_SECONDS).record(0.2);
        // The applier's names too (its recorder differs from this one only in its buckets).
        for g in known().iter().filter(|n| !n.ends_with("_total")) {
            metrics::gauge!(g.clone()).set(1.0);
        }
        for c in known().iter().filter(|n| n.ends_with("_total")) {
            metrics::counter!(c.clone()).increment(1);
        }
    });
    let text = handle.render();
    for name in known() {
        assert!(name.starts_with("outbox_relay_"), "{name}");
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} missing or renamed by the exporter:\n{text}"
        );
    }
    assert!(text.contains(&format!("# TYPE {COMMIT_TO_ACK_SECONDS} histogram")));
    assert!(text.contains(&format!("{ALERT_LEVEL}{{alert=\"retained_wal\"}} 0")));
}

#[test]
fn operations_doc_alert_rules_and_dashboard_name_only_existing_metrics() {
    let known = known();
    for file in [
        "docs/operations.md",
        "deploy/prometheus/alerts.yml",
        "deploy/prometheus/alerts_test.yml",
        "deploy/grafana/outbox-relay.json",
    ] {
        let unknown: Vec<_> = names_in(&repo_file(file))
            .into_iter()
            .filter(|n| !known.contains(n))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} names unknown metrics {unknown:?}"
        );
    }
}

#[test]
fn every_metric_is_documented_in_operations_md() {
    let documented = names_in(&repo_file("docs/operations.md"));
    let missing: Vec<_> = known().difference(&documented).cloned().collect();
    assert!(missing.is_empty(), "docs/operations.md lacks {missing:?}");
}

#[test]
fn dashboard_is_valid_json_and_every_panel_query_names_a_metric() {
    let v: serde_json::Value =
        serde_json::from_str(&repo_file("deploy/grafana/outbox-relay.json")).unwrap();
    let panels = v["panels"].as_array().expect("dashboard has panels");
    let mut exprs = 0;
    for p in panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("every target has an expr");
            assert!(!names_in(expr).is_empty(), "query names no metric: {expr}");
            exprs += 1;
        }
    }
    assert!(exprs >= 10, "only {exprs} queries");
    assert!(v["title"].is_string() && v["uid"].is_string());
}
