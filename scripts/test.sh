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
# The unit and weights tests first, then the system tests, one after another: run side
# by side in two pytest-xdist workers (`-n 2 --dist loadgroup`, grouped by
# tests/conftest.py) cron and atd jobs were not started in time (2026-12-06), so CI does
# not yet. The slowest tests are listed after each part: where the time goes. Both parts
# run whatever the first gives: a failure shows with the whole picture.
status=0
"${PYTEST[@]}" --durations=15 --ignore=tests/system tests || status=$?
"${PYTEST[@]}" --durations=25 tests/system || status=$?
exit "$status"
