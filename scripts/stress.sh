#!/usr/bin/env bash
# The intermittent-failure hunt of issue 40: runs named end-to-end tests RUNS times each, one at a
# time (--test-threads 1), while a CPU hog keeps every core busy (stress-ng --cpu <cores>, Debian's
# stress-ng, installed here with infra/apt.sh; a bash busy loop per core if it cannot be installed,
# which the output says). Each run gets a fresh seed where the test takes one (the chaos tests:
# CHAOS_SEED), the relay's debug position events (checkpoint_written, lsn_confirmed) are on, and a
# failing run keeps its full output and the logs it wrote under target/e2e/ (relay logs, configs,
# the chaos test's PostgreSQL/Kafka logs) in target/stress/<test>/<run>/. Ends with one line per test:
#   test=<filter> runs=<n> failures=<k> seeds_failed=<seeds|none> median_s=<x> max_s=<y>
# then a sweep of the shared broker's partition files for a gap in any producer's stored sequence
# (support::stored: a loss at a partition's head, counted by a test or not), and exits non-zero if
# any run failed or the sweep found a gap. target/stress/runs.tsv has every run (test, run, seed,
# seconds, result); target/stress/summary.txt the summary lines.
# The relay is built once at the start and its copy in target/stress/ is what the tests run
# (RELAY_TEST_BIN), so a build by someone else in the same tree cannot swap it mid-loop.
# Usage: scripts/stress.sh            (the default list below, 20 runs each)
#        RUNS=5 TESTS="sources::slow_start chaos::chaos_no_event_is_lost_or_reordered" scripts/stress.sh
# Env:
#   RUNS           runs per test (default 20)
#   TESTS          space-separated test filters; a filter naming one test exactly runs with --exact,
#                  any other (a module, e.g. sources::failures) is passed to the test harness as given
#   SEED           first seed (run i gets SEED+(i-1)*SEED_STEP), to replay a loop; default: a random
#                  seed per run
#   SEED_STEP      default 1; 0 gives every run SEED itself (the same fault schedule each time, e.g. CI's 42)
#   HOG_CPUS       CPU hog workers (default: the number of cores, nproc); 0 runs without a hog
#   RUN_TIMEOUT    seconds before a run is killed and counted as failed (default 1800)
#   STRESS_RELAY_BIN  a relay binary to run instead of building this tree's (e.g. an old commit's
#                  debug build, to replay a red run against the code it had); the tests are this tree's
#   RELAY_TEST_LOG the relays' RUST_LOG (default info,outbox_relay::pipeline=debug; the chaos test sets
#                  its own, the same)
#   CHAOS_ROUNDS, CHAOS_FAULTS, RELAY_TEST_FENCED, ... are passed through to the tests, and so
#                  are the slow-run hunt's RELAY_TEST_SLOW_WAIT_S (name waits from this many
#                  seconds in target/test-times.log), RELAY_TEST_CONSUMER_DEBUG (the tests'
#                  consumers' librdkafka log) and STANDBY_TXNS / STANDBY_KILL_MS (docs/reliability.md)
# Replay one failure: CHAOS_SEED=<seed> cargo test -p relay-tests --locked -- --exact <test>
# (the loop itself runs its copy of the test binary, target/stress/e2e, from tests/)
# Note: the logs of a run are the files under target/e2e/ written during it; tests run by someone
# else in the same tree at the same time would be copied too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG_TAG=stress
# shellcheck source=infra/common.sh
. infra/common.sh
use_cargo
# shellcheck source=infra/apt.sh
. infra/apt.sh

DEFAULT_TESTS="chaos::chaos_no_event_is_lost_or_reordered
sources::share::three_instances_share_sources_take_over_and_roll_exactly_once
sources::failures
sources::slow_start::instances_that_start_together_on_a_slow_broker_stop_no_source
restart::graceful_and_kill9_restarts_mid_stream_lose_nothing
standby::pg16_relays_from_a_standby_through_kill9_and_promotion
standby::pg18_relays_from_a_standby_through_kill9_and_promotion"
RUNS="${RUNS:-20}"
SEED_STEP="${SEED_STEP:-1}"
case "$SEED_STEP" in '' | *[!0-9]*) die "SEED_STEP=$SEED_STEP: a number (0 repeats SEED)" ;; esac
read -r -a tests <<<"$(echo "${TESTS:-$DEFAULT_TESTS}" | tr '\n' ' ')"
[ "${#tests[@]}" -gt 0 ] || die "TESTS names no test"
case "$RUNS" in '' | *[!0-9]* | 0) die "RUNS=$RUNS: a positive number" ;; esac
HOG_CPUS="${HOG_CPUS:-$(nproc)}"
RUN_TIMEOUT="${RUN_TIMEOUT:-1800}"
export RELAY_TEST_LOG="${RELAY_TEST_LOG:-info,outbox_relay::pipeline=debug}"

