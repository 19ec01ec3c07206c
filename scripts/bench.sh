#!/usr/bin/env bash
# Benchmark: outbox-relay vs Debezium (Kafka Connect, default and tuned), a polling relay and
# pg_recvlogical, one at a time on the same PostgreSQL 15 and Kafka 4.3.1, in one run.
#
#   scripts/bench.sh            full run (~40 min with every peer): 1M-event backlogs, 60 s steady runs, a burst, a crash;
#                               writes docs/benchmarks.md and docs/bench/*.png
#   scripts/bench.sh --quick    regression check (a couple of minutes): 100k backlogs, 15 s steady
#                               run, outbox-relay + pg_recvlogical + polling; writes
#                               target/bench-results/quick/{benchmarks.md,*.png}
#
# Options: --quick; --systems a,b (pg_recvlogical,outbox-relay,debezium-default,debezium-tuned,polling;
#   outbox-relay-fenced = outbox-relay with kafka.transactional_id, outbox-relay-eos = fenced with
#   relay.delivery = "exactly-once", outbox-relay-messages = writers emitting logical messages to a
#   [[message]] section (steady only), all three only when named; outboxx and go-pq-cdc-kafka: the
#   native peers built from source by bench/peers/build.sh into $PEERS_DIR (default /work/peers-src),
#   catch-up only, only when named);
#   --workloads catchup,steady,saturation,burst,crash (the full run's default; --quick: catchup,steady;
#   burst: 100k events at 25k/s into a caught-up system; crash: a SIGKILL and restart under a steady
#   writer with a gap check); --events N (backlog size); --shapes 1000x200,1x200,1000x4096,100000x200x100000
#   (the full run's default; --quick without the last: catch-up: rows per transaction x payload bytes
#   [x events: 100000x200x100000 = one transaction of 100k rows, skipped by the polling relay]); --partitions 1,3,12 (catch-up topic's partitions, default 3) and --tables 1,4
#   (outbox tables the backlog is spread over, one [[outbox]] each): every shape with each;
#   --rates 1000x200,10000x200 (steady: events/s x payload bytes); --steady-seconds S; --repeat N
#   (drains per backlog for pg_recvlogical and outbox-relay); --relay-extra-toml FILE (merged into outbox-relay's config: config experiments);
#   --out DIR (results, report and plots); --keep-stack (leave the bench stack running).
# Env: BENCH_RELAY_REV=<git rev> builds outbox-relay from that revision (clean export) instead of the
#   working tree; BENCH_RELAY_PATCHES="bench/proposals/x.diff ..." applies patches to that export
#   first (measuring a proposal without touching crates/); BENCH_RELAY_BIN=<file> runs a relay binary
#   built earlier instead (an A/B without a second release build); BENCH_RELAY_B_BIN=<file> adds the
#   systems outbox-relay-b and outbox-relay-eos-b, which run that binary with the same configs (an A/B in
#   one run on one stack, window after window), and BENCH_RELAY_B_EXTRA_TOML='kafka.x = 1' is merged into
#   their config only (a setting's A/B: give BENCH_RELAY_B_BIN the same binary); BENCH_TIMESTAMP_TYPE=LogAppendTime
#   creates the bench topics with the broker's append time (the stage table's cut at the broker). STACK_DIR (.stack-bench), PGPORT (16432),
#   KAFKA_PORT (29192; the controller listens on KAFKA_PORT+1), CONNECT_REST_PORT (28083): the bench
#   stack never touches the test stack;
#   BENCH_FETCH_WAIT_MS (100): the latency consumer's fetch.wait.max.ms; BENCH_RELAY_LOG (warn): the
#   relay's RUST_LOG in the run (its log is in the work dir), e.g. outbox_relay=debug for commit timings
#   (15432/19092).
#
# Installs what is missing: apt (infra/install-deps.sh: PostgreSQL 15, Java 17, Maven, build deps),
# Kafka jars and the Debezium 3.6.1.Final plugin from Maven Central, matplotlib from PyPI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/bench-env.sh
. infra/bench-env.sh
use_cargo
log() { printf '[bench.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

QUICK=0; KEEP=0; OUT=""; ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; ARGS+=(--quick) ;;
    --keep-stack) KEEP=1 ;;
    --out) OUT="$2"; shift ;;
    --systems|--workloads|--events|--steady-seconds|--shapes|--rates|--repeat|--partitions|--tables) ARGS+=("$1" "$2"); shift ;;
    --relay-extra-toml) ARGS+=("$1" "$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$OUT" ]; then
  if [ "$QUICK" = 1 ]; then OUT="$REPO_DIR/target/bench-results/quick"; else OUT="$REPO_DIR/target/bench-results/full"; fi
fi
mkdir -p "$OUT" "$STACK_DIR"
OUT="$(cd "$OUT" && pwd)"
# the bench stack's data never belongs in git
[ -f "$STACK_DIR/.gitignore" ] || echo '*' >"$STACK_DIR/.gitignore"

# 1. dependencies
infra/install-deps.sh
if [ ! -f infra/debezium/plugins/debezium-connector-postgres/debezium-connector-postgres-3.6.1.Final.jar ]; then
  log "fetching the Debezium 3.6.1.Final PostgreSQL connector plugin (Maven Central)"
  mvn -B -q -Dstyle.color=never -f infra/debezium/pom.xml dependency:unpack
fi
PY=python3
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
  if [ ! -x "$STACK_DIR/venv/bin/python" ]; then
    log "installing matplotlib (pip) into $STACK_DIR/venv"
    python3 -m venv "$STACK_DIR/venv"
    "$STACK_DIR/venv/bin/pip" install -q matplotlib
  fi
  PY="$STACK_DIR/venv/bin/python"
