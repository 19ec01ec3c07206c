#!/usr/bin/env bash
# Builds the native peers of the benchmark from source (issue 46): outboxx (Zig + librdkafka) and a
# minimal main program on go-pq-cdc-kafka (Go, segmentio/kafka-go), into a scratch directory
# outside the repository. Idempotent: what is installed and built at the pinned revision is kept.
#
#   bench/peers/build.sh            builds both into $PEERS_DIR (default /work/peers-src)
#   PEERS_DIR=/tmp/peers bench/peers/build.sh
#
# Sources, at the pinned commits below: from $PEERS_MIRROR/<owner>+<name>/repo (a git directory,
# default /work/.mirror) when it holds the commit, else a clone from GitHub. Nothing fetched is
# ever copied into the repository.
#   outboxx: zig build -Doptimize=ReleaseFast (its default) with Zig 0.16.0 from PyPI (`ziglang`,
#     in a venv), Debian's librdkafka-dev and libpq-dev. Its Zig packages are seeded into the Zig
#     cache with `zig fetch` from the same git snapshots, each checked against the hash its
#     build.zig.zon pins. One change to a transitive build script: zig-protobuf's build.zig asks
#     for a prebuilt protoc (a lazy dependency) while configuring, only for its `bootstrap` step;
#     that line is replaced so that no binary is downloaded (outboxx's binary is unaffected).
#   go-pq-cdc-kafka: bench/peers/go-pq-cdc-kafka/{main.go,go.mod,go.sum} built with Go >= 1.25;
#     the two Trendyol modules are taken from git (the module proxy answers 403 for them here)
#     through replace directives, every other module from the module proxy.
# Binaries: $PEERS_DIR/outboxx/zig-out/bin/outboxx, $PEERS_DIR/gopqcdc-outbox/gopqcdc-outbox (the
# paths bench/src/systems.rs runs). $PEERS_DIR/peers.txt records what was built.
# A peer that cannot be built is reported with the reason; the exit code is then 1.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PEERS_DIR="${PEERS_DIR:-/work/peers-src}"
MIRROR="${PEERS_MIRROR:-/work/.mirror}"
mkdir -p "$PEERS_DIR"
PEERS_DIR="$(cd "$PEERS_DIR" && pwd)"
log() { printf '[peers/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- pins -----------------------------------------------------------------------------------
OUTBOXX_REV=58b4ba127d7047ba8aef581bd7e3c737ed2ff69e  # lukashes/outboxx main, 2026-08-07 (0.3.0)
ZIG_VERSION=0.16.0                                     # outboxx's minimum_zig_version
# outboxx's Zig packages, direct and transitive: name repo commit hash (from the build.zig.zon files)
ZIG_DEPS=(
  "toml sam701/zig-toml 8685923e32e8b8a795eb2715684236975a70faed toml-0.3.0-bV14BRmKAQAWR0FT0KUKFwVJTImaFhWjSe6HfSMtNZOH"
  "opentelemetry open-telemetry/opentelemetry-zig e0733b5c76cf824d779bbbc16bd245fd150547a3 opentelemetry-0.0.1-U_uKJyc5EAAZw67wdZWA_8xFEeuWBd4Gidi4ohaTJkwq"
  "zbench hendriknielaender/zBench b2b89c475e3ef1bb2bd71255c80478a82d3e0ca8 zbench-0.13.0-YTdc7xVBAQCCMC-IdLLuotBeiNNNm8k9Pi2V4VYqrwfI"
  "opentelemetry_proto zig-o11y/opentelemetry-proto c43bd4c4db96fd839c594b7b701b44866b19457e opentelemetry_proto-1.10.3-S4Y0u6zjAgBXl5JQ75DnsV5L2DsJeRzbgbYLSDTkl-f9"
  "protobuf Arwalk/zig-protobuf 1f6cb06156b3ff4f52f98bc14f829c0b8393a6fc protobuf-5.0.0-0e82avKUKAAVwTWJzTIEZ14Fu0zC11_lElR8tE6H__y1"
)
GOPQ_KAFKA_REV=4200661466cc07cdfcb3f15c8ac57f86f6e88f19  # Trendyol/go-pq-cdc-kafka v1.3.1
GOPQ_REV=41bd50379a784e0d00b4573229b5c717ce59c24d        # Trendyol/go-pq-cdc v1.10.12 (its go.mod's)

# --- helpers --------------------------------------------------------------------------------
# git_dir OWNER/NAME REV: prints a git directory holding REV (the mirror, else a clone of ours).
git_dir() {
  local repo="$1" rev="$2" m="$MIRROR/${1/\//+}/repo" c="$PEERS_DIR/git/${1/\//+}.git"
  if [ -d "$m" ] && git --git-dir="$m" cat-file -e "$rev^{commit}" 2>/dev/null; then echo "$m"; return; fi
  if [ -d "$c" ] && git --git-dir="$c" cat-file -e "$rev^{commit}" 2>/dev/null; then echo "$c"; return; fi
  log "cloning https://github.com/$repo (no snapshot with $rev under $MIRROR)"
  rm -rf "$c"
  if ! git clone -q --bare "https://github.com/$repo" "$c" 2>"$PEERS_DIR/clone.err"; then
    log "cannot get $repo at $rev: not in $MIRROR and git clone failed: $(tr '\n' ' ' <"$PEERS_DIR/clone.err")"
    return 1
  fi
  git --git-dir="$c" cat-file -e "$rev^{commit}" 2>/dev/null || { log "$repo has no commit $rev"; return 1; }
  echo "$c"
}

# export_rev OWNER/NAME REV DEST: DEST = the tree of REV (left alone if already that revision).
# Large binary blobs some snapshots leave out (go-pq-cdc-kafka's benchmark/) are not exported.
export_rev() {
  local g
  [ -f "$3/.peer-rev" ] && [ "$(cat "$3/.peer-rev")" = "$2" ] && return 0
  g="$(git_dir "$1" "$2")" || return 1
  rm -rf "$3"; mkdir -p "$3"
  git --git-dir="$g" archive "$2" -- . ':(exclude)benchmark' 2>"$PEERS_DIR/archive.err" | tar -x -C "$3" \
    || { log "git archive of $1 $2 failed: $(cat "$PEERS_DIR/archive.err")"; return 1; }
  echo "$2" >"$3/.peer-rev"
}

need_debs() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then log "missing Debian packages ${missing[*]} and not root: install them with apt-get"; return 1; fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$PEERS_DIR/apt.log" 2>&1 \
    || { log "apt-get install ${missing[*]} failed (see $PEERS_DIR/apt.log)"; return 1; }
}

