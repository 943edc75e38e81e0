"""One log line per finding event, at the level of the finding's severity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Spawned
from tests.unit.test_alert_delivery import Job, make, worker


def _events(text: str) -> list[str]:
    """Event names of the finding lines in captured stdout (JSON or console form)."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            out.append(f"{event['event']}:{event.get('action')}:{event['level']}")
        elif "finding-opened" in line or "finding-resolved" in line:
            out.append(line.split("]", 1)[1].split()[0])
    return [e for e in out if e.startswith("finding")]


def test_a_stdout_log_sink_is_the_one_line_per_event(
    spawned: Spawned, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(spawned, tmp_path)
    job.start()
    d = make(tmp_path, job.token, "    - {type: log, name: log}\n")
    w = worker(d, {})
    try:
        d.tick(1_000_000.0)
        w.deliver_due(1_000_000.0)
        job.kill()
        d.tick(1_000_005.0)
        w.deliver_due(1_000_005.0)
    finally:
        w.stop()
    # Not also `finding-opened` / `finding-resolved` from the loop: once each.
    assert _events(capsys.readouterr().out) == ["finding:open:warning", "finding:resolve:info"]


def test_without_a_sink_that_takes_it_the_loop_logs_the_event(
    spawned: Spawned, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(spawned, tmp_path)
    job.start()
    d = make(tmp_path, job.token, "    - {type: log, name: log, min_severity: critical}\n")
    w = worker(d, {})
    try:
        d.tick(1_000_000.0)
        w.deliver_due(1_000_000.0)
        job.kill()
        d.tick(1_000_005.0)
        w.deliver_due(1_000_005.0)
    finally:
        w.stop()
    out = capsys.readouterr().out
    assert _events(out) == ["finding-opened", "finding-resolved"]
    # A high finding is the daemon doing its job: a warning; `error` is for its own
    # failures (before: error; fresh user, first day).
    assert "[warning  ] finding-opened" in out


@pytest.mark.parametrize(
    ("severity", "level"),
    [("info", "info"), ("warning", "warning"), ("high", "warning"), ("critical", "error")],
)
def test_log_sink_level_follows_the_severity(tmp_path: Path, severity: str, level: str) -> None:
    from rogue_watchdog.config.alerts import SinkSettings
    from rogue_watchdog.daemon.alerts.sinks import LogSink
    from tests.unit.test_alert_render import delivery, payload

    path = tmp_path / "alerts.log"
    sink = LogSink(SinkSettings(type="log", name="log", path=str(path)))
    sink.send(delivery(payload("open", severity=severity)))
    sink.send(delivery(payload("resolve", severity=severity), row=4))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["action"], x["level"]) for x in lines] == [("open", level), ("resolve", "info")]