infra/install-deps.sh
hog_pids=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local p
  for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  stack_down_if_started
}
stack_up
trap cleanup EXIT

# Build once, before the hog starts; the tests run this copy of the binary.
OUT="$REPO_DIR/target/stress"
rm -rf "$OUT"
mkdir -p "$OUT"
if [ -n "${STRESS_RELAY_BIN:-}" ]; then
  # Another build's relay (an old commit's, to replay a red run against the code it had).
  [ -x "$STRESS_RELAY_BIN" ] || die "STRESS_RELAY_BIN=$STRESS_RELAY_BIN is not an executable"
  log "the relay under test: $STRESS_RELAY_BIN ($("$STRESS_RELAY_BIN" --version 2>&1 || true))"
  cp "$STRESS_RELAY_BIN" "$OUT/outbox-relay"
else
  log "building outbox-relay and the end-to-end tests"
  cargo build -p outbox-relay --bin outbox-relay --locked
  cp "${CARGO_TARGET_DIR:-target}/debug/outbox-relay" "$OUT/outbox-relay"
fi
RELAY_TEST_BIN="$OUT/outbox-relay"
export RELAY_TEST_BIN
# The test binary is copied too and run directly (from tests/, as cargo would): an edit in the
# tree during the loop must not rebuild the tests inside a timed run, or fail one.
e2e_bin="$(cargo test -p relay-tests --no-run --locked --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)"
[ -x "$e2e_bin" ] || die "cannot find the end-to-end test binary (cargo test --no-run)"
cp "$e2e_bin" "$OUT/e2e"
run_e2e() { (cd tests && "$OUT/e2e" "$@"); }

# Each filter: --exact if it names one test, as given if it matches some, an error if none.
run_e2e --list 2>/dev/null | sed -n 's/: test$//p' >"$OUT/all-tests.txt"
modes=()
for t in "${tests[@]}"; do
  if grep -qxF -- "$t" "$OUT/all-tests.txt"; then
    modes+=(--exact)
  elif grep -qF -- "$t" "$OUT/all-tests.txt"; then
    modes+=(-)
    log "$t: $(grep -cF -- "$t" "$OUT/all-tests.txt") tests: $(grep -F -- "$t" "$OUT/all-tests.txt" | tr '\n' ' ')"
  else
    die "TESTS: $t matches no end-to-end test (the list: $OUT/all-tests.txt)"
  fi
done

# The CPU hog.
hog="none (HOG_CPUS=0)"
if [ "$HOG_CPUS" -gt 0 ]; then
  if ! command -v stress-ng >/dev/null; then
    apt_install stress-ng || log "stress-ng could not be installed"
  fi
  if command -v stress-ng >/dev/null; then
    stress-ng --cpu "$HOG_CPUS" --quiet >/dev/null 2>&1 &
    hog_pids+=($!)
    hog="stress-ng --cpu $HOG_CPUS"
  else
    for _ in $(seq "$HOG_CPUS"); do
      bash -c 'while :; do :; done' &
      hog_pids+=($!)
    done
    hog="FALLBACK, stress-ng not available: $HOG_CPUS bash busy loops"
  fi
fi
log "CPU hog: $hog (pids ${hog_pids[*]:-none})"

# After a killed run: the brokers and PostgreSQL clusters the test started for itself under
# $STACK_DIR (its Drop did not run) get their logs kept and are stopped; the shared stack's are
# not touched (they were there before the run).
stack_servers() { (cd "$STACK_DIR" && shopt -s nullglob && printf '%s\n' kafka-* pg-*); }
stop_own_servers() {
  local before="$1" keep="$2" d port
  for d in $(stack_servers); do
    grep -qxF "$d" <<<"$before" && continue
    port="${d#*-}"
    mkdir -p "$keep/stack/$d"
    (cd "$STACK_DIR/$d" && find . -maxdepth 3 -name '*.log' -print0 | xargs -0 -r cp --parents -t "$keep/stack/$d/") || true
    case "$d" in
      kafka-*)
        # a throttled broker may be SIGSTOPped
        if [ -f "$STACK_DIR/$d/kafka.pid" ]; then kill -CONT "$(cat "$STACK_DIR/$d/kafka.pid")" 2>/dev/null || true; fi
        KAFKA_PORT="$port" infra/kafka/stop.sh --destroy || log "could not stop the broker of $STACK_DIR/$d" ;;
      pg-*) PGPORT="$port" PG_STOP_MODE=immediate infra/pg/stop.sh --destroy || log "could not stop $STACK_DIR/$d" ;;
    esac
  done
}

