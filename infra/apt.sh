# apt helpers for the installers (sourced after common.sh, not executed): Debian packages are
# checked with dpkg-query, and `apt-get update` runs only once something is missing.
# shellcheck shell=bash

SUDO=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO=(sudo); fi
fi

installed() { [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed"* ]]; }

APT_UPDATED=0
apt_update() {
  [ "$APT_UPDATED" = 0 ] || return 0
  log "apt-get update"
  "${SUDO[@]}" apt-get update -qq
  APT_UPDATED=1
}

apt_install() {
  [ $# -gt 0 ] || return 0
  apt_update
  log "apt-get install $*"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
