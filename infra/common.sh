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
