#!/usr/bin/env bash
# Start Kafka Connect standalone (infra/kafka/lib, Kafka 4.3.1) with the Debezium PostgreSQL connector
# and the Outbox Event Router, detached; wait until the connector task is RUNNING; print the JVM pid.
# Usage: start.sh [CONNECTOR_PROPERTIES...]   (default: connector-default.properties next to this script;
#        several files run several connectors in the one worker, each needs its own name, slot, publication)
# Env: CONNECT_DATA (required: offsets, rendered configs, connect.out), CONNECT_REST_PORT (28083),
#      KAFKA_BOOTSTRAP (127.0.0.1:$KAFKA_PORT, KAFKA_PORT default 19092), PGPORT (15432),
#      DBZ_SLOT (dbz_outbox), DBZ_PUBLICATION (dbz_outbox_pub), DBZ_TOPIC_PREFIX (outbox.event),
#      CONNECT_HEAP_OPTS (connect-standalone.sh's default: -Xms256M -Xmx2G), CONNECT_START_TIMEOUT (s, 120),
#      CONNECT_MODE (standalone; `distributed`: a one-worker distributed cluster, group.id and its
#      offsets/configs/status topics named $CONNECT_GROUP (required then), offsets in the topic
#      $CONNECT_GROUP.offsets (5 partitions, offset.flush.interval.ms=1000), connectors submitted over REST).
# Needs the plugin jars: mvn -B -q -f infra/debezium/pom.xml dependency:unpack
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
INFRA="$(cd "$HERE/.." && pwd)"
[ $# -gt 0 ] || set -- "$HERE/connector-default.properties"
: "${CONNECT_DATA:?set CONNECT_DATA to a scratch directory}"
REST_PORT="${CONNECT_REST_PORT:-28083}"
BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:${KAFKA_PORT:-19092}}"
PLUGINS="$HERE/plugins"
log() { printf '[debezium] %s\n' "$*" >&2; }

[ -f "$PLUGINS/debezium-connector-postgres/debezium-connector-postgres-3.6.1.Final.jar" ] \
  || { log "no plugin jars in $PLUGINS; run: mvn -B -q -f $HERE/pom.xml dependency:unpack"; exit 1; }
if timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$REST_PORT" 2>/dev/null; then
  log "port $REST_PORT already in use (another Connect worker?)"; exit 1
fi
mkdir -p "$CONNECT_DATA"
CONNECT_DATA="$(cd "$CONNECT_DATA" && pwd)"
MODE="${CONNECT_MODE:-standalone}"
case "$MODE" in
  standalone) MAIN=org.apache.kafka.connect.cli.ConnectStandalone; TEMPLATE="$HERE/worker.properties.in" ;;
  distributed) MAIN=org.apache.kafka.connect.cli.ConnectDistributed; TEMPLATE="$HERE/worker-distributed.properties.in"
    : "${CONNECT_GROUP:?set CONNECT_GROUP for CONNECT_MODE=distributed}" ;;
  *) log "CONNECT_MODE must be standalone or distributed, not $MODE"; exit 1 ;;
esac
sed -e "s#@BOOTSTRAP@#$BOOTSTRAP#" -e "s#@REST_PORT@#$REST_PORT#" -e "s#@PLUGINS@#$PLUGINS#" \
    -e "s#@DATA@#$CONNECT_DATA#" -e "s#@GROUP@#${CONNECT_GROUP:-}#" "$TEMPLATE" >"$CONNECT_DATA/worker.properties"
rendered=() names=() i=0
for connector in "$@"; do
  out="$CONNECT_DATA/connector.properties"; [ "$i" = 0 ] || out="$CONNECT_DATA/connector-$i.properties"
  sed -e "s#@PGPORT@#${PGPORT:-15432}#" -e "s#@SLOT@#${DBZ_SLOT:-dbz_outbox}#" \
      -e "s#@PUBLICATION@#${DBZ_PUBLICATION:-dbz_outbox_pub}#" \
      -e "s#@TOPIC_PREFIX@#${DBZ_TOPIC_PREFIX:-outbox.event}#" "$connector" >"$out"
  rendered+=("$out"); names+=("$(sed -n 's/^name=//p' "$out")"); i=$((i + 1))
