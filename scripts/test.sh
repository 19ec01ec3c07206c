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
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo

echo "== shell scripts: they parse, and no pipe ends in a reader that stops early (SIGPIPE)"
scripts/check-shell.sh

infra/install-deps.sh
stack_up

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== module structure (no import cycle in any crate, folders looked into)"
python3 scripts/modcycles.py --self-test
for src in crates/*/src; do
  echo "-- $src"
  python3 scripts/modcycles.py "$src" | sed -n '/^cycles/,$p'
done

if [ -x scripts/check-deploy.sh ]; then
  echo "== deploy artefacts (Prometheus rules, Grafana dashboard)"
  scripts/check-deploy.sh
fi

echo "== unit and property tests"
cargo test --workspace --locked --exclude relay-tests "$@"

# One end-to-end pass, its output also in target/e2e-NAME.log; when a test fails, the failures'
# panic messages are printed again at the end, where a truncated CI log still shows them.
# Then its slowest tests (slowest_tests, infra/common.sh), green or red.
e2e_pass() {
  local label="$1" log="target/e2e-$1.log" rc=0
  shift
  e2e_logged "$log" "== why the failed tests failed (panic messages from $log)" "$@" || rc=$?
  slowest_tests "$label"
  return "$rc"
}

# After a pass: every partition the shared broker holds, read from its files; an idempotent
# producer's stored sequence must have no gap (a loss at a partition's head shows there and
# nowhere else: issue 40; tests/e2e/support/stored.rs).
stored_sweep() {
  echo "== what the broker stored: no gap in any producer's sequence (support::stored)"
  cargo test -p relay-tests --locked -- --ignored --exact \
    support::stored::every_idempotent_producer_s_stored_sequence_on_the_shared_broker_is_gapless \
    --nocapture
}

echo "== end-to-end tests (real PostgreSQL, real Kafka)"
mkdir -p target && rm -f target/test-figures.log target/test-times.log
e2e_pass plain cargo test -p relay-tests --locked "$@" -- --test-threads "${TEST_THREADS:-3}"
stored_sweep

echo "== the core subset on PostgreSQL 14, 16, 17 and 18 (scripts/test-versions.sh)"
scripts/test-versions.sh

echo "== end-to-end tests again, fenced (every relay with kafka.transactional_id, read-committed)"
e2e_pass fenced env RELAY_TEST_FENCED=1 cargo test -p relay-tests --locked "$@" -- --test-threads "${TEST_THREADS:-3}"
stored_sweep

echo "== delivery figures (target/test-figures.log; fenced/ = the fenced pass)"
cat target/test-figures.log 2>/dev/null || true
