#!/usr/bin/env bash
# The simulation's long form (issue 43; docs/reliability.md#deterministic-simulation): the
# relay's loop against the PostgreSQL and Kafka models, seed after seed, for MINUTES minutes
# (default 60), both delivery modes; prints the seeds run, seeds per minute, the faults played
# and every failing seed with its schedule; then the slowest deliberate bug's search (a start
# from the checkpoint instead of the slot) in the release build. Needs no server.
#   scripts/simulate.sh                  # one hour from seed 1
#   MINUTES=5 FIRST=100000 scripts/simulate.sh
# Replay a failing seed: SIM_SEED=<seed> cargo test -p outbox-relay --lib sim::search -- --nocapture
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo
MINUTES="${MINUTES:-60}"
case "$MINUTES" in '' | *[!0-9]*) echo "MINUTES=$MINUTES: a whole number" >&2; exit 2 ;; esac
SIM_FOR_SECS=$((MINUTES * 60)) SIM_FIRST="${FIRST:-1}" \
  cargo test -p outbox-relay --lib --locked --release -- \
  pipeline::tests::sim::search::simulated_fault_schedules_lose_nothing_and_keep_order --exact \
  --nocapture
cargo test -p outbox-relay --lib --locked --release -- \
  pipeline::tests::sim::search::a_start_from_the_checkpoint_instead_of_the_slot_is_caught \
  --exact --nocapture
