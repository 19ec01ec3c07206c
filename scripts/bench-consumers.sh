#!/usr/bin/env bash
# The consumer half side by side (issue 28), in one run on one PostgreSQL and one Kafka:
# `outbox-relay apply` (a SQL function as handler) vs the inbox recipes in Rust and Go
# (examples/inbox-rust, examples/inbox-go), the same effect and one inbox claim per event each,
# with 1 and 6 partitions: drain events/s of a backlog, and p50/p99 from the producer's hand-off
# to the commit of the transaction that claimed and applied the event, at a steady 1,000
# events/s (bench/src/consumers.rs says how; PostgreSQL runs with track_commit_timestamp = on).
#
#   scripts/bench-consumers.sh [bench consumers options: --events N --rate R --seconds S --partitions 1,6]
#
# Release builds of outbox-relay, the Rust recipe and the harness; the Go recipe from the module
# cache (infra/install-recipes.sh). Uses the bench stack (STACK_DIR .stack-bench, PGPORT 16432,
# KAFKA_PORT 29192), started here (and stopped again) unless one is running. Results:
# target/bench-results/consumers/{results.json,report.md}.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/bench-env.sh
. infra/bench-env.sh
use_cargo
export PG_EXTRA_OPTS="${PG_EXTRA_OPTS:-} -c track_commit_timestamp=on"
OUT="${OUT:-$REPO_DIR/target/bench-results/consumers}"

infra/install-deps.sh
infra/install-recipes.sh
cargo build --release -q --locked -p outbox-relay -p inbox-rust -p bench
(cd examples/inbox-go && GOPROXY=off GOFLAGS=-mod=readonly go build -o "$REPO_DIR/target/release/inbox-go" .)
stack_up

target/release/bench consumers --pg-port "$PGPORT" --brokers "127.0.0.1:$KAFKA_PORT" \
  --applier target/release/outbox-relay --rust-recipe target/release/inbox-rust \
  --go-recipe target/release/inbox-go --out "$OUT" "$@"
