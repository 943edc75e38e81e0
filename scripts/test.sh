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
# The unit and weights tests first, then the system tests, each part side by side in
# pytest-xdist workers. The system tests mostly wait (for cron's minute, a timer, a grace
# period), so three workers share two CPUs well: 31 min one after another, 13 min in three
# (2026-12-06). Files that share something host-wide run in one worker, one after another
# (tests/conftest.py groups them); one cron and one atd serve every worker
# (tests/system/hostdaemon.py). The slowest tests are listed after each part: where the
# time goes. Both parts run whatever the first gives: a failure shows with the whole picture.
status=0
"${PYTEST[@]}" -n 2 --durations=15 --ignore=tests/system tests || status=$?
"${PYTEST[@]}" -n 3 --dist loadgroup --durations=25 tests/system || status=$?
exit "$status"
