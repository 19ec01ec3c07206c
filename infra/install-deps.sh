#!/usr/bin/env bash
# Install what the local (Docker-free) test stack needs, on Debian 12; idempotent, a fast no-op when all is present.
#  - apt: postgresql-15 (server+client), rdkafka build deps (incl. libssl-dev: rdkafka's `ssl` feature), Java 17
#    (JRE and JDK) + Maven if missing
#  - Rust via rustup only if cargo is missing (fails with a hint when rustup is not packaged, e.g. on bookworm)
#  - Kafka jars from Maven Central into infra/kafka/lib (infra/kafka/pom.xml)
# With --demo it stops there: that is all the demo's stack (PostgreSQL 15 + Kafka) needs. Without it, for the
# tests, also:
#  - PostgreSQL 14, 16, 17, 18 and 13 server binaries from Maven Central into infra/pg/<major> (infra/pg/pom.xml):
#    the version matrix, failover slots (17), PostgreSQL 18's own features, the refusal of servers older than 14
#  - the Debezium PostgreSQL connector plugin into infra/debezium/plugins (infra/debezium/pom.xml)
#  - apt: chromium, the headless browser of the console's tests (tests/e2e/console.rs)
#  - the Go modules, Maven artifacts and kcat of the inbox recipes (infra/install-recipes.sh; Go itself must be
#    on PATH: it says how to get it)
set -euo pipefail
DEMO_ONLY=0
case "${1:-}" in
  --demo) DEMO_ONLY=1 ;;
  "") ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac
LOG_TAG=deps
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# shellcheck source=apt.sh
. "$INFRA_DIR/apt.sh"

java_major() { java -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | sed -n 1p; }
javac_major() { javac -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p' | sed -n 1p; }

# 1. Debian packages (checked with dpkg-query; apt-get update only when something is missing).
# Note: installing postgresql-15 also creates+starts Debian's default cluster 15/main on port 5432; the stack
# does not use it (it runs its own clusters under $STACK_DIR).
missing=()
# tmux: the e2e test of `status --watch` drives it in a terminal (tests/e2e/status_watch.rs).
for p in postgresql-15 postgresql-client-15 gcc g++ make pkg-config zlib1g-dev libssl-dev cmake curl python3 openssl tmux; do
  installed "$p" || missing+=("$p")
done
if ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ] 2>/dev/null; then missing+=(openjdk-17-jre-headless); fi
# the JDK: javac for `mvn package` of examples/inbox-java (the JRE runs Kafka, not Maven's compiler)
if ! command -v javac >/dev/null || [ "$(javac_major)" -lt 17 ] 2>/dev/null; then missing+=(openjdk-17-jdk-headless); fi
command -v mvn >/dev/null || missing+=(maven)
apt_install "${missing[@]}"
if [ "$(java_major)" -lt 17 ] 2>/dev/null; then
  die "java on PATH is $(java_major), Kafka 4 needs 17+: select it (update-alternatives --config java) or set JAVA_HOME"
fi

# 2. Rust toolchain (rust-toolchain.toml picks the channel once rustup exists).
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  if ! command -v rustup >/dev/null; then
    apt_update
    if [[ "$(apt-cache policy rustup 2>/dev/null || true)" =~ Candidate:\ [0-9] ]]; then
      apt_install rustup
    else
      die "cargo not found and no Debian 'rustup' package here (bookworm has none; Debian's own cargo is too old for edition 2024). Install rustup from https://rustup.rs, then re-run."
    fi
  fi
  log "rustup: installing the stable toolchain"
  rustup toolchain install stable --profile minimal --component rustfmt,clippy
  rustup default stable
fi
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
  log "note: cargo is in $HOME/.cargo/bin, which is not on PATH"
fi

# 3. Kafka jars (a stamp file marks a complete download of this Kafka version).
KAFKA_DIR="$INFRA_DIR/kafka"
KVER="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_DIR/pom.xml")"
[ -n "$KVER" ] || die "cannot read kafka.version from $KAFKA_DIR/pom.xml"
STAMP="$KAFKA_DIR/lib/.complete-$KVER"
if [ ! -f "$STAMP" ] || [ "$STAMP" -ot "$KAFKA_DIR/pom.xml" ]; then
  log "fetching Kafka $KVER jars with Maven into $KAFKA_DIR/lib"
  t0=$(now_ms)
  # download into lib.new, then swap (never leaves a half-filled lib/ behind a running broker)
  rm -rf "$KAFKA_DIR/lib.new" "$KAFKA_DIR/lib.old"
  mkdir -p "$STACK_DIR"
  mvn -B -q -Dstyle.color=never -f "$KAFKA_DIR/pom.xml" -Dkafka.lib.dir="$KAFKA_DIR/lib.new" dependency:copy-dependencies \
    >"$STACK_DIR/mvn-kafka.out" 2>&1 || { cat "$STACK_DIR/mvn-kafka.out" >&2; die "Maven download of the Kafka jars failed"; }
  [ -f "$KAFKA_DIR/lib.new/kafka_2.13-$KVER.jar" ] || die "Maven finished but kafka_2.13-$KVER.jar is missing"
  touch "$KAFKA_DIR/lib.new/.complete-$KVER"
  if [ -d "$KAFKA_DIR/lib" ]; then mv "$KAFKA_DIR/lib" "$KAFKA_DIR/lib.old"; fi
  mv "$KAFKA_DIR/lib.new" "$KAFKA_DIR/lib"
  rm -rf "$KAFKA_DIR/lib.old"
  log "Kafka jars ready in $(( $(now_ms) - t0 )) ms ($(find "$KAFKA_DIR/lib" -name '*.jar' | wc -l) jars)"
