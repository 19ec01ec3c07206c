#!/usr/bin/env bash
# Stop the broker of infra/kafka/start.sh: SIGTERM (controlled shutdown), SIGKILL after KAFKA_STOP_TIMEOUT (30 s).
# Usage: stop.sh [--destroy] [--kill]   (--destroy also deletes $STACK_DIR/kafka-$KAFKA_PORT;
# --kill sends SIGKILL at once: a crash, for the tests). Env: STACK_DIR, KAFKA_PORT.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DESTROY=0
KILL=0
for a in "$@"; do
  case "$a" in
    --destroy) DESTROY=1 ;;
    --kill) KILL=1 ;;
    *) die "usage: $0 [--destroy] [--kill]" ;;
  esac
done

if pid="$(kafka_pid)"; then
  T0=$(now_ms)
  if [ "$KILL" = 1 ]; then
    kill -KILL "$pid" 2>/dev/null || true
    while pid_alive "$pid"; do sleep 0.05; done
    log "killed pid $pid with SIGKILL (port $PORT)"
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( $(date +%s) + ${KAFKA_STOP_TIMEOUT:-30} ))
  while pid_alive "$pid" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
  if pid_alive "$pid"; then
    kill -KILL "$pid" 2>/dev/null || true
    while pid_alive "$pid"; do sleep 0.1; done
    log "killed pid $pid (no exit within ${KAFKA_STOP_TIMEOUT:-30}s of SIGTERM)"
  else
    log "stopped pid $pid in $(( $(now_ms) - T0 )) ms (port $PORT)"
  fi
  rm -f "$PIDFILE"
  # the listeners must be gone before a restart on the same ports
  for _ in $(seq 1 50); do
    if ! tcp_open "$PORT" && ! tcp_open "$CPORT"; then break; fi
    sleep 0.1
  done
else
  log "not running (port $PORT)"
fi

if [ "$DESTROY" = 1 ]; then
  rm -rf "$DATA"
  log "removed $DATA"
fi
