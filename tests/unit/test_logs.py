"""rogue_watchdog.logs: structlog is imported, and a deferred configuration applied, on the
first event, once; a command that logs nothing imports neither."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import structlog

from rogue_watchdog import logs
from tests.conftest import REPO


def test_the_deferred_configuration_is_applied_before_the_first_event_once() -> None:
    out = io.StringIO()
    calls: list[int] = []

    def configure() -> None:
        calls.append(1)
        structlog.configure(
            processors=[structlog.processors.JSONRenderer()],
            logger_factory=structlog.PrintLoggerFactory(out),
        )

    log = logs.get_logger()
    try:
        logs.defer_configure(configure)
        assert calls == []
        log.info("first", n=1)
        log.info("second", n=2)
    finally:
        logs.defer_configure(None)
        structlog.reset_defaults()
    assert calls == [1]
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"n": 1, "event": "first"},
        {"n": 2, "event": "second"},
    ]


def test_a_dropped_configuration_is_never_applied() -> None:
    calls: list[int] = []
    logs.defer_configure(lambda: calls.append(1))
    logs.defer_configure(None)
    logs.configure_pending()
    assert calls == []


def test_a_scan_that_logs_nothing_imports_no_structlog(tmp_path: object) -> None:
    code = (
        "import sys\n"
        "from rogue_watchdog.cli import main\n"
        "rc = main(['scan', '--config', sys.argv[1]])\n"
        "print(rc, 'structlog' in sys.modules, file=sys.stderr)\n"
    )
    cfg = f"{tmp_path}/cfg.yaml"
    with open(cfg, "w") as fh:
        fh.write("nvml: {enabled: false}\n")
    done = subprocess.run(
        [sys.executable, "-c", code, cfg],
        capture_output=True, text=True, env={"PYTHONPATH": str(REPO)}, timeout=120, check=False,
    )  # fmt: skip
    assert done.stderr.splitlines()[-1].split()[1] == "False", done.stderr
