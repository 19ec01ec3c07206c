# shellcheck shell=bash
# Sourced by the measuring scripts (scripts/profile-catchup.sh, scripts/bench-contended.sh):
# release builds of outbox-relay and the bench harness, the binaries they run, and the revision
# they measured.
#   bench_release_build <out>   builds both; sets BENCH and RELAY (RELAY kept when the caller
#                               set one, e.g. another build to compare); writes <out>/rev
bench_release_build() {
  local out="$1" target="${CARGO_TARGET_DIR:-target}"
  cargo build --release --locked -q -p outbox-relay -p bench
  BENCH="$target/release/bench"
  RELAY="${RELAY:-$target/release/outbox-relay}"
  git rev-parse --short HEAD >"$out/rev"
}