done

# Standalone takes the connector files on its command line; distributed takes them over REST below.
on_command_line=()
[ "$MODE" = distributed ] || on_command_line=("${rendered[@]}")
# Detached, own session; the pid file holds the JVM's pid (bash execs kjava, which execs java).
rm -f "$CONNECT_DATA/connect.pid"
# shellcheck disable=SC2016  # $$/$0/$@ belong to the inner bash
KAFKA_HEAP_OPTS="${CONNECT_HEAP_OPTS:--Xms256M -Xmx2G}" \
KAFKA_LOG4J_OPTS="-Dlog4j2.configurationFile=$INFRA/kafka/config/connect-log4j2.properties" \
LOG_DIR="$CONNECT_DATA/logs" \
  setsid -f bash -c 'echo $$ >"$0"; exec "$@"' "$CONNECT_DATA/connect.pid" \
  "$INFRA/kafka/bin/kjava" "$MAIN" \
  "$CONNECT_DATA/worker.properties" "${on_command_line[@]}" \
  >"$CONNECT_DATA/connect.out" 2>&1 </dev/null
for _ in $(seq 1 50); do [ -s "$CONNECT_DATA/connect.pid" ] && break; sleep 0.1; done
pid="$(cat "$CONNECT_DATA/connect.pid")"
deadline=$(( $(date +%s) + ${CONNECT_START_TIMEOUT:-120} ))
status() { curl -fsS "http://127.0.0.1:$REST_PORT/connectors/$1/status" 2>/dev/null; }
if [ "$MODE" = distributed ]; then
  # The worker takes the connectors over REST once it has joined its group.
  submitted=0
  while [ "$(date +%s)" -lt "$deadline" ] && [ "$submitted" = 0 ]; do
    kill -0 "$pid" 2>/dev/null || { tail -60 "$CONNECT_DATA/connect.out" >&2; log "worker exited"; exit 1; }
    if curl -fsS "http://127.0.0.1:$REST_PORT/connectors" >/dev/null 2>&1; then
      submitted=1
      for f in "${rendered[@]}"; do
        name="$(sed -n 's/^name=//p' "$f")"
        python3 -c 'import json,sys; print(json.dumps(dict(l.rstrip("\n").split("=",1) for l in open(sys.argv[1]) if "=" in l and not l.startswith("#"))))' "$f" \
          | curl -fsS -X PUT -H 'Content-Type: application/json' --data-binary @- \
              "http://127.0.0.1:$REST_PORT/connectors/$name/config" >/dev/null \
          || submitted=0
      done
    fi
    [ "$submitted" = 1 ] || sleep 0.25
  done
fi
while [ "$(date +%s)" -lt "$deadline" ]; do
  running=0
  for name in "${names[@]}"; do
    st="$(status "$name" || true)"
    if [[ $st == *'"state":"FAILED"'* ]]; then
      log "connector $name FAILED:"; printf '%s\n' "$st" >&2
      kill -TERM "$pid" 2>/dev/null || true; exit 1
    fi
    if [[ $st == *'"tasks":[{"id":0,"state":"RUNNING"'* ]]; then running=$((running + 1)); fi
  done
  if [ "$running" = "${#names[@]}" ]; then
    log "connectors ${names[*]} RUNNING (pid $pid, rest $REST_PORT, log $CONNECT_DATA/connect.out)"
    echo "$pid"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { tail -60 "$CONNECT_DATA/connect.out" >&2; log "worker exited"; exit 1; }
  sleep 0.25
done
tail -60 "$CONNECT_DATA/connect.out" >&2; log "not RUNNING in time; killing pid $pid"
kill -KILL "$pid" 2>/dev/null || true
exit 1
