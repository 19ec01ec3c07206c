#!/usr/bin/env bash
# One relay serving N databases ([source.<name>]) against N single-database relays, side by
# side on the same stack (docs/benchmarks.md, "Many databases"):
#   1. idle: each mode streams from N databases of its own (created here, dropped at the end),
#      waits until every slot is active, then samples every relay process for SAMPLE seconds:
#      resident memory and idle CPU; then, in the one-process mode, RATE events/s into the first
#      database only: the CPU of every source's walsender, since each reads the whole
#      cluster's WAL;
#   2. under load (`bench sources`, bench/src/sources.rs): N databases at LOAD_RATE events/s in
#      total, one process against N processes: p50/p99, CPU per event, walsenders' CPU, RSS;
#      then one process with LADDER sources at 10 events/s each: the largest step whose p99 is
#      within 2x the one-source step's.
#
#      The same idle sample for outboxx and go-pq-cdc-kafka (one process per database) and
#      Debezium (one Connect worker, a connector per database): IDLE_PEERS (default all three);
#   scripts/bench-sources.sh                   N=50, SAMPLE=30, LOAD_RATE=1000, LADDER=1,25,50,100,150
#   N=20 SAMPLE=10 LADDER=1,20 scripts/bench-sources.sh     a short form
#   PHASES=load scripts/bench-sources.sh       only part 2 (PHASES=idle: only part 1)
#   SECONDS_PER_STEP=60 …                       measured seconds per loaded step (default 30)
#
# Uses the bench stack (STACK_DIR .stack-bench, PGPORT 16432, KAFKA_PORT 29192), started here
# with room for the walsenders (and stopped again) unless one is running.
# RELAY: the outbox-relay binary (default: a release build); OUT (target/bench-results/sources).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/bench-env.sh
. infra/bench-env.sh
use_cargo
KAFKA="127.0.0.1:$KAFKA_PORT"
N="${N:-50}"
SAMPLE="${SAMPLE:-30}"
RATE="${RATE:-1000}"
LOAD_RATE="${LOAD_RATE:-1000}"
LADDER="${LADDER:-1,25,50,100,150}"
PHASES="${PHASES:-idle,load}"
OUT="${OUT:-$REPO_DIR/target/bench-results/sources}"
# Walsenders and slots for the largest step (and the idle phase's two modes' leftovers).
MOST=$(printf '%s\n' "$N" ${LADDER//,/ } | sort -n | tail -1)
export PG_EXTRA_OPTS="${PG_EXTRA_OPTS:-} -c max_wal_senders=$((MOST + 20)) -c max_replication_slots=$((MOST + 20)) -c max_connections=$((MOST * 4 + 100))"
PSQL="$(ls /usr/lib/postgresql/*/bin/psql | sed -n 1p)"
log() { printf '[bench-sources %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
sql() { "$PSQL" -qAtX -h 127.0.0.1 -p "$PGPORT" -U postgres -d "${2:-postgres}" -c "$1"; }

infra/install-deps.sh
stack_up
cargo build --release --locked -q -p bench
if [ -z "${RELAY:-}" ]; then
  cargo build --release --locked -q -p outbox-relay
  RELAY="${CARGO_TARGET_DIR:-target}/release/outbox-relay"
fi
mkdir -p "$OUT"
PIDS=()
drop_dbs() { # mode
  for i in $(seq 0 $((N - 1))); do
    db="bs_$1_$i"
    sql "SELECT pg_drop_replication_slot('$db') FROM pg_replication_slots WHERE slot_name = '$db' AND NOT active" >/dev/null 2>&1 || true
    sql "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
}
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  drop_dbs one
  drop_dbs many
  for m in ox gopq dbz; do drop_dbs "$m"; done
}
trap 'cleanup; stack_down_if_started' EXIT

make_dbs() { # mode
  for i in $(seq 0 $((N - 1))); do
    db="bs_$1_$i"
    sql "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    sql "CREATE DATABASE $db"
    "$PSQL" -qAtX -h 127.0.0.1 -p "$PGPORT" -U postgres -d "$db" -f migrations/0001_outbox.sql >/dev/null
  done
}

# The shared sections; `postgres_keys` ends up in `[postgres]` (a single database's own keys).
top() { # postgres_keys
  printf '[postgres]\nport = %s\ncreate_slot = true\n%s\n[kafka]\nbrokers = "%s"\n\n' "$PGPORT" "${1:-}" "$KAFKA"
}

source_keys() { # mode i
  db="bs_$1_$2"
  printf 'database = "%s"\nslot = "%s"\npublication = "%s"\n' "$db" "$db" "$db"
}

wait_active() { # mode
  for _ in $(seq 1 240); do
    n=$(sql "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'bs\_$1\_%' AND active")
    [ "$n" -ge "$N" ] && return 0
    sleep 0.5
  done
  log "only $n of $N slots active"; return 1
}

# Sum over the given pids: RSS (KiB) now, and CPU ticks (utime + stime).
rss() { local s=0; for p in "$@"; do s=$((s + $(awk '/VmRSS/ {print $2}' "/proc/$p/status"))); done; echo $s; }
ticks() { local s=0; for p in "$@"; do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $s; }

measure() { # label pids...
  local label=$1; shift
  sleep 5
  local t0 c0 t1 c1 hz
  hz=$(getconf CLK_TCK)
  t0=$(date +%s.%N); c0=$(ticks "$@")
  sleep "$SAMPLE"
  t1=$(date +%s.%N); c1=$(ticks "$@")
  local r; r=$(rss "$@")
  python3 -c "
import sys
cpu = ($c1 - $c0) / $hz / ($t1 - $t0) * 100
print(f'$label: processes=$#, rss_total_mib={$r/1024:.1f}, rss_per_source_mib={$r/1024/$N:.2f}, idle_cpu_percent={cpu:.2f}')
" | tee -a "$OUT/result.txt"
}

: > "$OUT/result.txt"
idle_phase() {
log "one process, $N sources"
make_dbs one
{
  top
  printf '[http]\nlisten = "127.0.0.1:0"\n\n'
  for i in $(seq 0 $((N - 1))); do
    printf '[source.s%s.postgres]\n%s\n\n' "$i" "$(source_keys one "$i")"
  done
} > "$OUT/one.toml"
RUST_LOG=warn "$RELAY" run --config "$OUT/one.toml" 2> "$OUT/one.log" &
ONE=$!
PIDS+=("$ONE")
wait_active one
threads() { # pid: "<thread name> <ticks>" per thread, names without their numbers
  for t in /proc/"$1"/task/*; do
    # Threads come and go (tokio's blocking pool): skip one that ended meanwhile.
    name=$( { tr -d '0-9' < "$t/comm"; } 2>/dev/null | tr ' ' '_') || continue
    ticks=$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) || continue
    [ -n "$name" ] && [ -n "$ticks" ] && printf '%s %s\n' "$name" "$ticks"
  done
}
threads "$ONE" > "$OUT/threads-before"
measure "one process, $N sources" "$ONE"
threads "$ONE" > "$OUT/threads-after"
# Where the idle CPU goes, by thread name (ticks over the sample, all threads of a name).
python3 - "$OUT/threads-before" "$OUT/threads-after" <<'PY' | tee -a "$OUT/result.txt"
import collections, sys
def load(p):
    d = collections.Counter(); n = collections.Counter()
    for line in open(p):
        name, ticks = line.rsplit(' ', 1); d[name] += int(ticks); n[name] += 1
    return d, n
(b, _), (a, n) = load(sys.argv[1]), load(sys.argv[2])
for name, t in sorted(((k, a[k] - b.get(k, 0)) for k in a), key=lambda x: -x[1])[:8]:
    print(f'  threads {name!r} x{n[name]}: {t} ticks')
PY

# Every walsender reads the whole cluster's WAL: RATE events/s into the first database only,
# then the CPU of each source's walsender (the written one against the others) and the relay's.
log "WAL readers: $RATE events/s into bs_one_0 for ${SAMPLE}s"
mapfile -t WALSENDERS < <(sql "SELECT active_pid FROM pg_replication_slots WHERE slot_name LIKE 'bs\_one\_%' ORDER BY slot_name = 'bs_one_0' DESC, slot_name")
per_tick=$((RATE / 10))
(
  end=$((SECONDS + SAMPLE + 5))
  while [ "$SECONDS" -lt "$end" ]; do
    sql "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'order', 'k' || g, 'Event', '{\"n\": 1}' FROM generate_series(1, $per_tick) g" bs_one_0
    sleep 0.1
  done
) &
WRITER=$!
PIDS+=("$WRITER")
sleep 5
hz=$(getconf CLK_TCK)
w0=(); for p in "${WALSENDERS[@]}"; do w0+=("$(ticks "$p")"); done
r0=$(ticks "$ONE"); t0=$(date +%s.%N); n0=$(sql "SELECT count(*) FROM outbox" bs_one_0)
sleep "$SAMPLE"
w1=(); for p in "${WALSENDERS[@]}"; do w1+=("$(ticks "$p")"); done
r1=$(ticks "$ONE"); t1=$(date +%s.%N); n1=$(sql "SELECT count(*) FROM outbox" bs_one_0)
wait "$WRITER" || true
python3 - "$hz" "$t0" "$t1" "$r0" "$r1" "${w0[*]}" "${w1[*]}" "$n0" "$n1" <<'PY' | tee -a "$OUT/result.txt"
import sys
hz, t0, t1, r0, r1 = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
w0 = [int(x) for x in sys.argv[6].split()]; w1 = [int(x) for x in sys.argv[7].split()]
rate = (int(sys.argv[9]) - int(sys.argv[8])) / (t1 - t0)
pct = lambda d: d / hz / (t1 - t0) * 100
ws = [pct(b - a) for a, b in zip(w0, w1)]
others = ws[1:]
print(f"WAL readers: {rate:.0f} events/s written into one database; its walsender {ws[0]:.2f} %, "
      f"each other walsender {sum(others)/max(len(others),1):.2f} % (mean of {len(others)}, max {max(others, default=0):.2f} %), "
      f"all {len(ws)} walsenders {sum(ws):.2f} %, relay process {pct(r1 - r0):.2f} % of one core")
PY
kill "$ONE"; wait "$ONE" || true
drop_dbs one

log "$N processes, one source each"
make_dbs many
MANY=()
for i in $(seq 0 $((N - 1))); do
  { top "$(source_keys many "$i")"; printf '[http]\nenabled = false\n'; } > "$OUT/many-$i.toml"
  RUST_LOG=warn "$RELAY" run --config "$OUT/many-$i.toml" 2> "$OUT/many-$i.log" &
  MANY+=("$!")
  PIDS+=("$!")
done
wait_active many
measure "$N processes, one source each" "${MANY[@]}"
for p in "${MANY[@]}"; do kill "$p" 2>/dev/null || true; done
wait "${MANY[@]}" 2>/dev/null || true
drop_dbs many
}
case ",$PHASES," in *,idle,*) idle_phase ;; esac

# The native peers and Debezium idle on N databases too (issue 46 item 4, "idle memory with many
# slots"): none of them serves more than one database per process, so outboxx and
# go-pq-cdc-kafka run one process per database (built by bench/peers/build.sh into PEERS_DIR) and
# Debezium one connector per database in one Connect worker. Each streams from a slot and an
# INSERT-only publication of its own; the same sample as above (RSS, idle CPU).
# IDLE_PEERS: which of outboxx,go-pq-cdc-kafka,debezium (default: every one that is built).
PEERS_DIR="${PEERS_DIR:-/work/peers-src}"
peer_slot_and_publication() { # db
  sql "CREATE PUBLICATION $1 FOR TABLE public.outbox WITH (publish = 'insert')" "$1" >/dev/null
  sql "SELECT pg_create_logical_replication_slot('$1', 'pgoutput')" "$1" >/dev/null
}
idle_peer() { # mode label
  local mode=$1 label=$2 pids=() i db
  log "$label"
  make_dbs "$mode"
  case "$mode" in
    ox)
      for i in $(seq 0 $((N - 1))); do
        db="bs_ox_$i"; peer_slot_and_publication "$db"
        printf '[metadata]\nversion = "v0"\n\n[source]\ntype = "postgres"\n\n[source.postgres]\nconnection_env = "POSTGRES_URL"\nslot_name = "%s"\npublication_name = "%s"\n\n[sink]\ntype = "kafka"\n\n[sink.kafka]\nbrokers = ["%s"]\ntls = false\n\n[[streams]]\nname = "outbox"\n\n[streams.source]\nresource = "public.outbox"\noperations = ["insert"]\n\n[streams.flow]\nformat = "json"\n\n[streams.sink]\ndestination = "bs-idle.%s"\nrouting_key = "aggregateid"\n' \
          "$db" "$db" "$KAFKA" "$db" > "$OUT/ox-$i.toml"
        # PostgreSQL's default wal_sender_timeout for its sessions, as in the suite (it confirms
        # every 10 s and answers no keepalive in between).
        POSTGRES_URL="postgres://postgres@127.0.0.1:$PGPORT/$db?sslmode=disable&options=-c%20wal_sender_timeout%3D60s" \
          "$PEERS_DIR/outboxx/zig-out/bin/outboxx" --config "$OUT/ox-$i.toml" >"$OUT/ox-$i.log" 2>&1 &
        pids+=("$!"); PIDS+=("$!")
      done ;;
    gopq)
      for i in $(seq 0 $((N - 1))); do
        db="bs_gopq_$i"; peer_slot_and_publication "$db"
        "$PEERS_DIR/gopqcdc-outbox/gopqcdc-outbox" -port "$PGPORT" -db "$db" -table outbox -slot "$db" \
          -publication "$db" -topic "bs-idle.$db" -brokers "$KAFKA" -metric-port $((18200 + i)) \
          >/dev/null 2>"$OUT/gopq-$i.log" &
        pids+=("$!"); PIDS+=("$!")
      done ;;
    dbz)
      local files=()
      for i in $(seq 0 $((N - 1))); do
        db="bs_dbz_$i"
        sed -e "s/^name=.*/name=idle-$db/" -e "s/^database.dbname=.*/database.dbname=$db/" \
            -e "s/@SLOT@/$db/" -e "s/@PUBLICATION@/$db/" -e "s/@TOPIC_PREFIX@/bs-idle-$db/" \
            -e "s/^topic.prefix=.*/topic.prefix=$db/" \
            infra/debezium/connector-default.properties > "$OUT/dbz-$i.properties"
        files+=("$OUT/dbz-$i.properties")
      done
      rm -rf "$OUT/connect-idle"
      local jvm
      jvm=$(CONNECT_DATA="$OUT/connect-idle" KAFKA_BOOTSTRAP="$KAFKA" PGPORT="$PGPORT" \
        CONNECT_START_TIMEOUT=600 infra/debezium/start.sh "${files[@]}") || { log "Debezium did not start"; drop_dbs dbz; return 1; }
      pids+=("$jvm"); PIDS+=("$jvm") ;;
  esac
  wait_active "$mode" || { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; drop_dbs "$mode"; return 1; }
  measure "$label" "${pids[@]}"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.2; done; done
  drop_dbs "$mode"
}
idle_peers() {
  local want="${IDLE_PEERS:-outboxx,go-pq-cdc-kafka,debezium}"
  case ",$want," in *,outboxx,*)
    if [ -x "$PEERS_DIR/outboxx/zig-out/bin/outboxx" ]; then idle_peer ox "outboxx, $N processes, one database each" || true
    else log "outboxx not built (bench/peers/build.sh): skipped"; fi ;;
  esac
  case ",$want," in *,go-pq-cdc-kafka,*)
    if [ -x "$PEERS_DIR/gopqcdc-outbox/gopqcdc-outbox" ]; then idle_peer gopq "go-pq-cdc-kafka, $N processes, one database each" || true
    else log "go-pq-cdc-kafka not built (bench/peers/build.sh): skipped"; fi ;;
  esac
  case ",$want," in *,debezium,*) idle_peer dbz "debezium-default, one Connect worker with $N connectors" || true ;; esac
}
case ",$PHASES," in *,idle,*) idle_peers ;; esac

case ",$PHASES," in *,load,*)
  log "under load: $N databases at $LOAD_RATE events/s; ladder $LADDER at 10 events/s each"
  target/release/bench sources --pg-port "$PGPORT" --brokers "$KAFKA" --relay "$RELAY" \
    --n "$N" --rate "$LOAD_RATE" --ladder "$LADDER" --work "$OUT/work" --out "$OUT" \
    ${SECONDS_PER_STEP:+--seconds "$SECONDS_PER_STEP"} | tee -a "$OUT/result.txt" ;;
esac
cat "$OUT/result.txt"
