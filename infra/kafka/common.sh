# Shared by infra/kafka/{start,stop,topics}.sh (sourced). Sets KAFKA_HOME, KJ, PORT, CPORT, DATA, CFG, PIDFILE, OUT.
# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
LOG_TAG=kafka
# shellcheck source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

KAFKA_HOME="$INFRA_DIR/kafka"
KJ="$KAFKA_HOME/bin/kjava"
PORT="${KAFKA_PORT:-19092}"
CPORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
DATA="$STACK_DIR/kafka-$PORT"
CFG="$DATA/server.properties"
PIDFILE="$DATA/kafka.pid"
OUT="$DATA/server.out"

# kafka_pid: prints the broker's pid if the pid file points at a live kafka.Kafka JVM of this data dir.
kafka_pid() {
  local pid
  [ -f "$PIDFILE" ] || return 1
  pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
  if [ -z "$pid" ] || ! pid_alive "$pid"; then return 1; fi
  # guard against pid reuse: the command line must be ours
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)" == *"kafka.Kafka $CFG"* ]] || return 1
  echo "$pid"
}
