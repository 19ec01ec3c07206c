#!/usr/bin/env bash
# Checks the deploy/ artefacts of outbox-relay:
#   1. deploy/prometheus/alerts.yml: `promtool check rules` (syntax, PromQL) and
#      `promtool test rules deploy/prometheus/alerts_test.yml` (the rules fire as documented);
#   2. deploy/grafana/outbox-relay.json: the JSON loads, and every panel query is valid PromQL
#      (each one is checked by promtool as a recording rule, dashboard variables substituted);
#   3. every metric name used by the rules, the dashboard and docs/operations.md exists in
#      crates/outbox-relay/src/metrics.rs, and every metric there is documented (Rust tests
#      `metrics::tests` of the outbox-relay crate).
# promtool comes from the Debian package `prometheus`; it is installed when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool missing: installing the Debian package prometheus" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null
  fi
fi

echo "== promtool check rules / test rules"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

echo "== Grafana dashboard: JSON and PromQL of every query"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - deploy/grafana/outbox-relay.json "$tmp/dashboard-rules.yml" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
with open(src) as f:
    dash = json.load(f)
assert dash.get("uid") and dash.get("title"), "dashboard needs uid and title"
exprs = []
for panel in dash["panels"]:
    targets = panel.get("targets", [])
    assert targets, f"panel {panel.get('title')!r} has no query"
    for t in targets:
        expr = t["expr"]
        for var in ("$job", "$instance"):
            expr = expr.replace(var, ".*")
        exprs.append((panel["title"], expr))
with open(out, "w") as f:
    f.write("groups:\n  - name: dashboard-queries\n    rules:\n")
    for i, (title, expr) in enumerate(exprs):
        f.write(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(expr)}\n")
print(f"{len(dash['panels'])} panels, {len(exprs)} queries")
PY
promtool check rules "$tmp/dashboard-rules.yml"

echo "== metric names in rules, dashboard and docs exist in metrics.rs"
cargo test -q -p outbox-relay --lib metrics::tests
