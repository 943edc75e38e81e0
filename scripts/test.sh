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
.venv/bin/python -m watchdog --help >/dev/null
# The slowest tests are listed at the end: where the suite's time goes (CI budget).
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
