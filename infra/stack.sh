#!/usr/bin/env bash
# Local test stack without Docker: PostgreSQL 15 (127.0.0.1:$PGPORT) + Kafka 4.x KRaft (127.0.0.1:$KAFKA_PORT).
# Usage: stack.sh up | down [--destroy] | status
# Env: STACK_DIR (<repo>/.stack), PGPORT (15432), KAFKA_PORT (19092); see infra/pg/start.sh, infra/kafka/start.sh.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PGPORT="${PGPORT:-15432}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
export PGPORT KAFKA_PORT

case "${1:-}" in
  up)
    "$INFRA_DIR/install-deps.sh" --demo
    pg="$("$INFRA_DIR/pg/start.sh")"
    kafka="$("$INFRA_DIR/kafka/start.sh")"
    echo "postgres: $pg"
    echo "kafka:    $kafka"
    ;;
  down)
    shift
    rc=0
    "$INFRA_DIR/kafka/stop.sh" "$@" || rc=1
    "$INFRA_DIR/pg/stop.sh" "$@" || rc=1
    exit "$rc"
    ;;
  status)
    rc=0
    if "${PGBIN:-/usr/lib/postgresql/15/bin}/pg_isready" -q -h 127.0.0.1 -p "$PGPORT"; then
      echo "postgres: up   host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres"
    else
      echo "postgres: down (port $PGPORT)"; rc=1
    fi
    # shellcheck source=kafka/common.sh
    . "$INFRA_DIR/kafka/common.sh"   # kafka_pid for $KAFKA_PORT
    if pid="$(kafka_pid)" && tcp_open "$KAFKA_PORT"; then
      echo "kafka:    up   127.0.0.1:$KAFKA_PORT (pid $pid)"
    else
      echo "kafka:    down (port $KAFKA_PORT)"; rc=1
    fi
    exit "$rc"
    ;;
  *)
    die "usage: $0 up | down [--destroy] | status"
    ;;
esac
