#!/usr/bin/env bash
# Checks the deploy/ and release artefacts of outbox-relay:
#   1. deploy/prometheus/alerts.yml: `promtool check rules` (syntax, PromQL) and
#      `promtool test rules deploy/prometheus/alerts_test.yml` (the rules fire as documented);
#   2. deploy/grafana/outbox-relay.json: the JSON loads, and every panel query is valid PromQL
#      (each one is checked by promtool as a recording rule, dashboard variables substituted);
#   3. every metric name used by the rules, the dashboard and docs/operations.md exists in
#      crates/outbox-relay/src/telemetry/metrics/mod.rs or (the applier's)
#      crates/outbox-apply/src/telemetry/metrics.rs, and every metric there is documented (Rust tests
#      `metrics::tests` of the outbox-relay crate, which check both lists);
#   4. the compose stack: docker-compose.yml (`docker-compose config`, no engine needed), the
#      Prometheus config it mounts (`promtool check config`), Alertmanager's (`amtool
#      check-config`), Grafana's provisioning (data source and dashboard provider);
#   5. deploy/kubernetes/: every manifest against the Kubernetes API schemas
#      (`kubernetes-validate --strict`, schemas bundled, offline); the PodMonitor (a CRD the
#      bundled schemas lack) against the Prometheus Operator's own CRD schema (its
#      openAPIV3Schema, unknown fields rejected, with Python jsonschema), and its selector and
#      port against the Deployment's;
#   6. the relay configs: examples/relay.toml, the ConfigMap's relay.toml and the many-databases
#      example's (deploy/kubernetes/many-databases/relay.yaml) pass
#      `outbox-relay check-config` (parses and validates; connects to nothing), and the
#      applier's examples/applier/applier.toml `outbox-relay apply check-config`;
#   7. the release artefacts: scripts/release.sh packages the debug build (RELEASE_BINARY, no
#      release build here): the stripped binary has no .debug_info and a .gnu_debuglink whose
#      CRC is the .debug file's, which has the debug info; man page and completions are not
#      empty; SHA256SUMS verifies.
# Installed when missing: promtool, amtool, docker-compose and go from the Debian packages
# prometheus, prometheus-alertmanager, docker-compose and golang-go; kubernetes-validate (with
# jsonschema) from PyPI, into a venv in target/check-deploy-venv (Debian's Python is externally
# managed); the Prometheus Operator module from the Go module proxy (`go mod download`; later
# runs read the module cache, offline).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target="${CARGO_TARGET_DIR:-target}"
PROMETHEUS_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.85.0
KUBERNETES_VALIDATE=kubernetes-validate==1.37.0

# Debian starts the daemons it installs where it can; nothing here needs them running. Only
# the ones that appeared during this install are stopped (one already running is left alone).
daemon_pids() {
  { pgrep -f '^/usr/bin/prometheus( |$)'; pgrep -f '^/usr/bin/prometheus-alertmanager( |$)'; } \
    2>/dev/null | sort -u || true
}
apt_install() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "$1 missing: installing the Debian package $2" >&2
  local before pid
  before="$(daemon_pids)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$2" >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$2" >/dev/null
  fi
  for pid in $(comm -13 <(echo "$before") <(daemon_pids)); do
    kill "$pid" 2>/dev/null || true
  done
}
apt_install promtool prometheus
apt_install amtool prometheus-alertmanager
apt_install docker-compose docker-compose
apt_install go golang-go

# kubernetes-validate and jsonschema: on PATH already, or in the venv (created once; PEP 668
# forbids pip in Debian's own Python), or, without the venv module, pip --break-system-packages.
venv="$target/check-deploy-venv"
PY=python3
if [ -x "$venv/bin/kubernetes-validate" ]; then
  PATH="$venv/bin:$PATH" PY="$venv/bin/python"
elif ! command -v kubernetes-validate >/dev/null 2>&1 || ! python3 -c 'import jsonschema, yaml' 2>/dev/null; then
  echo "kubernetes-validate missing: installing it from PyPI" >&2
  if python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
    "$venv/bin/pip" install -q --disable-pip-version-check "$KUBERNETES_VALIDATE"
    PATH="$venv/bin:$PATH" PY="$venv/bin/python"
  else
    rm -rf "$venv"
    python3 -m pip install -q "$KUBERNETES_VALIDATE" 2>/dev/null \
      || python3 -m pip install -q --break-system-packages "$KUBERNETES_VALIDATE"
  fi
fi

echo "== promtool check rules / test rules"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

echo "== Grafana dashboard: JSON and PromQL of every query"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" - deploy/grafana/outbox-relay.json "$tmp/dashboard-rules.yml" <<'PY'
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
        for var in ("$job", "$instance", "$source"):
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
"$PY" - <<'PY'
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
  deploy/kubernetes/deployment.yaml deploy/kubernetes/pdb.yaml deploy/kubernetes/many-databases/relay.yaml
# The module cache first (offline), the Go module proxy only when it lacks the module.
operator_dir() {
  go mod download -json "$PROMETHEUS_OPERATOR" \
    | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}
operator="$(GOPROXY=off operator_dir 2>/dev/null || operator_dir)"
"$PY" - "$operator/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml" <<'PY'
import copy, sys, jsonschema, yaml
crd = yaml.safe_load(open(sys.argv[1]))
pm = yaml.safe_load(open("deploy/kubernetes/podmonitor.yaml"))
assert crd["spec"]["names"]["kind"] == pm["kind"] == "PodMonitor", crd["spec"]["names"]
group = crd["spec"]["group"]
served = {f"{group}/{v['name']}": v for v in crd["spec"]["versions"] if v["served"]}
assert pm["apiVersion"] in served, (pm["apiVersion"], list(served))
schema = served[pm["apiVersion"]]["schema"]["openAPIV3Schema"]


