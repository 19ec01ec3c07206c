#!/usr/bin/env bash
# The project's shell scripts run under `set -o pipefail`. There a pipeline whose reader stops
# early (`head`, `grep -q`, `grep -m`, an awk `exit`, a sed `q`) fails at random: the writer
# still writing when the reader has gone dies of SIGPIPE (exit 141) and pipefail makes that the
# pipeline's status. One CI run of 9f25543 ended so, after a green suite: `sort | head -8` in
# slowest_tests (infra/common.sh) on a 10 kB times file, 8 times in 300 on this machine.
#
# This check (run first by scripts/test.sh, in about a second):
#   1. every script parses (bash -n);
#   2. no script pipes into a reader that stops early: read the whole input instead
#      (`sed -n 1,8p`, `find -print -quit`, `[[ $(cmd) == *pattern* ]]`);
#   3. slowest_tests prints the 8 slowest of a 20,000-line times file with exit status 0 under
#      `set -euo pipefail` (with `| head -8` it exits 141 every time at that size).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts=()
while IFS= read -r -d '' f; do scripts+=("$f"); done \
  < <(find scripts infra bench .ci -type f -not -path '*/target/*' \( -name '*.sh' -o -name run -o -name kjava \) -print0 | sort -z)

bad=0
for f in "${scripts[@]}"; do
  bash -n "$f" || { echo "check-shell: $f does not parse" >&2; bad=1; }
done

early='\|[[:space:]]*(head\b|grep([[:space:]]+-[^[:space:]]+)*[[:space:]]+-[a-zA-Z]*[qm]|awk[^|]*\bexit\b|sed[^|]*[;{ ]q\b)'
if hits="$(grep -nE "$early" "${scripts[@]}" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#')"; then
  echo "check-shell: a pipe into a reader that stops early fails at random under pipefail (SIGPIPE, exit 141);" >&2
  echo "read the whole input instead (sed -n 1,Np; find -print -quit; [[ \$(cmd) == *pattern* ]]):" >&2
  sed 's/^/  /' <<<"$hits" >&2
  bad=1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/target"
for i in $(seq 1 20000); do printf '%d.0\tsome::module::test_number_%d\t-\n' "$i" "$i"; done \
  >"$tmp/target/test-times.log"
root="$PWD"
set +e
out="$(cd "$tmp" && bash -c 'set -euo pipefail; source "$1/infra/common.sh"; slowest_tests big' _ "$root")"
rc=$?
set -e
lines="$(printf '%s\n' "$out" | wc -l)"
if [ "$rc" != 0 ] || [ "$lines" != 9 ] || [[ "$out" != *$'\n20000.0\t'* ]]; then
  echo "check-shell: slowest_tests on a 20,000-line times file: exit $rc, $lines lines (want 0 and 9):" >&2
  printf '%s\n' "$out" | sed -n 1,12p >&2
  bad=1
fi

[ "$bad" = 0 ] && echo "check-shell: ${#scripts[@]} scripts parse, no pipe into an early-stopping reader, slowest_tests exits 0"
exit "$bad"
