#!/usr/bin/env bash
# The main job on a local stack, from nothing: installs what is missing, starts PostgreSQL 15
# (wal_level=logical) and Kafka 4 (KRaft) as local processes, creates the demo database and
# the outbox table, runs `outbox-relay setup` and `outbox-relay run`, writes sample outbox
# events in business transactions, and shows them arriving in Kafka with their keys and headers;
# then writes a steady stream of events for DEMO_WATCH_SECS (10) seconds while
# `outbox-relay status --watch` shows the relay working live, and prints the address of the same
# view as a web page (the console, docs/operations.md#the-console).
# The stack keeps running afterwards (infra/stack.sh down stops it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
CONFIG=examples/relay.toml
PG="host=127.0.0.1 port=15432 user=postgres"

infra/install-deps.sh --demo
infra/stack.sh up
cargo build --locked --bin outbox-relay
BIN=target/debug/outbox-relay

echo "== database demo with the outbox table (migrations/)"
[ "$(psql -X -q "$PG dbname=postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = 'demo'")" = 1 ] \
  || psql -X -q "$PG dbname=postgres" -c "CREATE DATABASE demo"
psql -X -q -v ON_ERROR_STOP=1 "$PG dbname=demo" -f migrations/0001_outbox.sql
psql -X -q -v ON_ERROR_STOP=1 "$PG dbname=demo" -c "CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total numeric NOT NULL)"

echo "== outbox-relay setup (publication, then slot)"
"$BIN" setup --config "$CONFIG"

echo "== outbox-relay run"
mkdir -p .stack
"$BIN" run --config "$CONFIG" >.stack/demo-relay.log 2>&1 &
RELAY=$!
trap 'kill -TERM $RELAY 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q streaming_started .stack/demo-relay.log && break; sleep 0.1; done
grep -q streaming_started .stack/demo-relay.log || { cat .stack/demo-relay.log; exit 1; }

echo "== writing 6 orders, each with its outbox event, in one transaction per order (and one rolled back)"
RUN_ID=$(date +%s)
for i in 1 2 3 4 5 6; do
  psql -X -q -v ON_ERROR_STOP=1 "$PG dbname=demo" <<SQL
BEGIN;
INSERT INTO orders(id, total) VALUES ('order-$RUN_ID-$i', $i * 10);
INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload)
VALUES (gen_random_uuid(), 'order', 'order-$RUN_ID-$((i % 3))', 'OrderCreated',
        jsonb_build_object('order', 'order-$RUN_ID-$i', 'total', $i * 10));
COMMIT;
SQL
done
psql -X -q "$PG dbname=demo" -c "BEGIN; INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'order', 'never', 'RolledBack', '{}'); ROLLBACK;"

echo "== records in topic outbox.event.order written by this run (key | headers | value)"
infra/kafka/bin/kjava org.apache.kafka.tools.consumer.ConsoleConsumer \
  --bootstrap-server 127.0.0.1:19092 --topic outbox.event.order --from-beginning \
  --timeout-ms 15000 --property print.key=true --property print.headers=true \
  --property key.separator=' | ' --property headers.separator=' ' 2>/dev/null \
  | grep -- "order-$RUN_ID" || { echo "no records arrived; relay log:"; cat .stack/demo-relay.log; exit 1; }

echo "== slot position (confirmed only after Kafka acknowledged)"
sleep 1
psql -X "$PG dbname=demo" -c "SELECT slot_name, confirmed_flush_lsn, pg_current_wal_lsn(), pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) AS lag_bytes FROM pg_replication_slots WHERE slot_name = 'outbox_relay'"

echo "== a steady stream of events for ${DEMO_WATCH_SECS:=10}s, live in outbox-relay status --watch"
echo "   (events/s, in flight, lag, confirmed LSN, retained WAL, loss forecast, outbox table, alerts;"
echo "   redrawn every second on a terminal, one plain line per second otherwise)"
psql -X -q -v ON_ERROR_STOP=1 "$PG dbname=demo" -c "DO \$\$ BEGIN
  FOR i IN 1..($DEMO_WATCH_SECS * 20) LOOP
    INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload)
    VALUES (gen_random_uuid(), 'order', 'stream-$RUN_ID-' || (i % 4), 'OrderUpdated', jsonb_build_object('i', i));
    COMMIT;
    PERFORM pg_sleep(0.05);
  END LOOP; END \$\$" &
WRITER=$!
echo "== the same, live in a browser: the console at http://127.0.0.1:9559/ (data: /status.json;"
echo "   open it while the relay runs: it says STALE once the relay stops)"
timeout -s TERM "$DEMO_WATCH_SECS" "$BIN" status --watch --config "$CONFIG" || true
wait "$WRITER" || true

kill -TERM $RELAY; wait $RELAY || true; trap - EXIT
echo "== relay stopped (log: .stack/demo-relay.log). Stop the stack with: infra/stack.sh down"