printf 'test\trun\tseed\tseconds\tresult\n' >"$OUT/runs.tsv"
seq_no=0
summary=()
any_failed=0
for i in "${!tests[@]}"; do
  t="${tests[$i]}"
  mode="${modes[$i]}"
  dir="$OUT/${t//::/.}"
  mkdir -p "$dir"
  args=("$t")
  [ "$mode" = --exact ] && args+=(--exact)
  failures=0
  seeds_failed=()
  durations=()
  for run in $(seq "$RUNS"); do
    seq_no=$((seq_no + 1))
    if [ -n "${SEED:-}" ]; then
      seed=$((SEED + (run - 1) * SEED_STEP))
    else
      seed=$(( (RANDOM << 30) | (RANDOM << 15) | RANDOM ))
    fi
    # Only the chaos tests read a seed; the others record "-".
    case "$t" in chaos::*) shown_seed="$seed" ;; *) shown_seed=- ;; esac
    marker="$dir/.start-$run"
    touch "$marker"
    out="$dir/output-$run.log"
    t0=$(now_ms)
    servers_before="$(stack_servers)"
    rc=0
    # On timeout, SIGKILL to the whole run (the test and its relays): a SIGTERM'd relay can
    # outlive the test in a slow shutdown.
    CHAOS_SEED="$seed" timeout --signal=KILL "$RUN_TIMEOUT" \
      bash -c 'cd tests && exec "$0" "$@"' "$OUT/e2e" "${args[@]}" --test-threads 1 >"$out" 2>&1 || rc=$?
    t1=$(now_ms)
    secs=$(awk -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
    durations+=("$secs")
    case "$rc" in
      0) result=ok ;;
      124 | 137) result=timeout ;;
      *) result=failed ;;
    esac
    # A filter that ran no test at all is a failure too (a renamed test).
    if [ "$rc" = 0 ] && ! grep -qE 'test result: ok\. [1-9][0-9]* passed' "$out"; then result=no-test-ran; fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$run" "$shown_seed" "$secs" "$result" >>"$OUT/runs.tsv"
    if [ "$result" = ok ]; then
      rm -f "$out" "$marker"
      log "$t run $run/$RUNS seed=$shown_seed ok ${secs} s"
    else
      failures=$((failures + 1))
      seeds_failed+=("$shown_seed")
      keep="$dir/$run"
      mkdir -p "$keep"
      mv "$out" "$keep/output.log"
      # The logs this run wrote: every file under target/e2e/ newer than the run's start.
      if [ -d target/e2e ]; then
        (cd target/e2e && find . -type f -newer "$marker" -print0 | xargs -0 -r cp --parents -t "$keep/")
      fi
      rm -f "$marker"
      [ "$result" = timeout ] && stop_own_servers "$servers_before" "$keep"
      log "$t run $run/$RUNS seed=$shown_seed $result ${secs} s (exit $rc): output and logs in $keep/"
      grep -E 'panicked|^failures:|FAILED|test result' "$keep/output.log" | sed -n '1,8s/^/    /p' >&2 || true
    fi
  done
  median=$(printf '%s\n' "${durations[@]}" | sort -n |
    awk '{ a[NR] = $1 } END { if (NR % 2) printf "%.1f", a[(NR + 1) / 2]; else printf "%.1f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  max=$(printf '%s\n' "${durations[@]}" | sort -n | tail -n1)
  if [ "$failures" -gt 0 ]; then
    any_failed=1
    sf=$(IFS=,; echo "${seeds_failed[*]}")
  else
    sf=none
  fi
  summary+=("test=$t runs=$RUNS failures=$failures seeds_failed=$sf median_s=$median max_s=$max")
done

# What the shared broker stored during the loop (and before it): a gap in an idempotent
# producer's sequence is a loss at a partition's head, whether or not a test counted it.
if run_e2e --ignored --exact --nocapture \
  support::stored::every_idempotent_producer_s_stored_sequence_on_the_shared_broker_is_gapless \
  >"$OUT/stored.log" 2>&1; then
  summary+=("stored: $(grep -m1 '^stored sequences' "$OUT/stored.log" || true)")
else
  any_failed=1
  summary+=("stored: FAILED, see $OUT/stored.log: $(grep -m1 -E '^stored sequences|panicked' "$OUT/stored.log" || true)")
fi

printf '%s\n' "${summary[@]}" >"$OUT/summary.txt"
echo "== stress: $seq_no runs; CPU hog: $hog; relay: $RELAY_TEST_BIN; every run: $OUT/runs.tsv"
printf '%s\n' "${summary[@]}"
exit "$any_failed"
