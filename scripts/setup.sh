#!/usr/bin/env bash
# Creates .venv (the product's own virtual environment: PyPI's `watchdog` shares the import
# name) and installs rogue-watchdog into it. With --test, also the test tools and the
# system packages the system tests drive (cron, at, Slurm, munge, gcc, Prometheus and
# Alertmanager; on a host booted with systemd their packages enable their own services on
# ports 9090/9093: the tests never use those, they run their own on loopback ports; and
# dh-virtualenv with build-essential and the Build-Depends of debian/control, to build the
# Debian package; and the llama-cpp-python sdist, whose vendored ggml the weights tests
# compile into llama.cpp's C GGUF reader).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: not root; skipping apt-get install $*" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f /var/lib/apt/periodic/rw-updated ] || ! apt-get install -y -qq "$@" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq "$@" >/dev/null
    mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/rw-updated
  fi
}

# The build dependencies debian/control names, read from that file itself (apt resolves
# debhelper-compat (= 13) to debhelper): dh-virtualenv does not pull debhelper in, and a
# machine that happens to have it hides the gap.
apt_build_deps() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: not root; skipping apt-get build-dep ./" >&2
    return 0
  fi
  if dpkg-checkbuilddeps debian/control >/dev/null 2>&1; then
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get build-dep -y -qq ./ >/dev/null 2>&1; then
    apt-get update -qq
    apt-get build-dep -y -qq ./ >/dev/null
  fi
}

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
   || ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip' 2>/dev/null; then
  apt_install python3 python3-venv
  PY=/usr/bin/python3
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "$want_test" = 1 ]; then
  apt_install cron at munge slurm-wlm gcc libc6-dev procps util-linux prometheus prometheus-alertmanager \
    dh-virtualenv build-essential tmux chromium \
    podman runc conmon busybox-static docker.io
  apt_build_deps
  .venv/bin/python -m pip install -q -e '.[test]'
  # llama.cpp's C GGUF reader for the ship gate's differential tests, from the sources the
  # llama-cpp-python sdist vendors (tests/weights/ggml/build.py compiles it per test run).
  sdist_dir=.venv/share/rogue-watchdog-tests
  if [ ! -f "$sdist_dir/llama_cpp_python-0.3.36.tar.gz" ]; then
    mkdir -p "$sdist_dir"
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: 'llama-cpp-python==0.3.36' -d "$sdist_dir"
  fi
else
  .venv/bin/python -m pip install -q .
fi
