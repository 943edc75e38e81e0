"""Start-up: building the parser, ``--help`` and ``status`` load no command's modules.

Behaviour, not timing (bench/cli_startup_bench.py measures the wall time): a fresh
interpreter runs the entry point and reports which modules it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# What only a command that scans, verifies, acts or runs the daemon needs.
HEAVY = (
    "numpy",
    "httpx",
    "structlog",
    "yaml",
    "rogue_watchdog.weights.api",
    "rogue_watchdog.weights.safetensors",
    "rogue_watchdog.scan",
    "rogue_watchdog.config",
    "rogue_watchdog.daemon.loop",
    "rogue_watchdog.state",
    "rogue_watchdog.actions.remedy",
    "rogue_watchdog.lineage.cron",
)

PROBE = """
import json, sys
from rogue_watchdog.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded(*argv: str, tmp_path: Path) -> tuple[object, list[str]]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"]


def test_importing_the_cli_loads_no_command_modules(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, rogue_watchdog.cli; rogue_watchdog.cli.build_parser(); "
            "print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    modules = json.loads(done.stdout)
    assert "rogue_watchdog.cli" in modules
    assert [m for m in HEAVY if m in modules] == []


def test_help_loads_no_command_modules(tmp_path: Path) -> None:
    code, modules = loaded("--help", tmp_path=tmp_path)
    assert code == 0
    assert [m for m in HEAVY if m in modules] == []


def test_status_against_no_daemon_loads_no_command_modules(tmp_path: Path) -> None:
    code, modules = loaded("status", "--socket", str(tmp_path / "none.sock"), tmp_path=tmp_path)
    assert code == 3
    assert [m for m in HEAVY if m in modules] == []


def test_status_with_a_daemon_up_loads_no_configuration_or_dataclasses(tmp_path: Path) -> None:
    # issue 34: `status --socket` with the daemon answering needs the socket client and
    # the renderer; comparing the answering daemon's configuration is for --config (the
    # configuration code was 60-75 ms of a 0.14 s status), and neither it nor --help
    # needs the dataclasses module (inspect, ast, dis: 8 ms).
    from rogue_watchdog.daemon.ipc import StatusServer

    server = StatusServer(str(tmp_path / "s.sock"), lambda: {"schema_version": 1, "findings": []})
    server.start()
    try:
        code, modules = loaded("status", "--socket", str(tmp_path / "s.sock"), tmp_path=tmp_path)
    finally:
        server.stop()
    assert code == 0
    assert [m for m in (*HEAVY, "dataclasses") if m in modules] == []
    code, modules = loaded("--help", tmp_path=tmp_path)
    assert "dataclasses" not in modules


def test_subcommand_help_loads_no_command_modules(tmp_path: Path) -> None:
    for command in ("scan", "gate", "terminate", "run", "status", "verify-weights"):
        code, modules = loaded(command, "--help", tmp_path=tmp_path)
        assert code == 0, command
        assert [m for m in HEAVY if m in modules] == [], command


def test_status_as_typed_loads_no_config_parser(tmp_path: Path) -> None:
    # Without a configuration file the default socket is known without PyYAML.
    if os.path.exists("/etc/rogue-watchdog/config.yaml") or os.path.exists(
        "/run/rogue-watchdog/status.sock"
    ):
        pytest.skip("this host has a rogue-watchdog configuration or daemon")
    code, modules = loaded("status", tmp_path=tmp_path)
    assert code == 3
    assert [m for m in HEAVY if m in modules] == []


def test_scan_loads_only_what_a_scan_needs(tmp_path: Path) -> None:
    # issue 34, item 2: without the daemon's database nothing of the state package is
    # imported, and a one-shot has no kernel events, daemon, actions or weights to load.
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path / 'state'}'}}\n")
    code, modules = loaded("scan", "--json", "--config", str(cfg), tmp_path=tmp_path)
    assert code in (0, 1)
    unneeded = ("rogue_watchdog.state", "rogue_watchdog.sources.procevents", "numpy", "httpx")
    assert [m for m in modules if m.startswith(unneeded)] == []
    assert [
        m for m in modules if m.startswith(("rogue_watchdog.daemon", "rogue_watchdog.actions"))
    ] == []
    assert "rogue_watchdog.scan" in modules


def test_scan_beside_the_daemons_database_loads_one_query(tmp_path: Path) -> None:
    # issue 34, item 2: where the daemon runs (its state.db exists) a one-shot reads the
    # sanctioned processes through state.query and SQLite alone: not the tables, records or
    # the store, nor hashlib (the config checksum is status's).
    from rogue_watchdog.sources.procfs import boot_id
    from rogue_watchdog.state import StateDB

    state = tmp_path / "state"
    db = StateDB(state)
    db.set_sanctioned_procs({(4242, 1000): "pipeline"}, boot_id("/proc"), 0.0)
    db.close()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{state}'}}\n")
    code, modules = loaded("scan", "--json", "--config", str(cfg), tmp_path=tmp_path)
    assert code in (0, 1)
    assert sorted(m for m in modules if m.startswith("rogue_watchdog.state")) == [
        "rogue_watchdog.state",
        "rogue_watchdog.state.query",
    ]
    assert "sqlite3" in modules
    assert [m for m in modules if m in ("rogue_watchdog.records", "hashlib")] == []


def test_the_scans_modules_import_socket_and_configparser_late() -> None:
    # What the one-shot imports loads neither: socket only decodes a listening job's
    # addresses, configparser only reads a supervisord program's file (which of those the
    # host has decides whether a scan gets there, so this imports without scanning).
    env = dict(os.environ, PYTHONPATH=str(REPO))
    probe = (
        "import json, sys, rogue_watchdog.cli.scan, rogue_watchdog.scan, rogue_watchdog.config, "
        "rogue_watchdog.render, rogue_watchdog.queue.source, rogue_watchdog.sources.nvml; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60,
        check=True,
    )  # fmt: skip
    modules = json.loads(done.stdout)
    assert "rogue_watchdog.sources.sockets" in modules
    assert "rogue_watchdog.lineage.supervisorconf" in modules
    assert [m for m in modules if m in ("socket", "configparser", "hashlib")] == []


def test_the_state_packages_names_resolve_on_first_use() -> None:
    # PEP 562: each public name is its defining module's object; anything else is an
    # AttributeError, and dir() lists the names not imported yet.
    import importlib

    import rogue_watchdog.state as state

    for name in state.__all__:
        module = importlib.import_module(state._WHERE[name], "rogue_watchdog.state")
        assert getattr(state, name) is getattr(module, name)
    assert state.StateDB.__module__ == "rogue_watchdog.state.db"
    assert set(state.__all__) <= set(dir(state))
    with pytest.raises(AttributeError):
        _ = state.NoSuchName  # type: ignore[attr-defined]
