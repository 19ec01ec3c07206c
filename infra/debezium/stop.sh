#!/usr/bin/env bash
# Stop the Connect worker of start.sh: SIGTERM (graceful: the task commits its offsets), SIGKILL after
# CONNECT_STOP_TIMEOUT seconds (30). Env: CONNECT_DATA (as for start.sh).
set -euo pipefail
: "${CONNECT_DATA:?set CONNECT_DATA}"
PIDFILE="$CONNECT_DATA/connect.pid"
[ -s "$PIDFILE" ] || { echo "[debezium] not running (no $PIDFILE)" >&2; exit 0; }
pid="$(cat "$PIDFILE")"
if ! [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)" =~ ConnectStandalone|ConnectDistributed ]]; then
  echo "[debezium] pid $pid is not a Connect worker; nothing to stop" >&2; rm -f "$PIDFILE"; exit 0
fi
kill -TERM "$pid"
deadline=$(( $(date +%s) + ${CONNECT_STOP_TIMEOUT:-30} ))
while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "[debezium] killed pid $pid" >&2
else echo "[debezium] stopped pid $pid" >&2; fi
rm -f "$PIDFILE"
