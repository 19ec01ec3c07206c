#!/usr/bin/env bash
# Rehearse a failover with the throw-away clusters of infra/pg/start.sh.
# Usage (PGPORT = the standby's port):
#   standby.sh clone <primary-port>   copy the *stopped* primary's data directory (replication slots
#                                     included, unlike pg_basebackup) into $STACK_DIR/pg-$PGPORT and
#                                     configure it as a streaming standby of 127.0.0.1:<primary-port>;
#                                     start it with start.sh
#   standby.sh promote                promote the running standby (it starts a new timeline)
# A logical slot copied this way is usable after promotion on PostgreSQL 15 but is not kept in sync
# while the copy is a standby; PostgreSQL 17's failover slots do that (docs/operations.md, "Failover").
# Env: STACK_DIR, PGPORT, PGBIN as for start.sh.
set -euo pipefail
LOG_TAG=pg-standby
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGPORT="${PGPORT:?set PGPORT to the standby port}"
BASE="$STACK_DIR/pg-$PGPORT"
if [ "$(id -u)" = 0 ]; then as_pg() { runuser -u postgres -- "$@"; }; else as_pg() { "$@"; }; fi

case "${1:-}" in
  clone)
    PRIMARY="${2:?usage: $0 clone <primary-port>}"
    SRC="$STACK_DIR/pg-$PRIMARY/data"
    [ -f "$SRC/PG_VERSION" ] || die "no cluster at $SRC"
    if as_pg "$PGBIN/pg_ctl" -D "$SRC" status >/dev/null 2>&1; then
      die "the primary on port $PRIMARY is running: stop it first (a cold copy is the only one that keeps its slots)"
    fi
    [ ! -e "$BASE/data" ] || die "$BASE/data exists: stop.sh --destroy it first"
    if [ "$(id -u)" = 0 ]; then install -d -o postgres -g postgres -m 0755 "$BASE"; else mkdir -p "$BASE"; fi
    as_pg cp -a "$SRC" "$BASE/data"
    as_pg rm -f "$BASE/data/postmaster.pid" "$BASE/data/postmaster.opts"
    as_pg touch "$BASE/data/standby.signal"
    # dbname: PostgreSQL 17's slot synchronisation (sync_replication_slots) connects to a database
    echo "primary_conninfo = 'host=127.0.0.1 port=$PRIMARY user=postgres dbname=postgres application_name=standby_$PGPORT'" \
      | as_pg tee -a "$BASE/data/postgresql.auto.conf" >/dev/null
    log "standby of port $PRIMARY prepared in $BASE/data; start it with PGPORT=$PGPORT infra/pg/start.sh"
    ;;
  promote)
    as_pg "$PGBIN/pg_ctl" -D "$BASE/data" -w -t 60 promote >/dev/null
    log "promoted (port $PGPORT)"
    ;;
  *) die "usage: $0 clone <primary-port> | promote" ;;
esac
