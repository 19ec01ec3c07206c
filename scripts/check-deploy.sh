#!/usr/bin/env bash
# Checks the deploy/ artefacts of outbox-relay:
#   1. deploy/prometheus/alerts.yml: `promtool check rules` (syntax, PromQL) and
#      `promtool test rules deploy/prometheus/alerts_test.yml` (the rules fire as documented);
#   2. deploy/grafana/outbox-relay.json: the JSON loads, and every panel query is valid PromQL
#      (each one is checked by promtool as a recording rule, dashboard variables substituted);
#   3. every metric name used by the rules, the dashboard and docs/operations.md exists in
#      crates/outbox-relay/src/metrics.rs, and every metric there is documented (Rust tests
#      `metrics::tests` of the outbox-relay crate);
#   4. the compose stack: docker-compose.yml (`docker-compose config`, no engine needed), the
#      Prometheus config it mounts (`promtool check config`), Alertmanager's (`amtool
#      check-config`), Grafana's provisioning (data source and dashboard provider);
#   5. deploy/kubernetes/: every manifest against the Kubernetes API schemas
#      (`kubernetes-validate --strict`, schemas bundled, offline); the PodMonitor (a CRD the
#      bundled schemas lack) for the fields the Prometheus Operator needs.
# promtool, amtool and docker-compose come from the Debian packages prometheus,
# prometheus-alertmanager and docker-compose, kubernetes-validate from PyPI; installed when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

apt_install() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "$1 missing: installing the Debian package $2" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$2" >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$2" >/dev/null
  fi
  # Debian starts the daemons it installs where it can; nothing here needs them running.
  pkill -x prometheus 2>/dev/null || true
  pkill -f prometheus-alertmanager 2>/dev/null || true
}
apt_install promtool prometheus
apt_install amtool prometheus-alertmanager
apt_install docker-compose docker-compose
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "kubernetes-validate missing: installing it from PyPI" >&2
  python3 -m pip install -q kubernetes-validate==1.37.0
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

echo "== compose stack: docker-compose.yml, Prometheus, Alertmanager, Grafana provisioning"
docker-compose -f docker-compose.yml config -q
promtool check config deploy/prometheus/prometheus.yml
amtool check-config deploy/alertmanager/alertmanager.yml
python3 - <<'PY'
import yaml
ds = yaml.safe_load(open("deploy/grafana/provisioning/datasources/prometheus.yml"))
assert [d["type"] for d in ds["datasources"]] == ["prometheus"], ds
dash = yaml.safe_load(open("deploy/grafana/provisioning/dashboards/outbox-relay.yml"))
path = dash["providers"][0]["options"]["path"]
compose = yaml.safe_load(open("docker-compose.yml"))
mounts = compose["services"]["grafana"]["volumes"]
assert any(m.endswith(":" + path + "/outbox-relay.json:ro") for m in mounts), (path, mounts)
prom = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))
assert "outbox-relay" in [j["job_name"] for j in prom["scrape_configs"]], "job name the rules use"
print("grafana provisioning and prometheus job ok")
PY

echo "== Kubernetes manifests (deploy/kubernetes)"
kubernetes-validate --strict --quiet deploy/kubernetes/configmap.yaml deploy/kubernetes/secret.yaml \
  deploy/kubernetes/deployment.yaml deploy/kubernetes/pdb.yaml
python3 - <<'PY'
import yaml
pm = yaml.safe_load(open("deploy/kubernetes/podmonitor.yaml"))
assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["kind"] == "PodMonitor"
dep = yaml.safe_load(open("deploy/kubernetes/deployment.yaml"))
labels = dep["spec"]["template"]["metadata"]["labels"]
assert all(labels.get(k) == v for k, v in pm["spec"]["selector"]["matchLabels"].items())
ports = [p["name"] for c in dep["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
assert all(e["port"] in ports for e in pm["spec"]["podMetricsEndpoints"]), ports
probe = dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
assert probe == "/readyz?role=any", "a passive pod must be able to be ready (docs/operations.md)"
print("podmonitor and probes ok")
PY
