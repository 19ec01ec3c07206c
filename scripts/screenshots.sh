#!/usr/bin/env bash
# Makes the console's screenshots for the README and docs/operations.md, so they show the page as
# it is: docs/images/console-relay.png (a relay streaming 20 events a second for
# SCREENSHOT_STREAM_SECS, default 60, with a firing alert and the charts' first minute) and
# docs/images/console-applier.png (an applier with a dead letter and a halted partition).
# It runs the ignored e2e test console::screenshots against the local stack (infra/stack.sh,
# started here if it is down, and stopped again) in headless Chromium (the Debian package
# `chromium`; CHROMIUM=<path> for another), then copies the PNGs into docs/images.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

command -v "${CHROMIUM:-chromium}" >/dev/null \
  || { echo "chromium not found: infra/install-deps.sh installs it (apt-get install chromium)" >&2; exit 1; }
# A stack that answers on its ports is used as it is (another worktree's, say), never restarted.
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
started_stack=0
if ! infra/stack.sh status >/dev/null 2>&1 && ! { answers 15432 && answers 19092; }; then
  infra/stack.sh up
  started_stack=1
fi
cleanup() { if [ "$started_stack" = 1 ]; then infra/stack.sh down || true; fi; }
trap cleanup EXIT

out="${CARGO_TARGET_DIR:-target}/screenshots"
rm -rf "$out"
SCREENSHOT_DIR="$(realpath -m "$out")" cargo test -p relay-tests --locked -- \
  --ignored --exact console::screenshots --nocapture
mkdir -p docs/images
for f in console-relay.png console-applier.png; do
  [ -s "$out/$f" ] || { echo "missing $out/$f" >&2; exit 1; }
  cp "$out/$f" "docs/images/$f"
  echo "docs/images/$f"
done
