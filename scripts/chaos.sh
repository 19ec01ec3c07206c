#!/usr/bin/env bash
# The long form of the chaos suite (tests/e2e/chaos.rs): N random faults (kill -9, SIGTERM,
# Kafka stop, PostgreSQL crash, network cuts to either side) under concurrent writers, then a
# full check of lost / duplicated / out-of-order events. Prints the figures; docs/reliability.md
# records a run. Usage: scripts/chaos.sh [ROUNDS=60] [SEED=42]
# With CHAOS_TRANSACTIONAL_ID=<id> in the environment the relay runs with kafka.transactional_id;
# CHAOS_FAULTS=pg_crash,kill9 draws from those fault kinds only; CHAOS_MODE=exactly-once runs the
# exactly-once form (relay.delivery = "exactly-once", its own cluster and broker).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo
case "${CHAOS_MODE:-at-least-once}" in
  exactly-once) test=chaos::chaos_exactly_once_nothing_lost_reordered_or_duplicated ;;
  *) test=chaos::chaos_no_event_is_lost_or_reordered ;;
esac
e2e_long_form env CHAOS_ROUNDS="${1:-60}" CHAOS_SEED="${2:-42}" \
  cargo test -p relay-tests --locked -- --exact "$test"
