# The bench stack's environment (sourced, not executed) for scripts/bench.sh, bench-consumers.sh and
# bench-sources.sh, in place of infra/common.sh, which it sources: a data dir and ports of its own,
# so that a bench never touches the test stack (.stack, 15432, 19092).
#   STACK_DIR (<repo>/.stack-bench), PGPORT (16432), KAFKA_PORT (29192; the controller listens on
#   KAFKA_PORT+1), CONNECT_REST_PORT (28083: Kafka Connect's REST port, scripts/bench.sh)
# shellcheck shell=bash
STACK_DIR="${STACK_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.stack-bench}"
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export PGPORT="${PGPORT:-16432}"
export KAFKA_PORT="${KAFKA_PORT:-29192}"
export CONNECT_REST_PORT="${CONNECT_REST_PORT:-28083}"
