#!/usr/bin/env bash
# CPU per event of outbox-relay in a catch-up drain, measured two ways (docs/benchmarks.md,
# "CPU per event (callgrind)"):
#   1. instructions: the release relay drains a backlog under `valgrind --tool=callgrind`
#      (every thread, librdkafka's included); prints Ir per event and the top functions.
#      Instruction counts barely move with the machine's load, so they compare builds on a
#      shared machine where timings do not.
#   2. time: the same drain without valgrind; relay and walsender CPU from /proc/<pid>/stat.
# Each drain runs `bench drain` (bench/src/drain.rs): a backlog written while the relay is
# stopped, in a database, slot, publication and topic of its own, all removed at the end.
#
#   scripts/profile-catchup.sh                      200k events, 1,000-row txns, ~200 B
#   EVENTS=50000 TXN_ROWS=1 scripts/profile-catchup.sh
#
# Env: PGPORT (15432) and KAFKA (127.0.0.1:19092): the stack to use (default: the test stack);
#   DB (cpuprof): the database to create and drop; EVENTS (200000); TXN_ROWS (1000);
#   PAYLOAD (200); TIMED (1): timed drains without valgrind (0: none); CALLGRIND (1): 0 skips
#   the callgrind drain; OUT (target/profile-catchup/<time>): callgrind.out, annotations, JSON;
#   RELAY_EXTRA_TOML: a file merged into the relay's config; RELAY: another outbox-relay binary
#   (comparing builds); SYSTEM (outbox-relay): `outboxx` drains with the native peer instead
#   (built by bench/peers/build.sh into PEERS_DIR), profiled the same way; CARGO_TARGET_DIR as
#   for cargo.
# Needs valgrind (Debian package valgrind) for the callgrind drain.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo
PGPORT="${PGPORT:-15432}"
KAFKA="${KAFKA:-127.0.0.1:19092}"
DB="${DB:-cpuprof}"
EVENTS="${EVENTS:-200000}"
TXN_ROWS="${TXN_ROWS:-1000}"
PAYLOAD="${PAYLOAD:-200}"
TIMED="${TIMED:-1}"
SYSTEM="${SYSTEM:-outbox-relay}"
CALLGRIND="${CALLGRIND:-1}"
OUT="${OUT:-target/profile-catchup/$(date -u +%Y%m%dT%H%M%SZ)}"
log() { printf '[profile-catchup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
log "building outbox-relay and bench (release)"
# shellcheck source=bench/release.sh
. bench/release.sh
bench_release_build "$OUT"
git status --porcelain -- crates bench >"$OUT/dirty"

drain() { # $1 = name of the JSON output, then extra args of `bench drain`
  local name="$1"; shift
  "$BENCH" drain --pg-port "$PGPORT" --brokers "$KAFKA" --db "$DB" --relay-bin "$RELAY" \
    --work "$OUT/work" --events "$EVENTS" --txn-rows "$TXN_ROWS" --payload "$PAYLOAD" \
    ${RELAY_EXTRA_TOML:+--relay-extra-toml "$RELAY_EXTRA_TOML"} --system "$SYSTEM" "$@" >"$OUT/$name.json"
}

for i in $(seq 1 "$TIMED"); do
  log "timed drain $i of $TIMED"
  drain "timed-$i"
done

if [ "$CALLGRIND" = 1 ]; then
  command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
  log "drain under callgrind (about 50x slower than native)"
  drain callgrind --wrap "valgrind --tool=callgrind --callgrind-out-file=$OUT/callgrind.out"
  # "summary: <Ir>" (valgrind 3.19); "totals:" in older versions.
  IR=$(sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$OUT/callgrind.out" | sed -n 1p)
  callgrind_annotate --auto=no --inclusive=yes "$OUT/callgrind.out" >"$OUT/inclusive.txt" 2>/dev/null
  callgrind_annotate --auto=no "$OUT/callgrind.out" >"$OUT/exclusive.txt" 2>/dev/null
  # Who calls what (callers of a function: grep its line with a '*' in caller.txt).
  callgrind_annotate --auto=no --inclusive=yes --tree=caller "$OUT/callgrind.out" >"$OUT/caller.txt" 2>/dev/null
  printf '%s\n' "$IR" >"$OUT/ir"
  top() { sed -n '/file:function/,$p' "$1" | sed -n "3,$(($2 + 2))p" | sed 's/ \[[^]]*\]$//' | cut -c1-170 >&2; }
  log "top 25 functions, exclusive ($OUT/exclusive.txt):"
  top "$OUT/exclusive.txt" 25
  log "top 40 functions, inclusive ($OUT/inclusive.txt):"
  top "$OUT/inclusive.txt" 40
  # ProduceRequests: how many batches librdkafka sent (per-batch costs such as LZ4's context
  # set-up weigh more when the relay runs slowly and batches are small, as under valgrind).
  BATCHES=$(grep -m1 -oE '< [^ ]*rd_kafka_ProduceRequest \([0-9,]+x\)' "$OUT/caller.txt" \
    | sed -E 's/.*\(([0-9,]+)x\)/\1/; s/,//g' || true)
  # By thread (inclusive cost of each thread's root function): the main thread runs tokio
  # (the pipeline); the sessions' workers (socket reads, framing) run on the `replication`
  # thread (reader_thread.rs; on the main thread before commit cee9445); librdkafka's broker
  # threads build and compress the batches; the poll thread serves the delivery reports.
  log "Ir/event by thread:"
  while IFS='|' read -r label root; do
    grep -m1 -E ":[^ ]*${root}( \[.*)?$" "$OUT/inclusive.txt" | awk -v n="$EVENTS" -v l="$label" \
      '{ gsub(",", "", $1); printf "  %-48s %8.0f\n", l, $1 / n }' >&2 || true
  done <<'ROOTS'
main thread (outbox_relay::main)|outbox_relay::main
  of which the pipeline (stream, run_loop)|pipeline::stream::\{\{closure\}\}
sessions' workers (replication thread; main before cee9445)|ReplicationClient::spawn::\{\{closure\}\}
librdkafka broker threads|rd_kafka_broker_thread_main
delivery reports (rdkafka polling thread)|BaseProducer<C,Part>::poll
librdkafka main thread|rd_kafka_thread_main
ROOTS
  awk -v ir="$IR" -v n="$EVENTS" -v b="${BATCHES:-?}" \
    'BEGIN { printf "Ir total %.0f, events %d, Ir/event %.0f, produce requests %s\n", ir, n, ir / n, b }' \
    | tee "$OUT/ir-per-event" >&2
fi
for f in "$OUT"/timed-*.json; do
  [ -f "$f" ] && cat "$f"
done
log "results in $OUT"
