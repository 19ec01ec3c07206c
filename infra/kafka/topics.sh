#!/usr/bin/env bash
# Topic helper around TopicCommand for the broker of infra/kafka/start.sh.
# Usage: topics.sh create TOPIC [PARTITIONS] [TopicCommand args...]   (idempotent: --if-not-exists, RF 1)
#        topics.sh delete TOPIC | describe [TOPIC] | list
# Env: KAFKA_PORT (19092) -- or KAFKA_BOOTSTRAP to point at any broker.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:$PORT}"
TC=("$KJ" org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP")

cmd="${1:-}"; shift || true
case "$cmd" in
  create)
    [ $# -ge 1 ] || die "usage: $0 create TOPIC [PARTITIONS] [args...]"
    topic="$1"; shift
    parts=3
    if [ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; then parts="$1"; shift; fi
    exec "${TC[@]}" --create --if-not-exists --topic "$topic" --partitions "$parts" --replication-factor 1 "$@" ;;
  delete)
    [ $# -eq 1 ] || die "usage: $0 delete TOPIC"
    exec "${TC[@]}" --delete --if-exists --topic "$1" ;;
  describe)
    if [ $# -ge 1 ]; then exec "${TC[@]}" --describe --topic "$1"; fi
    exec "${TC[@]}" --describe ;;
  list)
    exec "${TC[@]}" --list ;;
  *)
    die "usage: $0 create TOPIC [PARTITIONS] [args...] | delete TOPIC | describe [TOPIC] | list" ;;
esac
