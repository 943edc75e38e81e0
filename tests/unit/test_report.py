"""``rogue-watchdog report``: usage per origin and user, the timeline, what is open."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from watchdog.cli import main
from watchdog.model import CronOrigin, ShellOrigin
from watchdog.report import report_html, report_json, report_text
from watchdog.state import RunRecord, StateDB, read_history


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def week(tmp_path: Path, now: float) -> Path:
    state = tmp_path / "state"
    db = StateDB(state)
    pipe = CronOrigin(file="/etc/cron.d/pipeline", line=2, schedule="0 2 * * *").to_json()
    ghost = CronOrigin(file="/etc/cron.d/old", line=1, schedule="*/12 * * * *").to_json()
    shell = ShellOrigin(session="1", user="eve").to_json()
    runs = [
        (RunRecord("a", 10, 1, "mlops", ["python", "train.py"], pipe, "sanctioned", "p",
                   0, 0, gpus=["GPU-0"]), now - 3000, now - 1200),  # 1800 s on 1 GPU
        (RunRecord("b", 20, 2, "root", ["python", "train.py"], ghost, "rogue", None,
                   0, 0, gpus=["GPU-0", "GPU-1"], max_gpu_bytes=8 << 30),
         now - 2400, now - 600),  # 1800 s on 2
        (RunRecord("c", 30, 3, "eve", ["python", "x.py\n\x1b[2J"], shell, "rogue", None,
                   0, 0), now - 500, now - 400),
    ]  # fmt: skip
    for rec, start, end in runs:
        db.record_run(rec, start)
        db.record_run(rec, end)
    f1 = db.insert_finding("rogue-job:b", "rogue-job", "high", "rogue PID 20", 20, {}, now - 2400)
    db.resolve_finding(f1, now - 1500)
    f2 = db.insert_finding(
        "respawned:b", "respawned", "high", "respawned (+12m) as PID 21", 21, {}, now - 780
    )
    a1 = db.record_action("cli", "terminate", "PID 20", "ok", {}, now - 1500, finding_id=f1)
    db.mark_undone(a1, now - 900)
    db.close()
    assert f2 == 2
    return state


def test_report_json_exact(tmp_path: Path) -> None:
    now = time.time()
    state = week(tmp_path, now)
    history = read_history(str(state), now - 3600)
    assert history is not None
    runs, findings, actions = history
    doc = report_json(runs, findings, actions, now - 3600, now)
    assert doc["by_origin"] == [
        {"name": "cron /etc/cron.d/old:1 (*/12 * * * *)", "runs": 1, "gpu_hours": 1.0},
        {"name": "cron /etc/cron.d/pipeline:2 (0 2 * * *)", "runs": 1, "gpu_hours": 0.5},
        {"name": "shell 1", "runs": 1, "gpu_hours": 0.0},
    ]
    assert doc["by_user"] == [
        {"name": "root", "runs": 1, "gpu_hours": 1.0},
        {"name": "mlops", "runs": 1, "gpu_hours": 0.5},
        {"name": "eve", "runs": 1, "gpu_hours": 0.0},
    ]
    # Runs recorded without a class (before classes were) are counted under "-".
    assert doc["by_class"] == [{"name": "-", "runs": 3, "gpu_hours": 1.5}]
    assert [(e["what"], e["kind"], e["text"]) for e in doc["timeline"]] == [
        ("opened", "rogue-job", "F1 rogue PID 20"),
        ("resolved", "rogue-job", "F1 resolved"),
        ("action", "terminate", "A1 terminate PID 20: ok by cli"),
        ("undone", "terminate", "A1 undone: terminate PID 20"),
        ("opened", "respawned", "F2 respawned (+12m) as PID 21"),
    ]
    assert [(f["id"], f["kind"]) for f in doc["open"]] == [(2, "respawned")]


def test_a_run_keeps_the_most_gpu_memory_it_held(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state")
    origin = CronOrigin(file="/etc/cron.d/p", line=1).to_json()
    for t, held in ((10.0, 4 << 30), (20.0, 8 << 30), (30.0, None), (40.0, 2 << 30)):
        rec = RunRecord("s", 7, 1, "u", ["python", "t.py"], origin, "rogue", None, 0, 0,
                        gpus=["GPU-0"], max_gpu_bytes=held)  # fmt: skip
        db.record_run(rec, t)
    [run] = db.runs()
    assert (run.max_gpu_bytes, run.gpu_s, run.started_at, run.last_seen) == (
        8 << 30, 30.0, 10.0, 40.0,
    )  # fmt: skip


def test_report_text_fits_80_columns_and_html_is_self_contained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    state = week(tmp_path, now)
    assert main(["report", "--state-dir", str(state), "--since", "1h"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[3] == "  " + " " * 58 + "   runs   GPU-hours"
    assert lines[4] == "  cron /etc/cron.d/old:1 (*/12 * * * *)" + " " * 21 + "      1        1.00"
    assert lines[-7:] == [
        f"  {_when(now - 1500)} action   -        terminate: A1 terminate PID 20: ok by",
        "    cli",
        f"  {_when(now - 900)} undone   -        terminate: A1 undone: terminate PID 20",
        f"  {_when(now - 780)} opened   high     respawned: F2 respawned (+12m) as PID 21",
        "",
        "still open",
        "  F2 respawned (high): respawned (+12m) as PID 21",
    ]
    html_doc = report_html(*_doc(state, now))
    assert len(re.findall(r'<rect class="run ', html_doc)) == 3  # GPU-0: a, b; GPU-1: b
    assert len(re.findall(r'<line class="incident"', html_doc)) == 3
    assert re.search(r"(src|href)=", html_doc) is None  # nothing loaded from anywhere
    assert "<script" not in html_doc
    assert html_doc.count("<title>PID 20 rogue, up to 8.0 GiB: python train.py</title>") == 2
    assert "\x1b" not in html_doc and "\x1b" not in text


def _doc(state: Path, now: float) -> tuple[dict, list[RunRecord]]:  # type: ignore[type-arg]
    history = read_history(str(state), now - 3600)
    assert history is not None
    runs, findings, actions = history
    return report_json(runs, findings, actions, now - 3600, now), runs


def test_report_json_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    state = week(tmp_path, now)
    assert main(["report", "--state-dir", str(state), "--since", "1h", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["what"] for e in doc["timeline"]] == [
        "opened", "resolved", "action", "undone", "opened",
    ]  # fmt: skip
    assert report_text(doc).splitlines()[0].startswith("rogue-watchdog report: ")
