#!/usr/bin/env bash
# ACL helper around AclCommand for the brokers of infra/kafka/start.sh (they run StandardAuthorizer only
# when started with it in KAFKA_EXTRA_PROPS, as the Kafka security tests do).
# Usage: acls.sh [AclCommand args...], e.g.
#   acls.sh --add --allow-principal User:relay --operation IdempotentWrite --cluster
#   acls.sh --add --allow-principal User:relay --operation Write --operation Describe \
#           --topic orders. --resource-pattern-type prefixed
#   acls.sh --list
# Env: KAFKA_PORT (19092) -- or KAFKA_BOOTSTRAP; KAFKA_COMMAND_CONFIG: client properties of a super
# user (security.protocol, sasl.*) when the listener needs them.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BOOTSTRAP="${KAFKA_BOOTSTRAP:-127.0.0.1:$PORT}"
exec "$KJ" org.apache.kafka.tools.AclCommand --bootstrap-server "$BOOTSTRAP" \
  ${KAFKA_COMMAND_CONFIG:+--command-config "$KAFKA_COMMAND_CONFIG"} "$@"
