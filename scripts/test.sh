#!/usr/bin/env bash
# Runs every test of outbox-relay on a fresh Debian machine or a warm dev box:
#   installs what is missing (infra/install-deps.sh), starts the local PostgreSQL 15 and Kafka
#   KRaft stack (infra/stack.sh), checks formatting and lints, runs unit, property and
#   end-to-end tests against the real servers (twice on PostgreSQL 15: as configured, then with
#   a Kafka transactional id on every relay; between the two, the core subset on PostgreSQL 14,
#   16, 17 and 18: scripts/test-versions.sh), prints the delivery figures, and stops the stack
#   again if this script started it.
# Prerequisites it does not install: Rust (rustup) and Go 1.26+ (go.dev; Debian's golang is too old)
#   on PATH; infra/install-recipes.sh prints how to install Go when it is missing.
# Env: TEST_THREADS (default 3) for the end-to-end tests; extra args go to `cargo test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

infra/install-deps.sh
started_stack=0
if ! infra/stack.sh status >/dev/null 2>&1; then
  infra/stack.sh up
  started_stack=1
fi
cleanup() { if [ "$started_stack" = 1 ]; then infra/stack.sh down --destroy || true; fi; }
trap cleanup EXIT

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== module structure (no import cycle in the crates with folders)"
python3 scripts/modcycles.py --self-test
python3 scripts/modcycles.py crates/outbox-relay/src | sed -n '/^cycles/,$p'
python3 scripts/modcycles.py crates/outbox-service/src | sed -n '/^cycles/,$p'

if [ -x scripts/check-deploy.sh ]; then
  echo "== deploy artefacts (Prometheus rules, Grafana dashboard)"
  scripts/check-deploy.sh
fi

echo "== unit and property tests"
cargo test --workspace --locked --exclude relay-tests "$@"

# One end-to-end pass, its output also in target/e2e-NAME.log; when a test fails, the failures'
# panic messages are printed again at the end, where a truncated CI log still shows them.
e2e_pass() {
  local log="target/e2e-$1.log" rc
  shift
  set +e
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" != 0 ]; then
    echo "== why the failed tests failed (panic messages from $log)"
    grep -A8 "panicked at" "$log" | cut -c1-400 | head -150 || true
    exit "$rc"
  fi
}

echo "== end-to-end tests (real PostgreSQL, real Kafka)"
mkdir -p target && rm -f target/test-figures.log
e2e_pass plain cargo test -p relay-tests --locked "$@" -- --test-threads "${TEST_THREADS:-3}"

echo "== the core subset on PostgreSQL 14, 16, 17 and 18 (scripts/test-versions.sh)"
scripts/test-versions.sh

echo "== end-to-end tests again, fenced (every relay with kafka.transactional_id, read-committed)"
e2e_pass fenced env RELAY_TEST_FENCED=1 cargo test -p relay-tests --locked "$@" -- --test-threads "${TEST_THREADS:-3}"

echo "== delivery figures (target/test-figures.log; fenced/ = the fenced pass)"
cat target/test-figures.log 2>/dev/null || true
