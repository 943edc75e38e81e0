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
# three lanes at once, each lane's files one after another, then the files whose daemon
# acts on whatever it sees on the host, one after another (tests/system/lanes.py says
# which and why). The slowest tests are listed after each part: where the time goes.
# Every part runs whatever the one before gives: a failure shows with the whole picture.
status=0
"${PYTEST[@]}" -n 2 --durations=15 --ignore=tests/system tests || status=$?
logs=$(mktemp -d)
pids=()
for lane in cron box build; do
  mapfile -t files < <(.venv/bin/python -m tests.system.lanes "$lane")
  "${PYTEST[@]}" --durations=10 "${files[@]}" >"$logs/$lane.log" 2>&1 &
  pids+=("$!")
done
for i in 0 1 2; do
  wait "${pids[$i]}" || status=1
done
for lane in cron box build; do
  echo "== system tests, lane $lane"
  cat "$logs/$lane.log"
done
rm -rf "$logs"
mapfile -t files < <(.venv/bin/python -m tests.system.lanes actors)
echo "== system tests, actors"
"${PYTEST[@]}" --durations=15 "${files[@]}" || status=$?
exit "$status"