def strict(s):  # unknown fields are errors, as with kubectl's strict field validation
    if isinstance(s, dict):
        if "properties" in s and "additionalProperties" not in s \
                and not s.get("x-kubernetes-preserve-unknown-fields"):
            s["additionalProperties"] = False
        for v in s.values():
            strict(v)
    elif isinstance(s, list):
        for v in s:
            strict(v)


strict(schema)
validator = jsonschema.Draft7Validator(schema)


def errors(doc):
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(doc))


assert not errors(pm), "\n".join(errors(pm))
# The validator rejects what the API server would: an unknown field, a malformed duration.
for key, value in (("portt", "http"), ("interval", "15 s")):
    bad = copy.deepcopy(pm)
    bad["spec"]["podMetricsEndpoints"][0][key] = value
    assert any(key in e for e in errors(bad)), (key, errors(bad))

dep = yaml.safe_load(open("deploy/kubernetes/deployment.yaml"))
labels = dep["spec"]["template"]["metadata"]["labels"]
assert all(labels.get(k) == v for k, v in pm["spec"]["selector"]["matchLabels"].items())
ports = [p["name"] for c in dep["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
assert all(e["port"] in ports for e in pm["spec"]["podMetricsEndpoints"]), ports
probe = dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
assert probe == "/readyz?role=any", "a passive pod must be able to be ready (docs/operations.md)"
module = sys.argv[1].split("/pkg/mod/")[-1].split("/example/")[0]
print(f"PodMonitor valid against the CRD schema of {module}; selector, port and probes ok")
PY

echo "== relay configs: examples/relay.toml, the ConfigMaps' relay.toml (check-config)"
cargo build -q --locked -p outbox-relay --bin outbox-relay
bin="$target/debug/outbox-relay"
"$PY" -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(open(sys.argv[1]))["data"]["relay.toml"])' \
  deploy/kubernetes/configmap.yaml >"$tmp/configmap-relay.toml"
# The many-databases example: its ConfigMap is the file's first document.
"$PY" -c 'import sys, yaml; sys.stdout.write(next(yaml.safe_load_all(open(sys.argv[1])))["data"]["relay.toml"])' \
  deploy/kubernetes/many-databases/relay.yaml >"$tmp/many-databases-relay.toml"
for cfg in examples/relay.toml "$tmp/configmap-relay.toml" "$tmp/many-databases-relay.toml"; do
  # Without this environment's OUTBOX_RELAY__* variables: the file alone must be valid.
  env -i "$bin" check-config --config "$cfg" >/dev/null
done
env -i "$bin" apply check-config --config examples/applier/applier.toml >/dev/null
echo "all valid, and the applier's examples/applier/applier.toml"

echo "== release artefacts (scripts/release.sh packaging the debug build)"
RELEASE_BINARY="$bin" DIST_DIR="$tmp/dist" scripts/release.sh >/dev/null
"$PY" - "$tmp/dist" <<'PY'
import os, struct, sys, zlib
dist = sys.argv[1]


def sections(path):  # ELF64 little-endian section headers: {name: (type, offset, size)}
    with open(path, "rb") as f:
        elf = f.read(64)
        assert elf[:6] == b"\x7fELF\x02\x01", path
        shoff, = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        heads = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
        f.seek(heads[shstrndx][4])
        names = f.read(heads[shstrndx][5])
        return {names[n:names.index(b"\0", n)].decode(): (kind, off, size)
                for n, kind, _, _, off, size in heads}


def crc32(path):
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


SHT_NOBITS = 8
binary, debug = os.path.join(dist, "outbox-relay"), os.path.join(dist, "outbox-relay.debug")
shipped, kept = sections(binary), sections(debug)
assert ".debug_info" not in shipped, "the stripped binary still has .debug_info"
kind, _, size = kept.get(".debug_info", (SHT_NOBITS, 0, 0))
assert kind != SHT_NOBITS and size > 0, "outbox-relay.debug lacks the debug info"
_, off, size = shipped[".gnu_debuglink"]
with open(binary, "rb") as f:
    f.seek(off)
    link = f.read(size)
name = link[:link.index(b"\0")].decode()
crc, = struct.unpack_from("<I", link, (len(name) + 4) // 4 * 4)
assert (name, crc) == ("outbox-relay.debug", crc32(debug)), (name, crc)
files = ["outbox-relay", "outbox-relay.debug", "outbox-relay.1", "completions/outbox-relay.bash",
         "completions/_outbox-relay", "completions/outbox-relay.fish"]
for path in files[2:]:
    assert os.path.getsize(os.path.join(dist, path)) > 0, f"{path} is empty"
assert ".TH outbox-relay 1" in open(os.path.join(dist, "outbox-relay.1")).read(), "man page"
listed = sorted(line.split()[1] for line in open(os.path.join(dist, "SHA256SUMS")))
assert listed == sorted(files), listed
debug_mib = kept[".debug_info"][2] >> 20
print(f"stripped binary {os.path.getsize(binary) >> 20} MiB without .debug_info, its "
      f".gnu_debuglink CRC {crc:08x} matches outbox-relay.debug ({debug_mib} MiB of "
      ".debug_info); man page and 3 completions")
PY
(cd "$tmp/dist" && sha256sum --quiet -c SHA256SUMS)
echo "SHA256SUMS verifies"
