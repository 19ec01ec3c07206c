#!/usr/bin/env bash
# Downloads what the inbox recipes (examples/inbox-go, examples/inbox-java, examples/inbox-sql) need,
# so that tests/e2e/recipes.rs can build them OFFLINE (GOPROXY=off, mvn -o) and run them.
# Idempotent; warm, it takes well under a second (go mod download is a no-op, a stamp per pom.xml
# content skips Maven, dpkg-query finds kcat).
#  - Go modules pinned by examples/inbox-go/go.sum -> the Go module cache (go mod download)
#  - Maven artifacts and plugins of examples/inbox-java/pom.xml -> ~/.m2 (one `mvn package`)
#  - kcat (Debian package) for examples/inbox-sql/consume.sh
# Called by infra/install-deps.sh; needs go (1.26+: see go.mod; not from Debian, whose golang is
# older: the error says how to install it) and mvn + JDK 17 on PATH.
set -euo pipefail
LOG_TAG=recipes
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=apt.sh
. "$INFRA_DIR/apt.sh"

# 1. Go: the module cache verifies every download against go.sum.
GO_DIR="$REPO_DIR/examples/inbox-go"
if ! command -v go >/dev/null; then
  gover="$(sed -n 's/^go //p' "$GO_DIR/go.mod")"
  die "go not found on PATH. examples/inbox-go needs Go $gover or newer, and Debian's golang package is older, so install the release from go.dev (as root):
  rm -rf /usr/local/go && curl -fsSL https://go.dev/dl/go$gover.linux-$(dpkg --print-architecture).tar.gz | tar -C /usr/local -xz
  export PATH=\"/usr/local/go/bin:\$PATH\"   # and add it to your shell profile
then re-run $0 (or scripts/test.sh)"
fi
t0=$(now_ms)
(cd "$GO_DIR" && GOFLAGS=-mod=readonly go mod download) || die "go mod download failed in $GO_DIR"
log "Go modules of examples/inbox-go ready in $(( $(now_ms) - t0 )) ms"

# 2. Maven: a build downloads the dependencies AND every plugin (with the plugins' own
#    dependencies, which dependency:go-offline misses). A stamp in the local repository records
#    that this pom.xml was resolved there (deleting ~/.m2 deletes the stamp with it).
JAVA_DIR="$REPO_DIR/examples/inbox-java"
# MAVEN_REPO: another local repository (e.g. to check a cold download); default ~/.m2/repository
M2_REPO="${MAVEN_REPO:-$HOME/.m2/repository}"
MVN_ARGS=(-B -q -Dstyle.color=never)
if [ -n "${MAVEN_REPO:-}" ]; then MVN_ARGS+=("-Dmaven.repo.local=$MAVEN_REPO"); fi
sum="$(sha256sum "$JAVA_DIR/pom.xml" | cut -c1-16)"
STAMP="$M2_REPO/.outbox-relay-recipes/inbox-java-$sum"
if [ ! -f "$STAMP" ]; then
  log "fetching the Maven artifacts of examples/inbox-java"
  t0=$(now_ms)
  mkdir -p "$STACK_DIR"
  mvn "${MVN_ARGS[@]}" -f "$JAVA_DIR/pom.xml" package >"$STACK_DIR/mvn-inbox-java.out" 2>&1 \
    || { cat "$STACK_DIR/mvn-inbox-java.out" >&2; die "Maven build of examples/inbox-java failed"; }
  mkdir -p "$(dirname "$STAMP")"
  touch "$STAMP"
  log "Maven artifacts of examples/inbox-java ready in $(( $(now_ms) - t0 )) ms"
fi

# 3. kcat: the SQL recipe's Kafka client (examples/inbox-sql/consume.sh).
installed kcat || apt_install kcat
