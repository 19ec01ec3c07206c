#!/usr/bin/env bash
# The PostgreSQL version matrix: runs the core subset of the end-to-end tests (below) against each
# given major version (default: 14 16 17 18; 15 is Debian's and runs the whole suite in
# scripts/test.sh). Each version gets a cluster of its own on port 154<major> from the server
# binaries infra/install-deps.sh unpacks into infra/pg/<major> (Maven Central,
# io.zonky.test.postgres); the tests' own clusters (PgCluster::start) use the same binaries
# (RELAY_TEST_PGBIN). Needs the Kafka broker of infra/stack.sh up. The cluster is destroyed after.
# Usage: scripts/test-versions.sh [MAJOR ...]   Env: TEST_THREADS (3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo

# The core subset: setup and its refusals (a two_phase slot: on 18 fixed in place and streamed), takeover by a second instance after kill -9, delivery in
# commit order, kill -9 and graceful restarts from the confirmed LSN, exactly-once over a rewound
# slot, logical messages, the slot alerts (retained WAL, lost slot and its stop, Kafka down), the
# heartbeat, status and /metrics, and the check that the server is the version under test. Names are
# substrings of test paths (libtest runs every test matching any of them).
CORE_SUBSET=(
  versions::server_is_the_version_under_test
  preflight::missing_table_and_missing_slot_are_explained_and_nothing_is_created
  preflight::a_second_instance_waits_for_the_slot_and_takes_over_after_kill9
  preconditions::a_two_phase_slot_is_refused_with_the_gap_its_fix_leaves
  delivery::concurrent_writers_with_rollbacks_and_savepoints_arrive_complete_and_in_commit_order
  restart::
  exactly_once::exactly_once_a_rewound_slot_is_skipped_exactly
  messages::rows_and_messages_of_a_transaction_arrive_in_commit_order
  observability::
)

majors=("$@")
[ "${#majors[@]}" -gt 0 ] || majors=(14 16 17 18)
for major in "${majors[@]}"; do
  bin="$PWD/infra/pg/$major/bin"
  [ -x "$bin/postgres" ] || { echo "no PostgreSQL $major in $bin: run infra/install-deps.sh" >&2; exit 1; }
  port="154$major"
  echo "== core subset on PostgreSQL $("$bin/postgres" --version | awk '{print $3}') (port $port)"
  PGPORT="$port" PGBIN="$bin" infra/pg/start.sh >/dev/null
  pass_log="target/e2e-pg$major.log"
  rm -f target/test-times.log
  rc=0
  e2e_logged "$pass_log" "== why the failed tests failed on PostgreSQL $major ($pass_log)" \
    env RELAY_TEST_PG="host=127.0.0.1 port=$port user=postgres" RELAY_TEST_PGBIN="$bin" RELAY_TEST_PG_MAJOR="$major" \
    cargo test -p relay-tests --locked -- --test-threads "${TEST_THREADS:-3}" "${CORE_SUBSET[@]}" || rc=$?
  slowest_tests "pg$major"
  PGPORT="$port" PGBIN="$bin" infra/pg/stop.sh --destroy >/dev/null || true
  [ "$rc" = 0 ] || exit "$rc"
done
