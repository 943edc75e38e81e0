#!/usr/bin/env bash
# The Debian packages rogue-watchdog's setup installs (apt-get; as root, else a note and
# nothing). Called by scripts/setup.sh:
#   setup-packages.sh PKG...   install these (setup.sh: python3 python3-venv when missing);
#   setup-packages.sh --test   the system packages the system tests drive (cron, at, Slurm,
#                              munge, gcc, Prometheus and Alertmanager, tmux, vim (the
#                              busy-box test edits a file in it), Chromium,
#                              git (build-deb.sh lists the checkout with it), podman, docker;
#                              on a host booted with systemd their packages enable their own
#                              services on ports 9090/9093: the tests never use those, they
#                              run their own on loopback ports), dh-virtualenv with
#                              build-essential, and the build dependencies debian/control
#                              names, read from that file itself (apt-get build-dep ./:
#                              debhelper-compat (= 13) is debhelper, which dh-virtualenv
#                              does not pull in; a machine that had it by hand hides that).
# tests/system/test_prerequisites.py runs this against a recording apt-get and checks that
# what it asks for covers every program a system test needs and every build dependency.
# Environment: RW_APT_STAMP, the file saying the package lists were refreshed by this
# script (default /var/lib/apt/periodic/rw-updated).
set -euo pipefail
cd "$(dirname "$0")/.."

TEST_PACKAGES=(
  cron at munge slurm-wlm gcc libc6-dev procps util-linux prometheus prometheus-alertmanager
  dh-virtualenv build-essential tmux vim chromium git sudo
  podman runc conmon busybox-static docker.io
)
STAMP=${RW_APT_STAMP:-/var/lib/apt/periodic/rw-updated}

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: not root; skipping apt-get install ${*}" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive

apt_install() {
  # Refresh the lists once (a fresh VM has stale or none), or when an install fails.
  if [ ! -f "$STAMP" ] || ! apt-get install -y -qq "$@" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq "$@" >/dev/null
    mkdir -p "$(dirname "$STAMP")" && touch "$STAMP"
  fi
}

apt_build_deps() {
  if dpkg-checkbuilddeps debian/control >/dev/null 2>&1; then
    return 0
  fi
  if ! apt-get build-dep -y -qq ./ >/dev/null 2>&1; then
    apt-get update -qq
    apt-get build-dep -y -qq ./ >/dev/null
  fi
}

if [ "${1:-}" = "--test" ]; then
  apt_install "${TEST_PACKAGES[@]}"
  apt_build_deps
else
  apt_install "$@"
fi
