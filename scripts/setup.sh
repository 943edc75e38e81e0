#!/usr/bin/env bash
# Creates .venv (the product's own virtual environment, for its pinned dependencies) and
# installs rogue-watchdog into it: editable with --test (the folder watchdog/ imported as
# rogue_watchdog through setuptools' editable finder, docs/dependencies.md). With --test,
# also the test tools, the system packages the system tests drive and the build
# dependencies of debian/control (scripts/setup-packages.sh --test), and the
# llama-cpp-python sdist, whose vendored ggml the weights tests compile into llama.cpp's C
# GGUF reader.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

# The system packages (apt) live in scripts/setup-packages.sh: tests/system/
# test_prerequisites.py runs it against a recording apt-get and checks that what it asks
# for covers every program the system tests need and every build dependency.
apt_install() { bash scripts/setup-packages.sh "$@"; }

# pip, its stderr filtered by scripts/pip-quiet.awk: a host whose pip configuration names a
# local index directory (extra-index-url = file:///...) warns once per package that
# directory lacks; pip's exit status is kept (pipefail).
pip_quiet() { { .venv/bin/python -m pip "$@" 2>&1 1>&3 3>&- | awk -f scripts/pip-quiet.awk >&2; } 3>&1; }

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
   || ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip' 2>/dev/null; then
  apt_install python3 python3-venv
  PY=/usr/bin/python3
fi

# setup.py's optional extension, the compiled weights check (watchdog/weights/_finitec.c,
# docs/performance.md), needs a C compiler and the interpreter's headers; pip installs the
# package without it where they are missing, so the setup brings them (python3-dev: the
# headers of Debian's python3; another interpreter carries its own).
py_include=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if ! command -v gcc >/dev/null 2>&1 || [ ! -f "$py_include/Python.h" ]; then
  apt_install gcc libc6-dev python3-dev
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ "$want_test" = 1 ]; then
  bash scripts/setup-packages.sh --test
  pip_quiet install -q -e '.[test]'
  # llama.cpp's C GGUF reader for the ship gate's differential tests, from the sources the
  # llama-cpp-python sdist vendors (tests/weights/ggml/build.py compiles it per test run).
  sdist_dir=.venv/share/rogue-watchdog-tests
  if [ ! -f "$sdist_dir/llama_cpp_python-0.3.36.tar.gz" ]; then
    mkdir -p "$sdist_dir"
    pip_quiet download -q --no-deps --no-binary :all: 'llama-cpp-python==0.3.36' -d "$sdist_dir"
  fi
else
  pip_quiet install -q .
fi