fi
command -v perf >/dev/null || log "note: perf (Debian package linux-perf) is not installed; only needed for profiling"

# 2. build (release): the harness from the working tree; outbox-relay from the working tree or BENCH_RELAY_REV
log "building bench and outbox-relay (release)"
# An exported CARGO_TARGET_DIR is honoured (a worktree sharing a disk-limited machine); default target/.
TGT="${CARGO_TARGET_DIR:-$REPO_DIR/target}"
CARGO_TARGET_DIR="$TGT/bench" cargo build --release -q -p bench
BIN="$STACK_DIR/bin"; mkdir -p "$BIN"
cp "$TGT/bench/release/bench" "$BIN/bench"
if [ -n "${BENCH_RELAY_BIN:-}" ]; then
  # A relay binary built earlier (e.g. a copy of target/bench/release/outbox-relay kept before
  # a change), for an A/B without a second release build.
  cp "$BENCH_RELAY_BIN" "$BIN/outbox-relay"
  export BENCH_RELAY_SOURCE="prebuilt $BENCH_RELAY_BIN"
elif [ -n "${BENCH_RELAY_REV:-}" ]; then
  SRC="$STACK_DIR/relay-src"
  rm -rf "$SRC"; mkdir -p "$SRC"
  git archive "$BENCH_RELAY_REV" | tar -x -C "$SRC"
  # git archive stamps every file with the commit time: without this, cargo would take an older
  # source for up to date and reuse the previous build (e.g. one with patches applied).
  find "$SRC" -type f -exec touch {} +
  label="git $(git rev-parse --short "$BENCH_RELAY_REV")"
  for p in ${BENCH_RELAY_PATCHES:-}; do
    (cd "$SRC" && git apply -p1 "$REPO_DIR/$p") || { log "patch $p does not apply to $BENCH_RELAY_REV"; exit 1; }
    label="$label + $(basename "$p")"
  done
  (cd "$SRC" && CARGO_TARGET_DIR="$TGT/bench-rev" cargo build --release -q --locked -p outbox-relay)
  cp "$TGT/bench-rev/release/outbox-relay" "$BIN/outbox-relay"
  export BENCH_RELAY_SOURCE="$label"
else
  CARGO_TARGET_DIR="$TGT/bench" cargo build --release -q -p outbox-relay
  cp "$TGT/bench/release/outbox-relay" "$BIN/outbox-relay"
  if git diff --quiet HEAD -- crates 2>/dev/null; then
    export BENCH_RELAY_SOURCE="working tree = $(git rev-parse --short HEAD)"
  else
    export BENCH_RELAY_SOURCE="working tree (uncommitted changes on $(git rev-parse --short HEAD))"
  fi
fi

# 3. the bench stack (its own ports and data dir; fresh unless --keep-stack left one running)
started=0
stop_stack() {
  if [ "$KEEP" = 0 ] && [ "$started" = 1 ]; then
    infra/kafka/stop.sh --destroy >/dev/null 2>&1 || true
    infra/pg/stop.sh --destroy >/dev/null 2>&1 || true
  fi
}
trap stop_stack EXIT
if ! infra/stack.sh status >/dev/null 2>&1; then
  infra/kafka/stop.sh --destroy >/dev/null 2>&1 || true
  infra/pg/stop.sh --destroy >/dev/null 2>&1 || true
  started=1
  # 256 MB shared_buffers and a larger max_wal_size: a 1M-event backlog should not be
  # checkpoint-bound while it is written.
  PG_EXTRA_OPTS="-c shared_buffers=256MB -c max_wal_size=4GB -c checkpoint_timeout=30min" infra/pg/start.sh >/dev/null
  KAFKA_HEAP_OPTS="-Xms1g -Xmx1g" infra/kafka/start.sh >/dev/null
fi
PM_PID="$(head -1 "$STACK_DIR/pg-$PGPORT/data/postmaster.pid")"
KAFKA_PID="$(cat "$STACK_DIR/kafka-$KAFKA_PORT/kafka.pid")"

# 4. run
log "running the suite (results: $OUT/results.json)"
WORK="$STACK_DIR/work"; rm -rf "$WORK"; mkdir -p "$WORK"
"$BIN/bench" suite --out "$OUT" --repo "$REPO_DIR" --work "$WORK" \
  --pg-port "$PGPORT" --brokers "127.0.0.1:$KAFKA_PORT" --connect-rest-port "$CONNECT_REST_PORT" \
  --relay-bin "$BIN/outbox-relay" --postmaster-pid "$PM_PID" --kafka-pid "$KAFKA_PID" "${ARGS[@]}"

# keep every run's figures (the report is rendered from the latest; older runs stay comparable)
mkdir -p "$REPO_DIR/target/bench-results/history"
cp "$OUT/results.json" "$REPO_DIR/target/bench-results/history/$(date -u +%Y%m%dT%H%M%SZ)-$(basename "$OUT").json"

# 5. report
if [ "$QUICK" = 1 ] || [ "$OUT" != "$REPO_DIR/target/bench-results/full" ]; then
  "$PY" bench/report.py "$OUT/results.json" --md "$OUT/benchmarks.md" --img "$OUT"
  log "report: $OUT/benchmarks.md"
else
  mkdir -p docs/bench
  # BENCH_COMPARE=<results.json of a run with bench/proposals applied> adds the measured proposals
  "$PY" bench/report.py "$OUT/results.json" --md docs/benchmarks.md --img docs/bench --notes bench/notes.md \
    ${BENCH_COMPARE:+--compare "$BENCH_COMPARE"}
  log "report: docs/benchmarks.md, plots in docs/bench/"
fi
