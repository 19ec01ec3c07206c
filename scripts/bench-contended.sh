#!/usr/bin/env bash
# Issue 46 item 3, "performance that does not depend on the host's mood": catch-up drains of each
# system quiet and then with a CPU hog taking one of the two cores, round after round, and the
# table the issue's criteria read: drain events/s (timed from the process start), its ratio to
# pg_recvlogical's in the same mode, process CPU per event, the walsender's, and per system the
# falls from quiet to contended (drain ratio quiet / contended; CPU per event contended / quiet;
# the issue asks both within 1.5x).
# Each drain is `bench drain` (bench/src/drain.rs): a backlog written while the system is stopped,
# in a database, slot, publication and topic of its own, all removed at the end.
#
#   scripts/bench-contended.sh                          3 rounds, the bench stack, three systems
#   ROUNDS=1 SYSTEMS="pg_recvlogical outbox-relay" scripts/bench-contended.sh
#
# Env: PGPORT (16432) and KAFKA (127.0.0.1:29192): the stack (default the bench stack:
#   STACK_DIR=$PWD/.stack-bench PGPORT=16432 KAFKA_PORT=29192 infra/stack.sh up); ROUNDS (3);
#   SYSTEMS (pg_recvlogical outbox-relay outboxx; outboxx is skipped when bench/peers/build.sh has
#   not built it); SHAPES ("200000x1000 100000x1": events x rows per transaction); PAYLOAD (200);
#   HOG ("stress-ng --cpu 1"); RELAY: the outbox-relay binary (default: the release build);
#   OUT (target/bench-results/contended-<time>): every drain's JSON and summary.md;
#   BENCH_PG_HOST: the server's socket directory, to stream outbox-relay and pg_recvlogical over
#   a Unix-domain socket instead of TCP on 127.0.0.1 (outboxx stays on TCP);
#   BROKER_PID: the local broker's process, whose CPU per event the summary adds (default: the
#   process listening on KAFKA's port, from `ss`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo
# shellcheck source=infra/apt.sh
. infra/apt.sh
PGPORT="${PGPORT:-16432}"
KAFKA="${KAFKA:-127.0.0.1:29192}"
ROUNDS="${ROUNDS:-3}"
SYSTEMS="${SYSTEMS:-pg_recvlogical outbox-relay outboxx}"
SHAPES="${SHAPES:-200000x1000 100000x1}"
PAYLOAD="${PAYLOAD:-200}"
HOG="${HOG:-stress-ng --cpu 1}"
OUT="${OUT:-target/bench-results/contended-$(date -u +%Y%m%dT%H%M%SZ)}"
PEERS_DIR="${PEERS_DIR:-/work/peers-src}"
log() { printf '[bench-contended %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

command -v stress-ng >/dev/null || apt_install stress-ng
command -v stress-ng >/dev/null || die "stress-ng is needed for the contended mode (apt-get install stress-ng)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
log "building outbox-relay and bench (release)"
# shellcheck source=bench/release.sh
. bench/release.sh
bench_release_build "$OUT"
read -r -a systems <<<"$SYSTEMS"
if [[ " $SYSTEMS " == *" outboxx "* ]] && [ ! -x "$PEERS_DIR/outboxx/zig-out/bin/outboxx" ]; then
  log "outboxx is not built ($PEERS_DIR/outboxx/zig-out/bin/outboxx; bench/peers/build.sh): skipped"
  systems=("${systems[@]/outboxx/}")
fi

# The process listening on the broker's port (a local broker).
BROKER_PID="${BROKER_PID:-$(ss -Hltnp "sport = :${KAFKA##*:}" 2>/dev/null | grep -o 'pid=[0-9]*' | sed -n 1p | cut -d= -f2 || true)}"
broker_args=()
[ -z "$BROKER_PID" ] || broker_args=(--broker-pid "$BROKER_PID")
[ -n "$BROKER_PID" ] || log "the broker's pid is not known (BROKER_PID): its CPU is left out"

hog_pid=""
stop_hog() { [ -z "$hog_pid" ] || { kill -- "-$hog_pid" 2>/dev/null || kill "$hog_pid" 2>/dev/null || true; wait "$hog_pid" 2>/dev/null || true; hog_pid=""; }; }
trap stop_hog EXIT

for round in $(seq 1 "$ROUNDS"); do
  for mode in quiet hog; do
    if [ "$mode" = hog ]; then
      # shellcheck disable=SC2086  # HOG is a command line
      setsid $HOG --quiet >/dev/null 2>&1 &
      hog_pid=$!
      sleep 1
    fi
    for shape in $SHAPES; do
      events="${shape%x*}" rows="${shape#*x}"
      for system in "${systems[@]}"; do
        [ -n "$system" ] || continue
        name="$system-$shape-$mode-$round"
        log "round $round/$ROUNDS, $mode: $system, $events events in $rows-row transactions"
        "$BENCH" drain --pg-port "$PGPORT" --brokers "$KAFKA" --db contended --relay-bin "$RELAY" \
          --work "$OUT/work" --events "$events" --txn-rows "$rows" --payload "$PAYLOAD" \
          --system "$system" "${broker_args[@]}" >"$OUT/$name.json"
      done
    done
    stop_hog
  done
done

python3 - "$OUT" "$HOG" "${BENCH_PG_HOST:-127.0.0.1}" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, statistics, sys
out, hog, pg_host = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}
for f in glob.glob(os.path.join(out, "*.json")):
    system, shape, mode, _ = os.path.basename(f)[:-5].rsplit("-", 3)
    d = json.load(open(f))
    runs.setdefault((shape, mode, system), []).append(d)
med = lambda xs: statistics.median(xs) if xs else float("nan")
def figures(key):
    ds = runs.get(key, [])
    rates = [d["events"] / d["seconds"] for d in ds]
    return rates, med(rates), med([d["relay_us_per_event"] for d in ds]), med([d["walsender_us_per_event"] for d in ds])
def extras(key):
    # The broker's CPU per event, the walsender's waits and preemptions per 1,000 events, and
    # the cores the three took together (events/s x their CPU per event): under a hog that is
    # what is left of the machine, and the drain is it divided by their CPU per event.
    ds = runs.get(key, [])
    broker = [d.get("broker_us_per_event") for d in ds]
    broker = med([b for b in broker if b is not None]) if any(b is not None for b in broker) else float("nan")
    waits = med([d.get("walsender_waits", float("nan")) * 1000 / d["events"] for d in ds])
    pre = med([d.get("walsender_preempted", float("nan")) * 1000 / d["events"] for d in ds])
    cores = med([d["events"] / d["seconds"] * (d["relay_us_per_event"] + d["walsender_us_per_event"] + (d.get("broker_us_per_event") or 0)) / 1e6 for d in ds])
    return broker, waits, pre, cores
shapes = sorted({k[0] for k in runs}, key=lambda s: -int(s.split("x")[1]))
systems = sorted({k[2] for k in runs}, key=lambda s: (s != "pg_recvlogical", s))
transport = "TCP on 127.0.0.1" if not pg_host.startswith("/") else f"outbox-relay and pg_recvlogical over the Unix socket in {pg_host}"
print(f"Contended drains ({hog} in the hog rows), medians of {max(len(v) for v in runs.values())} rounds; build {open(os.path.join(out, 'rev')).read().strip()}; PostgreSQL: {transport}\n")
print("| shape | mode | system | events/s (each round) | median | / pg_recvlogical | process CPU µs/event | walsender µs/event | broker µs/event | walsender waits / preempted per 1k events | cores of the three |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for shape in shapes:
    events, rows = shape.split("x")
    for mode in ("quiet", "hog"):
        floor = figures((shape, mode, "pg_recvlogical"))[1]
        for system in systems:
            rates, rate, cpu, ws = figures((shape, mode, system))
            if not rates:
                continue
            broker, waits, pre, cores = extras((shape, mode, system))
            print(f"| {int(events):,} in {rows}-row txns | {mode} | {system} | {' / '.join(f'{r:,.0f}' for r in rates)} | {rate:,.0f} | {rate / floor:.2f} | {cpu:.2f} | {ws:.2f} | {broker:.2f} | {waits:.1f} / {pre:.0f} | {cores:.2f} |")
print("\nFalls from quiet to contended (issue 46: both within 1.5x):\n")
print("| shape | system | drain ratio quiet / hog | CPU per event hog / quiet |")
print("|---|---|---:|---:|")
for shape in shapes:
    fq, fh = figures((shape, "quiet", "pg_recvlogical"))[1], figures((shape, "hog", "pg_recvlogical"))[1]
    for system in systems:
        if system == "pg_recvlogical":
            continue
        _, q, cq, _ = figures((shape, "quiet", system))
        _, h, ch, _ = figures((shape, "hog", system))
        print(f"| {shape} | {system} | {(q / fq) / (h / fh):.2f}x | {ch / cq:.2f}x |")
PY
log "results in $OUT"