# --- outboxx --------------------------------------------------------------------------------
build_outboxx() {
  local src="$PEERS_DIR/outboxx" bin="$PEERS_DIR/outboxx/zig-out/bin/outboxx"
  local Z="$PEERS_DIR/venv/bin/python -m ziglang"
  export ZIG_GLOBAL_CACHE_DIR="$PEERS_DIR/zig-global-cache"
  need_debs librdkafka-dev libpq-dev pkg-config || return 1
  if [ "$("$PEERS_DIR/venv/bin/python" -m ziglang version 2>/dev/null || true)" != "$ZIG_VERSION" ]; then
    log "pip install ziglang==$ZIG_VERSION (venv $PEERS_DIR/venv)"
    { [ -x "$PEERS_DIR/venv/bin/pip" ] || python3 -m venv "$PEERS_DIR/venv"; } \
      && "$PEERS_DIR/venv/bin/pip" install -q "ziglang==$ZIG_VERSION" \
      || { log "outboxx: cannot install Zig $ZIG_VERSION from PyPI (pip install ziglang==$ZIG_VERSION)"; return 1; }
  fi
  if [ -x "$bin" ] && [ "$(cat "$src/.peer-rev" 2>/dev/null)" = "$OUTBOXX_REV" ]; then
    log "outboxx $OUTBOXX_REV already built"; return 0
  fi
  export_rev lukashes/outboxx "$OUTBOXX_REV" "$src" || return 1
  local line name repo rev hash got
  for line in "${ZIG_DEPS[@]}"; do
    read -r name repo rev hash <<<"$line"
    export_rev "$repo" "$rev" "$PEERS_DIR/zig-deps/$name" || return 1
    # zig fetch hashes the package as zig does; hash a copy without our .peer-rev marker.
    rm -rf "$PEERS_DIR/zig-deps/.tmp-$name"; cp -r "$PEERS_DIR/zig-deps/$name" "$PEERS_DIR/zig-deps/.tmp-$name"
    rm -f "$PEERS_DIR/zig-deps/.tmp-$name/.peer-rev"
    got="$(cd "$src" && $Z fetch "$PEERS_DIR/zig-deps/.tmp-$name" 2>&1)"
    rm -rf "$PEERS_DIR/zig-deps/.tmp-$name"
    [ "$got" = "$hash" ] || { log "outboxx: Zig package $name ($repo $rev) hashes to '$got', build.zig.zon pins $hash"; return 1; }
    if [ "$name" = protobuf ]; then
      # The project-local copy zig builds from, without the prebuilt protoc (see the header).
      mkdir -p "$src/zig-pkg"; rm -rf "$src/zig-pkg/$hash"
      cp -r "$PEERS_DIR/zig-deps/$name" "$src/zig-pkg/$hash"; rm -f "$src/zig-pkg/$hash/.peer-rev"
      sed -i 's#const include = if (try build_util.getProtocDependency(b)) |protoc| protoc.path("include") else b.path("");#const include = b.path(""); // bench/peers/build.sh: no prebuilt protoc (only the bootstrap step uses it)#' \
        "$src/zig-pkg/$hash/build.zig"
      grep -q 'bench/peers/build.sh: no prebuilt protoc' "$src/zig-pkg/$hash/build.zig" \
        || { log "outboxx: zig-protobuf's build.zig changed; the protoc line was not found"; return 1; }
    fi
  done
  log "outboxx: zig build -Doptimize=ReleaseFast (a few minutes)"
  if ! (cd "$src" && $Z build -Doptimize=ReleaseFast >"$PEERS_DIR/outboxx-build.log" 2>&1); then
    log "outboxx: zig build failed (cd $src && python -m ziglang build -Doptimize=ReleaseFast):"
    tail -20 "$PEERS_DIR/outboxx-build.log" >&2; return 1
  fi
  echo "$OUTBOXX_REV" >"$src/.peer-rev"
}

