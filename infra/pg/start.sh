#!/usr/bin/env bash
# Start a throw-away PostgreSQL 15 cluster with logical decoding on 127.0.0.1:$PGPORT (idempotent).
# Env: STACK_DIR (default <repo>/.stack), PGPORT (default 15432), PGBIN (default /usr/lib/postgresql/15/bin;
#      infra/pg/17/bin for PostgreSQL 17, which has no psql: Debian's psql 15 checks the TCP path then),
#      PG_EXTRA_OPTS extra server options, e.g. "-c max_slot_wal_keep_size=64MB" (used on (re)start only).
# Data: $STACK_DIR/pg-$PGPORT/{data,pg.log,.s.PGSQL.<port>}. Prints the libpq connection string on success.
set -euo pipefail
LOG_TAG=pg
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGPORT="${PGPORT:-15432}"
BASE="$STACK_DIR/pg-$PGPORT"
PGDATA_DIR="$BASE/data"
CONN="host=127.0.0.1 port=$PGPORT user=postgres dbname=postgres"

[ -x "$PGBIN/pg_ctl" ] || die "no $PGBIN/pg_ctl; run infra/install-deps.sh (Debian package postgresql-15)"
PSQL="$PGBIN/psql"
[ -x "$PSQL" ] || PSQL=/usr/lib/postgresql/15/bin/psql

# initdb/pg_ctl refuse to run as root: run them as the postgres OS user when we are root.
if [ "$(id -u)" = 0 ]; then
  as_pg() { runuser -u postgres -- "$@"; }
  install -d -o postgres -g postgres -m 0755 "$BASE"
  as_pg test -w "$BASE" || die "user postgres cannot write $BASE (check permissions of its parent directories)"
else
  as_pg() { "$@"; }
  mkdir -p "$BASE"
fi

# One start at a time per cluster (tests may call this concurrently). The postmaster must not inherit fd 9.
exec 9>"$BASE/.start.lock"
flock 9

if [ -f "$PGDATA_DIR/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
  log "already running ($PGDATA_DIR)"
  echo "$CONN"
  exit 0
fi

if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
  log "initdb $PGDATA_DIR"
  as_pg "$PGBIN/initdb" -D "$PGDATA_DIR" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
fi

# pg_hba.conf (rewritten on every start): SCRAM for the role relay_pw_test (wrong-password tests) first,
# then trust. Logical replication connections match the *database* lines, not "replication".
as_pg tee "$PGDATA_DIR/pg_hba.conf" >/dev/null <<'HBA'
# written by infra/pg/start.sh -- TYPE DATABASE USER ADDRESS METHOD
host    all             relay_pw_test   127.0.0.1/32    scram-sha-256
local   all             all                             trust
host    all             all             127.0.0.1/32    trust
host    all             all             ::1/128         trust
local   replication     all                             trust
host    replication     all             127.0.0.1/32    trust
host    replication     all             ::1/128         trust
HBA

# Server settings as command-line options (pg_ctl keeps them in postmaster.opts for restarts).
# 40 slots and walsenders: the Debezium side-by-side test alone holds 11, next to the tests that
# run in parallel with it.
OPTS="-p $PGPORT -k '$BASE' -c listen_addresses=127.0.0.1"
OPTS+=" -c wal_level=logical -c max_wal_senders=40 -c max_replication_slots=40 -c wal_sender_timeout=10s"
OPTS+=" -c fsync=off -c shared_buffers=128MB -c max_connections=200"
OPTS+=" -c log_min_messages=warning -c password_encryption=scram-sha-256"
OPTS+="${PG_EXTRA_OPTS:+ $PG_EXTRA_OPTS}"

t0=$(now_ms)
if ! as_pg "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -l "$BASE/pg.log" -w -t 60 -o "$OPTS" start >/dev/null 9>&-; then
  tail -n 30 "$BASE/pg.log" >&2 || true
  die "PostgreSQL did not start on port $PGPORT (port in use? see $BASE/pg.log)"
fi
# Check the TCP path the tests use (not just the unix socket pg_ctl waited on).
for _ in $(seq 1 50); do
  "$PSQL" -X -Atq -c 'SELECT 1' "$CONN" >/dev/null 2>&1 && break
  sleep 0.2
done
"$PSQL" -X -Atq -c 'SELECT 1' "$CONN" >/dev/null || die "started, but no TCP connection: $CONN"
log "started in $(( $(now_ms) - t0 )) ms ($PGDATA_DIR, log $BASE/pg.log)"
echo "$CONN"
