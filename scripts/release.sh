#!/usr/bin/env bash
# Release artefacts of outbox-relay in target/dist/:
#   outbox-relay            stripped release binary (with a .gnu_debuglink to the debug info)
#   outbox-relay.debug      its debug info, for symbolising crash reports and profiles
#   outbox-relay.1          man page;  completions/{outbox-relay.bash,_outbox-relay,outbox-relay.fish}
#   SHA256SUMS
# The crates are not published to crates.io (`outbox-relay` there is an unrelated crate): install
# from a checkout with `cargo install --path crates/outbox-relay --locked`, or ship target/dist.
# Env: CARGO_TARGET_DIR (default target); RELEASE_BINARY: package this already-built binary
# instead of building the release one (scripts/check-deploy.sh packages the debug build);
# DIST_DIR: write the artefacts there instead (default target/dist; emptied first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target="${CARGO_TARGET_DIR:-target}"
dist="${DIST_DIR:-target/dist}"
bin="${RELEASE_BINARY:-}"
if [ -z "$bin" ]; then
  cargo build --release --locked -p outbox-relay
  bin="$target/release/outbox-relay"
fi
[ -x "$bin" ] || { echo "release.sh: no executable at $bin" >&2; exit 1; }
rm -rf "$dist" && mkdir -p "$dist/completions"
cp "$bin" "$dist/outbox-relay"
objcopy --only-keep-debug "$dist/outbox-relay" "$dist/outbox-relay.debug"
objcopy --strip-debug --strip-unneeded --add-gnu-debuglink="$dist/outbox-relay.debug" "$dist/outbox-relay"
"$dist/outbox-relay" manpage >"$dist/outbox-relay.1"
"$dist/outbox-relay" completions bash >"$dist/completions/outbox-relay.bash"
"$dist/outbox-relay" completions zsh >"$dist/completions/_outbox-relay"
"$dist/outbox-relay" completions fish >"$dist/completions/outbox-relay.fish"
(cd "$dist" && sha256sum outbox-relay outbox-relay.debug outbox-relay.1 completions/* >SHA256SUMS)
ls -l "$dist" | awk 'NR > 1 { printf "%10d  %s\n", $5, $9 }'
