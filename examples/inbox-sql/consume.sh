#!/usr/bin/env bash
# inbox-sql: the SQL recipe as a consumer of what outbox-relay publishes (contract:
# examples/recipes/README.md). kcat reads the records; each one goes to psql, which runs
# apply.sql: ONE transaction claims the event in the inbox, applies the effect only if the claim
# is new, and stores the partition's next offset in kafka_offsets. The position lives in the
# database, committed with the effect, so there is no Kafka offset commit at all: every round
# reads the stored offsets and starts kcat there (-o), one partition after the other, each up to
# its end (-e). GROUP names the stored position (a new name starts at the beginning); there is no
# group membership, so run one process per GROUP.
# Needs kcat and psql on PATH; PG* (libpq) for the database. Exit: after IDLE_MS without a
# record, on SIGINT/SIGTERM between records, or 1 with the reason on stderr.
set -euo pipefail
shopt -s lastpipe # the loop that reads kcat's output runs in this shell: its counters stay
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

records=0 applied=0 duplicates=0
trap 'printf "{\"records\":%d,\"applied\":%d,\"duplicates\":%d}\n" "$records" "$applied" "$duplicates"' EXIT
trap 'exit 143' TERM INT # psql finishes (or rolls back) the record in hand first
fail() { echo "inbox-sql: $*" >&2; exit 1; }

missing=()
for v in BROKERS TOPIC GROUP CONSUMER; do [ -n "${!v:-}" ] || missing+=("$v"); done
[ ${#missing[@]} = 0 ] || fail "set ${missing[*]} (examples/recipes/README.md)"
idle_ms="${IDLE_MS:-3000}"
[[ "$idle_ms" =~ ^[1-9][0-9]{0,8}$ ]] || fail "IDLE_MS=\"$idle_ms\": give a positive number of milliseconds"
command -v kcat >/dev/null || fail "kcat not found (Debian: apt-get install kcat)"

db() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
# read_committed: records of aborted relay transactions (exactly-once mode) are never seen;
# an offset the topic no longer holds restarts at the earliest one, as the other recipes do;
# a short fetch wait, or each partition's end (-e) would take 500 ms to notice.
consume() {
  kcat -C -q -b "$BROKERS" -X isolation.level=read_committed -X auto.offset.reset=earliest \
    -X fetch.wait.max.ms=100 "$@"
}
now_ms() { date +%s%3N; }

# Applies every record kcat prints (one JSON envelope a line), stopping at the first failure.
apply_each() {
  local record out
  while IFS= read -r record; do
    out="$(db -tA -v consumer="$CONSUMER" -v group="$GROUP" -v record="$record" -f "$here/apply.sql")" \
      || fail "stopped at $record: not applied, its offset not stored (psql's reason above)"
    records=$((records + 1))
    case "$out" in
      1) applied=$((applied + 1)) ;;
      0) duplicates=$((duplicates + 1)) ;;
      *) fail "apply.sql printed \"$out\" for $record" ;;
    esac
  done
}

declare -A next # partition -> stored next offset
last=$(now_ms) # the last record (or the start)
while :; do
  parts="$(kcat -L -b "$BROKERS" -t "$TOPIC" | sed -n 's/^ *partition \([0-9][0-9]*\),.*/\1/p')" \
    || fail "cannot read the metadata of topic $TOPIC from $BROKERS"
  [ -n "$parts" ] || fail "topic $TOPIC has no partitions at $BROKERS: check BROKERS and TOPIC"
  offsets="$(db -tA -F ' ' -v group="$GROUP" -v topic="$TOPIC" <<'SQL'
SELECT kafka_partition, next_offset FROM kafka_offsets
 WHERE consumer_group = :'group' AND topic = :'topic';
SQL
  )" || fail "cannot read the stored offsets (kafka_offsets: examples/recipes/schema.sql)"
  next=()
  while read -r p o; do [ -z "$p" ] || next[$p]=$o; done <<<"$offsets"
  before=$records
  for p in $parts; do
    consume -J -e -t "$TOPIC" -p "$p" -o "${next[$p]:-beginning}" | apply_each \
      || fail "kcat failed reading $TOPIC[$p] (its reason above)"
  done
  if [ "$records" -gt "$before" ]; then
    last=$(now_ms)
  elif [ $(($(now_ms) - last)) -ge "$idle_ms" ]; then
    exit 0 # idle: done
  fi
  sleep 0.3
done
