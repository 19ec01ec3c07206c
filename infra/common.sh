# Shared helpers for the infra/ scripts (sourced, not executed).
# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$INFRA_DIR/.." && pwd)"

# STACK_DIR: where all throw-away data lives (default <repo>/.stack); made absolute.
STACK_DIR="${STACK_DIR:-$REPO_DIR/.stack}"
mkdir -p "$STACK_DIR"
STACK_DIR="$(cd "$STACK_DIR" && pwd)"
export STACK_DIR

log() { printf '[%s] %s\n' "${LOG_TAG:-stack}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# tcp_open PORT: true if something accepts TCP connections on 127.0.0.1:PORT (bash /dev/tcp, no nc needed).
tcp_open() {
  # shellcheck disable=SC2016  # $1 is expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# now_ms: wall clock in milliseconds (for timings).
now_ms() { date +%s%3N; }

# pid_alive PID: true while any thread of the process is not a zombie. (A dying JVM's main thread can be a
# zombie while other threads still hold its sockets; a reaped process has no /proc entry at all.)
pid_alive() {
  local f st
  for f in /proc/"$1"/task/*/stat; do
    st="$(sed 's/^.*) //' "$f" 2>/dev/null | cut -d' ' -f1)" || continue
    if [ -n "$st" ] && [ "$st" != Z ]; then return 0; fi
  done
  return 1
}

# ---- For scripts/*.sh, which source this file from the repository's root:
#   set -euo pipefail
#   cd "$(dirname "${BASH_SOURCE[0]}")/.."
#   . infra/common.sh      (or infra/bench-env.sh, the bench stack's environment, which sources it)

# use_cargo: rustup's cargo ($HOME/.cargo/bin) first on PATH, for the script and what it runs.
use_cargo() { export PATH="$HOME/.cargo/bin:$PATH"; }

# stack_up: brings the stack of this environment (STACK_DIR, PGPORT, KAFKA_PORT: the test stack
# unless infra/bench-env.sh set the bench stack's) up unless `infra/stack.sh status` finds it up.
# A stack this script brought up is destroyed (`down --destroy`) when the script exits: stack_up
# sets that EXIT trap, so a script with an exit trap of its own sets it after stack_up and calls
# stack_down_if_started from it. Neither changes the script's exit code.
STACK_STARTED=0
stack_up() {
  trap stack_down_if_started EXIT
  if ! "$INFRA_DIR/stack.sh" status >/dev/null 2>&1; then
    "$INFRA_DIR/stack.sh" up
    STACK_STARTED=1
  fi
}
stack_down_if_started() {
  if [ "$STACK_STARTED" = 1 ]; then "$INFRA_DIR/stack.sh" down --destroy || true; fi
}

# e2e_long_form CMD...: a long form of end-to-end tests (scripts/chaos.sh, scripts/sources-heavy.sh):
# installs what is missing (infra/install-deps.sh), brings the stack up (stack_up), runs CMD with a
# fresh target/test-figures.log and prints the figures the tests wrote there. A failing CMD ends the
# script with its exit code (set -e).
e2e_long_form() {
  "$INFRA_DIR/install-deps.sh"
  stack_up
  mkdir -p target && rm -f target/test-figures.log
  "$@"
  cat target/test-figures.log
}

# e2e_logged LOG HEADER CMD...: runs CMD (end-to-end tests) with its output also in LOG. When CMD
# fails, prints HEADER and then the failed tests' panic messages from LOG again (at the end, where
# a truncated CI log still shows them), and returns CMD's exit code.
e2e_logged() {
  local log="$1" header="$2" rc
  shift 2
  set +e
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" != 0 ]; then
    echo "$header"
    grep -A8 "panicked at" "$log" | cut -c1-400 | sed -n 1,150p || true
  fi
  return "$rc"
}

# After an end-to-end pass: its tests' times (tests/e2e/support/timing.rs writes
# target/test-times.log) kept as target/test-times-LABEL.log, and the slowest printed with the
# waits of 15 s or more they spent, so that a pass that is green but slow says where.
slowest_tests() {
  local kept="target/test-times-$1.log"
  [ -f target/test-times.log ] || return 0
  mv target/test-times.log "$kept"
  echo "== the slowest tests of this pass ($kept: seconds, test, its waits of 15 s or more)"
  sort -rn "$kept" | sed -n 1,8p | cut -c1-400
}