# --- go-pq-cdc-kafka ------------------------------------------------------------------------
build_gopq() {
  local GO out="$PEERS_DIR/gopqcdc-outbox"
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$GO" ] || { log "go-pq-cdc-kafka: no Go toolchain (go on PATH or /usr/local/go/bin/go)"; return 1; }
  export GOMODCACHE="$PEERS_DIR/gomodcache" GOCACHE="$PEERS_DIR/gocache" GOTOOLCHAIN=local
  export_rev Trendyol/go-pq-cdc-kafka "$GOPQ_KAFKA_REV" "$PEERS_DIR/go-pq-cdc-kafka" || return 1
  export_rev Trendyol/go-pq-cdc "$GOPQ_REV" "$PEERS_DIR/go-pq-cdc" || return 1
  mkdir -p "$out"
  cp "$HERE/go-pq-cdc-kafka/main.go" "$HERE/go-pq-cdc-kafka/go.mod" "$HERE/go-pq-cdc-kafka/go.sum" "$out/"
  log "go-pq-cdc-kafka: go build ($("$GO" version))"
  if ! (cd "$out" && "$GO" build -trimpath -o gopqcdc-outbox . >"$PEERS_DIR/gopq-build.log" 2>&1); then
    log "go-pq-cdc-kafka: go build failed (cd $out && go build -trimpath -o gopqcdc-outbox .):"
    tail -20 "$PEERS_DIR/gopq-build.log" >&2; return 1
  fi
}

rc=0
: >"$PEERS_DIR/peers.txt.new"
if build_outboxx; then
  echo "outboxx lukashes/outboxx@$OUTBOXX_REV zig $ZIG_VERSION librdkafka $(dpkg-query -W -f='${Version}' librdkafka-dev) libpq $(dpkg-query -W -f='${Version}' libpq-dev) $PEERS_DIR/outboxx/zig-out/bin/outboxx" >>"$PEERS_DIR/peers.txt.new"
else
  echo "outboxx NOT BUILT (see the log above)" >>"$PEERS_DIR/peers.txt.new"; rc=1
fi
if build_gopq; then
  echo "go-pq-cdc-kafka Trendyol/go-pq-cdc-kafka@$GOPQ_KAFKA_REV (v1.3.1) go-pq-cdc@$GOPQ_REV (v1.10.12) $("$(command -v go || echo /usr/local/go/bin/go)" version | cut -d' ' -f3) $PEERS_DIR/gopqcdc-outbox/gopqcdc-outbox" >>"$PEERS_DIR/peers.txt.new"
else
  echo "go-pq-cdc-kafka NOT BUILT (see the log above)" >>"$PEERS_DIR/peers.txt.new"; rc=1
fi
mv "$PEERS_DIR/peers.txt.new" "$PEERS_DIR/peers.txt"
cat "$PEERS_DIR/peers.txt" >&2
exit $rc
