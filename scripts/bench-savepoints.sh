#!/usr/bin/env bash
# Why the applier does not put a savepoint around each record of a batch (issue 28; docs/inbox.md):
# one writer applies 100 records per transaction, as the applier's batches do, either with a
# SAVEPOINT/RELEASE around each record (101 subtransactions: past PostgreSQL's 64-entry subxid
# cache the transaction "overflows") or plainly; meanwhile readers scan the table the writer fills
# (their snapshots see an overflowed transaction in progress and look its rows up in pg_subtrans).
# Both modes run back to back on the same server in one invocation; pgbench prints each side's
# transactions/s. Usage: scripts/bench-savepoints.sh [seconds per mode, default 15]
#   (PG* environment for the server; a database `savepoints` is created and dropped).
set -euo pipefail
SECS="${1:-15}"
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-15432}" PGUSER="${PGUSER:-postgres}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"; psql -q -d postgres -c "DROP DATABASE IF EXISTS savepoints WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
psql -q -d postgres -c "DROP DATABASE IF EXISTS savepoints WITH (FORCE)" -c "CREATE DATABASE savepoints"
psql -q -d savepoints -c "CREATE TABLE t (id bigserial PRIMARY KEY, v int NOT NULL)"
{ echo "BEGIN;"; for i in $(seq 1 100); do echo "INSERT INTO t (v) VALUES ($i);"; done; echo "COMMIT;"; } >"$dir/plain.sql"
{ echo "BEGIN;"; for i in $(seq 1 100); do echo "SAVEPOINT r; INSERT INTO t (v) VALUES ($i); RELEASE SAVEPOINT r;"; done; echo "COMMIT;"; } >"$dir/savepoints.sql"
echo "SELECT count(*) FROM (SELECT v FROM t ORDER BY id DESC LIMIT 2000) x;" >"$dir/reader.sql"
for mode in plain savepoints; do
  pgbench -n -d savepoints -c 4 -j 1 -T "$SECS" -f "$dir/reader.sql" >"$dir/reader-$mode.out" 2>&1 &
  reader=$!
  pgbench -n -d savepoints -c 1 -T "$SECS" -f "$dir/$mode.sql" >"$dir/writer-$mode.out" 2>&1
  wait "$reader"
  w=$(grep -oP 'tps = \K[0-9.]+' "$dir/writer-$mode.out" | sed -n 1p)
  r=$(grep -oP 'tps = \K[0-9.]+' "$dir/reader-$mode.out" | sed -n 1p)
  echo "$mode: writer $w transactions/s ($(awk "BEGIN{printf \"%.0f\", $w*100}") records/s), readers $r scans/s"
  psql -q -d savepoints -c "TRUNCATE t"
done
