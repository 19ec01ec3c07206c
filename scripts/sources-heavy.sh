#!/usr/bin/env bash
# The long form of the many-databases tests (tests/e2e/sources/), which the test command runs
# in a short form (20 databases in one relay; 6 sources on three instances):
#   1. one relay, SOURCES databases (default 50): three fail (poison halt, lost slot, database
#      down) while the others stream;
#   2. three instances sharing SHARED sources (default 20) with relay.max_sources, the busiest
#      killed -9 twice, then a rolling restart, exactly-once: takeover times, 0 lost, 0 duplicated.
# Prints the figures (target/test-figures.log). Usage: SOURCES=50 SHARED=20 scripts/sources-heavy.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo
e2e_long_form env RELAY_TEST_SOURCES="${SOURCES:-50}" RELAY_TEST_SHARED_SOURCES="${SHARED:-20}" \
  cargo test -p relay-tests --locked -- sources:: --test-threads 1
