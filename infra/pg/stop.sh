#!/usr/bin/env bash
# Stop the throw-away PostgreSQL cluster of infra/pg/start.sh (fast shutdown).
# Usage: stop.sh [--destroy]   (--destroy also deletes $STACK_DIR/pg-$PGPORT). Env: STACK_DIR, PGPORT, PGBIN,
# PG_STOP_MODE (fast; immediate simulates a crash: the next start runs crash recovery).
set -euo pipefail
LOG_TAG=pg
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

DESTROY=0
for a in "$@"; do
  case "$a" in
    --destroy) DESTROY=1 ;;
    *) die "usage: $0 [--destroy]" ;;
  esac
done

PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGPORT="${PGPORT:-15432}"
BASE="$STACK_DIR/pg-$PGPORT"
PGDATA_DIR="$BASE/data"

if [ "$(id -u)" = 0 ]; then as_pg() { runuser -u postgres -- "$@"; }; else as_pg() { "$@"; }; fi

if [ -f "$PGDATA_DIR/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
  as_pg "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m "${PG_STOP_MODE:-fast}" -w -t 60 stop >/dev/null
  log "stopped (port $PGPORT)"
else
  log "not running (port $PGPORT)"
fi

if [ "$DESTROY" = 1 ]; then
  rm -rf "$BASE"
  log "removed $BASE"
fi
