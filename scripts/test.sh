#!/usr/bin/env bash
# Sets up everything and runs the whole test suite: lint, format, types, unit and system
# tests. System tests need root; under CI (or ROGUE_WATCHDOG_REQUIRE_SYSTEM=1) a system
# test that would skip fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export ROGUE_WATCHDOG_REQUIRE_SYSTEM=${ROGUE_WATCHDOG_REQUIRE_SYSTEM:-$([ "$(id -u)" = 0 ] && echo 1 || echo 0)}
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Layers point one way (.importlinter): sources → lineage → policy → scan → actions/daemon → cli.
.venv/bin/lint-imports --no-cache
.venv/bin/python -m rogue_watchdog --help >/dev/null
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider)
if [ "$#" -gt 0 ]; then
  exec "${PYTEST[@]}" "$@"
fi
# The unit and weights tests first, in two pytest-xdist workers. Then the system tests:
# those whose daemon acts on whatever it sees on the host (marked host_actor) would act
# on the others' jobs, so the others run first, side by side in three workers (they
# mostly wait: cron's minute, a timer, a grace period), grouped where they share
# something host-wide (tests/conftest.py); then the actors, one after another. The
# slowest tests are listed after each part: where the time goes. Every part runs whatever
# the one before gives: a failure shows with the whole picture.
status=0
"${PYTEST[@]}" -n 2 --durations=15 --ignore=tests/system tests || status=$?
"${PYTEST[@]}" -n 3 --dist loadgroup --durations=20 -m "not host_actor" tests/system || status=$?
"${PYTEST[@]}" --durations=15 -m host_actor tests/system || status=$?
exit "$status"