fi
if [ "$DEMO_ONLY" = 1 ]; then
  log "the demo's dependencies are present (the tests' own: infra/install-deps.sh without --demo)"
  exit 0
fi
# 4. PostgreSQL server binaries from Maven Central (infra/pg/pom.xml explains the source): the version matrix
#    (14, 16, 17, 18), failover slots (17), 18's own features, 13 for the refusal of servers older than 14.
fetch_pg() {
  local major="$1" ver dir stamp arch jar t0
  ver="$(sed -n "s:.*<pg$major.version>\(.*\)</pg$major.version>.*:\1:p" "$INFRA_DIR/pg/pom.xml")"
  [ -n "$ver" ] || die "cannot read pg$major.version from $INFRA_DIR/pg/pom.xml"
  dir="$INFRA_DIR/pg/$major"
  stamp="$dir/.complete-$ver"
  if [ -f "$stamp" ]; then return 0; fi  # the version is in the stamp's name
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64v8 ;;
    *) die "no PostgreSQL $major binaries for $(uname -m) in io.zonky.test.postgres" ;;
  esac
  log "fetching PostgreSQL $ver server binaries with Maven into $dir"
  t0=$(now_ms)
  rm -rf "$dir.jar" "$dir.new"
  mkdir -p "$STACK_DIR" "$dir.new"
  mvn -B -q -Dstyle.color=never -f "$INFRA_DIR/pg/pom.xml" -Dpg.version="$ver" -Dpg.jar.dir="$dir.jar" \
    -Dpg.arch="$arch" dependency:copy-dependencies >"$STACK_DIR/mvn-pg$major.out" 2>&1 \
    || { cat "$STACK_DIR/mvn-pg$major.out" >&2; die "Maven download of the PostgreSQL $major binaries failed"; }
  jar="$(find "$dir.jar" -name "embedded-postgres-binaries-linux-*-$ver.jar" -print -quit)"
  [ -n "$jar" ] || die "Maven finished but the PostgreSQL $ver jar is missing in $dir.jar"
  # the jar holds one postgres-linux-*.txz: unpack it with python's zipfile (no unzip needed)
  python3 - "$jar" "$dir.new" <<'PY'
import sys, tarfile, zipfile
jar, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(jar) as z:
    [name] = [n for n in z.namelist() if n.endswith(".txz")]
    with z.open(name) as f, tarfile.open(fileobj=f, mode="r|xz") as t:
        t.extractall(dest)
PY
  "$dir.new/bin/postgres" --version >/dev/null || die "the unpacked PostgreSQL $major does not run on this machine"
  touch "$dir.new/.complete-$ver"
  rm -rf "$dir" "$dir.jar"
  mv "$dir.new" "$dir"
  log "PostgreSQL $("$dir/bin/postgres" --version | awk '{print $3}') ready in $(( $(now_ms) - t0 )) ms ($dir)"
}
for major in 14 16 17 18 13; do fetch_pg "$major"; done
# 4b. Headless Chromium for the console's browser tests (tests/e2e/console.rs, driven over the DevTools
#     protocol) and scripts/screenshots.sh: Debian's own package, no downloaded browser.
installed chromium || apt_install chromium
# 5. Debezium plugin jars (infra/debezium/pom.xml) for the side-by-side test (tests/e2e/debezium_compat/)
#    and the benchmark peers.
DBZ_JAR="$INFRA_DIR/debezium/plugins/debezium-connector-postgres/debezium-connector-postgres-3.6.1.Final.jar"
if [ ! -f "$DBZ_JAR" ] || [ "$DBZ_JAR" -ot "$INFRA_DIR/debezium/pom.xml" ]; then
  log "fetching the Debezium 3.6.1 plugin jars with Maven into $INFRA_DIR/debezium/plugins"
  mkdir -p "$STACK_DIR"
  mvn -B -q -Dstyle.color=never -f "$INFRA_DIR/debezium/pom.xml" dependency:unpack >"$STACK_DIR/mvn-debezium.out" 2>&1 \
    || { cat "$STACK_DIR/mvn-debezium.out" >&2; die "Maven download of the Debezium plugin failed"; }
  [ -f "$DBZ_JAR" ] || die "Maven finished but $DBZ_JAR is missing"
fi
# 6. The inbox recipes' Go modules and Maven artifacts (tests/e2e/recipes.rs builds them offline).
"$INFRA_DIR/install-recipes.sh"
log "all dependencies present"
