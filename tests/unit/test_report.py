"""``rogue-watchdog report``: usage per origin and user, the timeline, what is open."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from rogue_watchdog.cli import main
from rogue_watchdog.model import CronOrigin, Origin, ShellOrigin
from rogue_watchdog.report import report_html, report_json, report_text
from rogue_watchdog.state import RunRecord, StateDB, read_history


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
    rogue, sanctioned = {"rogue": 1}, {"sanctioned": 1}
    assert doc["by_origin"] == [
        {"name": "cron /etc/cron.d/old:1 (*/12 * * * *)", "runs": 1, "gpu_hours": 1.0,
         "verdicts": rogue},
        {"name": "cron /etc/cron.d/pipeline:2 (0 2 * * *)", "runs": 1, "gpu_hours": 0.5,
         "verdicts": sanctioned},
        # A shell names no source: the row is the job, its command says which.
        {"name": "shell 1 · python x.py⏎\\x1b[2J", "runs": 1, "gpu_hours": 0.0,
         "verdicts": rogue},
    ]  # fmt: skip
    assert doc["by_user"] == [
        {"name": "root", "runs": 1, "gpu_hours": 1.0, "verdicts": rogue},
        {"name": "mlops", "runs": 1, "gpu_hours": 0.5, "verdicts": sanctioned},
        {"name": "eve", "runs": 1, "gpu_hours": 0.0, "verdicts": rogue},
    ]
    # Runs recorded without a class (before classes were) are counted under "-".
    assert doc["by_class"] == [
        {"name": "-", "runs": 3, "gpu_hours": 1.5, "verdicts": {"rogue": 2, "sanctioned": 1}}
    ]
    both = ["GPU-0", "GPU-1"]  # F1's job (PID 20) held both; F2's run is not recorded
    assert [(e["what"], e["kind"], e["text"], e["gpus"]) for e in doc["timeline"]] == [
        ("opened", "rogue-job", "F1 rogue PID 20", both),
        ("resolved", "rogue-job", "F1 resolved", both),
        ("action", "terminate", "A1 terminate PID 20: ok by cli", both),
        ("undone", "terminate", "A1 undone: terminate PID 20", both),
        ("opened", "respawned", "F2 respawned (+12m) as PID 21", []),
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
    # The verdict column, as the HTML page's (issue 33, fresh user D: the text had none).
    assert lines[3] == "  " + " " * 49 + "verdict      runs   GPU-hours"
    assert lines[4:7] == [
        "  cron /etc/cron.d/old:1 (*/12 * * * *)            rogue           1        1.00",
        "  cron /etc/cron.d/pipeline:2 (0 2 * * *)          sanctioned      1        0.50",
        "  shell 1 · python x.py⏎\\x1b[2J                    rogue           1        0.00",
    ]
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
    # GPU-0: a, b; GPU-1: b; the host row: c (it held no GPU).
    assert len(re.findall(r'<g class="run" data-gpu="GPU-0"', html_doc)) == 2
    assert len(re.findall(r'<g class="run" data-gpu="GPU-1"', html_doc)) == 1
    assert len(re.findall(r'<g class="run" data-gpu=""', html_doc)) == 1
    # F1 and A1 on the rows of the GPUs PID 20 held; F2 (no GPU known) on the host row.
    assert re.findall(r'<g class="incident (\w+)" data-gpu="([^"]*)"', html_doc) == [
        ("opened", "GPU-0"), ("opened", "GPU-1"), ("action", "GPU-0"), ("action", "GPU-1"),
        ("opened", ""),
    ]  # fmt: skip
    assert re.search(r"(src|href)=", html_doc) is None  # nothing loaded from anywhere
    assert "<script" not in html_doc
    assert (
        html_doc.count(
            "PID 20 rogue, up to 8.0 GiB, user root, cron /etc/cron.d/old:1 (*/12 * * * *): "
            "python train.py (rogue "
        )
        == 2
    )
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


H = 3600.0


def busy_week(tmp_path: Path, now: float) -> Path:
    """Two days on two GPUs, the handed cases of issue 33 (item 3): overlapping runs on
    one GPU; a notebook paged as rogue for 8 minutes, then sanctioned by a rule; a cron
    line whose description changed between runs (disabled since); an inference server
    and a rogue trainer of one user, neither with a named origin; incidents on one GPU
    and one on none."""
    from rogue_watchdog.model import OrphanOrigin

    state = tmp_path / "state"
    db = StateDB(state)
    db.set_meta(
        "gpus",
        json.dumps({
            "GPU-a": {"index": 0, "name": "NVIDIA H200", "mig_index": None},
            "GPU-b": {"index": 1, "name": "NVIDIA H100 80GB HBM3", "mig_index": None},
        }),
    )  # fmt: skip
    pipe = CronOrigin(file="/etc/cron.d/pipeline", line=2, schedule="0 2 * * *").to_json()
    ghost = CronOrigin(file="/etc/cron.d/old", line=1, schedule="*/12 * * * *").to_json()
    ghost_off = CronOrigin(
        file="/etc/cron.d/old", line=1, schedule="*/12 * * * *", entry_state="disabled"
    ).to_json()
    lab = ShellOrigin(session="7", user="alice", tmux_session="lab").to_json()
    orphan = OrphanOrigin(message="orphan (parent exited)").to_json()
    runs = [
        ("pipe", 10, "mlops", ["python", "/opt/pipeline/train.py"], pipe, "sanctioned", ["GPU-a"],
         now - 30 * H, now - 26 * H),
        ("ghost", 20, "root", ["python", "/srv/old/train.py"], ghost, "rogue", ["GPU-a"],
         now - 27 * H, now - 20 * H),
        ("pipe", 11, "mlops", ["python", "/opt/pipeline/train.py"], pipe, "sanctioned", ["GPU-a"],
         now - 6 * H, now - 2 * H),
        ("ghost", 21, "root", ["python", "/srv/old/train.py"], ghost_off, "rogue", ["GPU-a"],
         now - 5 * H, now - 3 * H),
        ("nb", 30, "alice", ["python", "-m", "ipykernel_launcher"], lab, "sanctioned", ["GPU-b"],
         now - 10 * H, now - 8 * H),
        ("vllm", 40, "bob", ["python", "-m", "vllm.entrypoints.openai.api_server"], orphan,
         "sanctioned", ["GPU-b"], now - 28 * H, now - 1 * H),
        ("bobx", 41, "bob", ["python", "/home/bob/train_x.py"], orphan, "rogue", ["GPU-b"],
         now - 7 * H, now - 6.5 * H),
        ("wait", 50, "svc-old", ["python", "/srv/q/train.py"], orphan, "rogue", [],
         now - 12 * H, now - 11 * H),
    ]  # fmt: skip
    for sig, pid, user, cmd, origin, verdict, gpus, start, end in runs:
        rec = RunRecord(sig, pid, pid * 100, user, cmd, origin, verdict, None, 0, 0, gpus=gpus)
        db.record_run(rec, start)
        db.record_run(rec, end)
    held_a = [{"uuid": "GPU-a", "index": 0, "memory_bytes": 8 << 30}]
    f_ghost = db.insert_finding(
        "rogue-job:ghost", "rogue-job", "high", "rogue training job PID 20", 20,
        {"root": [20, 2000], "gpus": held_a}, now - 27 * H + 5,
    )  # fmt: skip
    db.resolve_finding(f_ghost, now - 20 * H)
    f_nb = db.insert_finding(
        "rogue-job:nb", "rogue-job", "high", "rogue training job PID 30", 30,
        {"root": [30, 3000]}, now - 10 * H + 5,
    )  # fmt: skip
    db.resolve_finding(f_nb, now - 10 * H + 485)  # sanctioned by a new rule 8 min later
    db.insert_finding(
        "queue:17", "queue-unsanctioned", "high", "waiting GPU-queue entry 17", None, {},
        now - 4 * H,
    )  # fmt: skip
    db.record_action("cli", "terminate", "PID 20", "ok", {}, now - 20 * H - 60, finding_id=f_ghost)
    db.close()
    return state


def busy_html(tmp_path: Path, now: float) -> str:
    state = busy_week(tmp_path, now)
    page = tmp_path / "week.html"
    args = ["report", "--state-dir", str(state), "--since", "7d", "--format", "html"]
    assert main([*args, "--output", str(page)]) == 0
    return page.read_text()


def parse_timeline(page: str) -> dict[str, Any]:
    """The timeline's parts, read from the page (the same from Chromium's DOM)."""
    attrs = r"(?P<a>[^>]*)"

    def each(tag: str, cls: str) -> list[dict[str, str]]:
        found = re.finditer(rf'<{tag} class="{cls}"{attrs}>', page)
        return [dict(re.findall(r'([\w-]+)="([^"]*)"', m.group("a"))) for m in found]

    rows = [
        {**dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1))), "label": m.group(2)}
        for m in re.finditer(
            r'<g class="gpu-row"([^>]*)><rect[^>]*/?>(?:</rect>)?<text[^>]*>([^<]*)</text>', page
        )
    ]
    return {
        "rows": rows,
        "runs": each("g", "run"),
        "incidents": [
            {"what": m.group(1), **dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(2)))}
            for m in re.finditer(r'<g class="incident (\w+)"([^>]*)>', page)
        ],
        "ticks": re.findall(r'<text class="tick-label"[^>]*>([^<]*)</text>', page),
        "dates": re.findall(r'<text class="date"[^>]*>([^<]*)</text>', page),
        "labels": re.findall(r'<text class="bar-label"[^>]*>([^<]*)</text>', page),
        # A bar too narrow for its label carries a tag the key under the timeline spells out.
        "key": dict(re.findall(r'<li><b class="tag">([^<]*)</b> ([^<]*)</li>', page)),
        "legend": re.findall(r'<g id="legend">(.*?)</g>', page),
    }


def check_timeline(t: dict[str, Any]) -> None:
    """What issue 33 asked of the timeline, on the parsed page."""
    assert [(r["data-gpu"], r["label"], r["data-lanes"]) for r in t["rows"]] == [
        ("GPU-a", "GPU 0  NVIDIA H200", "2"),  # the ghost overlaps the pipeline: 2 lanes
        ("GPU-b", "GPU 1  NVIDIA H100 80GB HBM3", "2"),
        ("", "host", "1"),
    ]
    for gpu in ("GPU-a", "GPU-b", ""):
        mine = [r for r in t["runs"] if r["data-gpu"] == gpu]
        for a in mine:
            for b in mine:
                if a is not b and a["data-lane"] == b["data-lane"]:
                    overlap = float(a["data-x0"]) < float(b["data-x1"]) and float(
                        b["data-x0"]
                    ) < float(a["data-x1"])
                    assert not overlap, (a, b)
    by_user = {r["data-user"]: r for r in t["runs"] if r["data-user"] == "alice"}
    assert by_user["alice"]["data-verdicts"] == "rogue sanctioned"  # over time, not final
    named = [t["key"].get(x.split(" ×")[0], x) for x in t["labels"]]  # a tag: its label
    assert any(x.startswith("alice · shell") for x in named)  # user · origin
    assert any(x.startswith("root · cron /etc/cron.d/old:1") for x in named)
    # Incidents on their GPU's row only; the queue entry (no GPU) on the host row.
    assert sorted((i["what"], i["data-gpu"]) for i in t["incidents"]) == [
        ("action", "GPU-a"), ("opened", ""), ("opened", "GPU-a"), ("opened", "GPU-b"),
    ]  # fmt: skip
    assert len(t["ticks"]) >= 6 and all(re.fullmatch(r"\d\d:\d\d", x) for x in t["ticks"])
    assert len(t["dates"]) >= 2  # two days: a date at each day's first tick
    legend = " ".join(t["legend"])
    for word in ("sanctioned", "rogue", "excess", "finding opened", "action taken"):
        assert f">{word}<" in legend, word


def test_the_timeline_of_a_busy_week(tmp_path: Path) -> None:
    # Before: bars squeezed into the right 15% (the axis was the 7-day window), rows a
    # cut UUID, no axis, legend or users, every incident across every row, overlapping
    # runs in one lane, the colour the final verdict only.
    now = time.time()
    page = busy_html(tmp_path, now)
    t = parse_timeline(page)
    check_timeline(t)
    # The axis spans the data (30 h back), not the 7-day window: bars use the width.
    xs = [float(r["data-x0"]) for r in t["runs"]]
    assert min(xs) < 260  # LEFT is 210: the first run starts at the axis' start
    assert "the report&#x27;s window starts" in page


def test_the_per_origin_table_has_a_verdict_column_and_one_row_per_origin(
    tmp_path: Path,
) -> None:
    # Before: one cron line as two rows (its description changed: "entry since
    # disabled"), an inference server and a rogue trainer in one "orphan" row.
    now = time.time()
    page = busy_html(tmp_path, now)
    table = page.split('<table id="by-origin">')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>(\d+)</td>", table)
    ghost = [r for r in rows if r[0].startswith("cron /etc/cron.d/old:1")]
    assert [(v, n) for _name, v, n in ghost] == [("rogue", "2")]
    bob = [(name.split(" · ")[1], v) for name, v, _n in rows if name.startswith("orphan")]
    assert sorted(bob) == [
        ("python -m vllm.entrypoints.openai.api_server", "sanctioned"),
        ("python /home/bob/train_x.py", "rogue"),
        ("python /srv/q/train.py", "rogue"),
    ]
    assert "<th>verdict</th>" in table


def test_the_gpu_inventory_keeps_gpus_that_left() -> None:
    from rogue_watchdog.model import GpuInfo
    from rogue_watchdog.report import gpu_inventory

    a = GpuInfo(0, "GPU-a", "NVIDIA H200", 140 << 30, 0)
    b = GpuInfo(1, "GPU-b", "NVIDIA H200", 140 << 30, 0, mig_index=None)
    known = gpu_inventory({}, [a, b])
    assert known == {
        "GPU-a": {"index": 0, "name": "NVIDIA H200", "mig_index": None},
        "GPU-b": {"index": 1, "name": "NVIDIA H200", "mig_index": None},
    }
    assert gpu_inventory(known, [a]) is None  # nothing new: nothing written
    moved = gpu_inventory(known, [GpuInfo(2, "GPU-a", "NVIDIA H200", 140 << 30, 0)])
    assert moved is not None and moved["GPU-a"]["index"] == 2 and "GPU-b" in moved


def burst_week(tmp_path: Path, now: float) -> Path:
    """The fresh-user hour's history in small (2026-12-06): 55 copies of one orphaned
    `train_many.py` at once, each with a finding; 40 probes of unknown origin one after
    another, each from its own pytest directory; 12 users' notebooks at once on GPU 0."""
    from rogue_watchdog.model import Origin, OrphanOrigin

    state = tmp_path / "state"
    db = StateDB(state)
    db.set_meta("gpus", json.dumps({"GPU-a": {"index": 0, "name": "NVIDIA H200"}}))
    orphan = OrphanOrigin(message="orphan (parent exited)").to_json()
    many = ["/usr/bin/python3", "/tmp/rw-many-ttqz7s31/train_many.py"]
    for i in range(55):
        pid = 20000 + i
        rec = RunRecord("many", pid, pid, "root", many, orphan, "rogue", None, 0, 0, gpus=[])
        db.record_run(rec, now - 3600 + i)
        db.record_run(rec, now - 3000)
        db.insert_finding(
            f"rogue-job:many{i}", "rogue-job", "info", f"rogue training job PID {pid}", pid,
            {"root": [pid, pid]}, now - 3600 + i + 1,
        )  # fmt: skip
    unknown = Origin().to_json()
    for i in range(40):
        pid = 25000 + i
        cmd = [
            "/usr/bin/python3",
            "-S",
            f"/tmp/pytest-of-root/pytest-9{i:02d}/probe0/train_probe.py",
        ]
        rec = RunRecord(f"p{i}", pid, pid, "root", cmd, unknown, "rogue", None, 0, 0, gpus=[])
        db.record_run(rec, now - 1200 + 29 * i)
        db.record_run(rec, now - 1200 + 29 * i + 5)
    for i in range(12):
        pid = 30000 + i
        lab = ShellOrigin(session=str(i), user=f"u{i:02d}", tmux_session="lab").to_json()
        cmd = ["python", "-m", "ipykernel_launcher"]
        rec = RunRecord(f"n{i}", pid, pid, f"u{i:02d}", cmd, lab, "sanctioned", None, 0, 0,
                        gpus=["GPU-a"])  # fmt: skip
        db.record_run(rec, now - 7200 + 60 * i)
        db.record_run(rec, now - 600)
    db.close()
    return state


def test_a_burst_keeps_rows_short_and_names_each_command_whole(tmp_path: Path) -> None:
    """Fresh-user hour: one 55-process burst made a timeline row about 1,000 px tall and a
    wall of finding marks; about 40 per-origin rows read `unknown origin · python -S
    …/train_probe.py`. Before (4456053), on this history: host row 55 lanes (1,168 units
    tall), GPU 0 12 lanes (265), 55 marks on the host row, the 40 probe rows all reading
    `unknown origin · python3 -S …/train_probe.py`."""
    now = time.time()
    state = burst_week(tmp_path, now)
    page_path = tmp_path / "week.html"
    args = ["report", "--state-dir", str(state), "--since", "7d", "--format", "html"]
    assert main([*args, "--output", str(page_path)]) == 0
    page = page_path.read_text()
    t = parse_timeline(page)
    assert [(r["data-gpu"], r["data-lanes"]) for r in t["rows"]] == [("GPU-a", "8"), ("", "1")]
    heights = re.findall(r'<g class="gpu-row"[^>]*><rect [^>]*height="([\d.]+)"', page)
    # 8 lanes at most; the burst one bar, then the probes (their row 11 units more for
    # the band its incident marks sit in, above the lanes: issue 33, fresh user E)
    assert heights == ["181", "45"]
    host = [r for r in t["runs"] if r["data-gpu"] == "" and r["data-runs"] != "1"]
    assert [(r["data-runs"], r["data-user"], r["data-origin"]) for r in host] == [
        ("55", "root", "orphan (parent exited)")
    ]
    assert "root · orphan (parent exited) ×55" in t["labels"]
    # Its bar is 10 minutes of a 2-hour axis: the label beside it, dark, not cut by it.
    beside = re.search(
        r'<text class="bar-label" x="([\d.]+)"[^>]*fill="#212121">root · orphan', page
    )
    assert beside is not None and float(beside.group(1)) == float(host[0]["data-x1"]) + 3
    more = re.findall(r'<g class="more" data-gpu="GPU-a" data-runs="(\d+)">', page)
    assert more == ["5"] and ">+5 more run(s)</text>" in page
    # The 55 findings opened within a minute: one mark that counts them.
    assert [int(i["data-count"]) for i in t["incidents"] if i["data-gpu"] == ""] == [55]
    # The table and the rows folded under it (more than TABLE_ROWS).
    table = page.split('<table id="by-origin">')[1].split("</details>")[0]
    names = re.findall(r"<tr><td>(unknown origin[^<]*)</td>", table)
    assert len(names) == len(set(names)) == 40
    assert sorted(names)[0] == (
        "unknown origin · /usr/bin/python3 -S /tmp/pytest-of-root/pytest-900/probe0/train_probe.py"
    )


def test_the_text_report_wraps_long_origin_names(tmp_path: Path) -> None:
    from rogue_watchdog.report import report_text

    name = (
        "unknown origin · /usr/bin/python3 -S /tmp/pytest-of-root/pytest-900/probe0/train_probe.py"
    )
    doc = {"since": 0.0, "until": 60.0, "by_origin": [{"name": name, "runs": 1, "gpu_hours": 0.5}],
           "timeline": [], "open": []}  # fmt: skip
    lines = report_text(doc).splitlines()
    at = lines.index("per origin")
    assert lines[at + 2 : at + 4] == [
        "  unknown origin · /usr/bin/python3 -S                -            1        0.50",
        "    /tmp/pytest-of-root/pytest-900/probe0/train_probe.py",
    ]


def test_copies_from_one_tmux_session_are_one_bar(tmp_path: Path) -> None:
    """Issue 33, fresh user D: 30 fakes started at once from one tmux session, each
    `python3 …/fake/train_fake_N.py --epochs N`, drew 5 lanes and `+27 more run(s)` (before,
    0f0df4a: `data-runs` 1 on each bar, a `more` mark of 27); the orphan burst was one
    `×55` bar. After: one bar `×30`, like any burst of one origin's same command."""
    from rogue_watchdog.model import OrphanOrigin

    now = time.time()
    state = tmp_path / "state"
    db = StateDB(state)
    tmux = ShellOrigin(
        session="tmux session 'fd-fakes' ($2) on /tmp/tmux-0/default", user="root",
        tmux_session="fd-fakes", tmux_session_id="$2",
    ).to_json()  # fmt: skip
    py = "/root/.pyenv/versions/3.11.7/bin/python3"
    for i in range(1, 31):
        cmd = [py, f"/tmp/tmp.5padkcTgpa/fake/train_fake_{i}.py", "--epochs", str(i)]
        rec = RunRecord(f"f{i}", 24000 + i, 24000 + i, "root", cmd, tmux, "rogue", None, 0, 0,
                        gpus=[])  # fmt: skip
        db.record_run(rec, now - 600 + i / 10)
        db.record_run(rec, now - 60)
    # Two orphans of different commands at the same time stay two bars.
    orphan = OrphanOrigin(message="orphan (parent exited)").to_json()
    for i, cmd in enumerate((["vllm", "serve"], [py, "/srv/train.py"])):
        rec = RunRecord(f"o{i}", 26000 + i, 26000 + i, "root", cmd, orphan, "rogue", None, 0, 0,
                        gpus=[])  # fmt: skip
        db.record_run(rec, now - 500)
        db.record_run(rec, now - 100)
    db.close()
    page_path = tmp_path / "week.html"
    args = ["report", "--state-dir", str(state), "--since", "7d", "--format", "html"]
    assert main([*args, "--output", str(page_path)]) == 0
    page = page_path.read_text()
    t = parse_timeline(page)
    assert sorted(r["data-runs"] for r in t["runs"]) == ["1", "1", "30"]
    assert '<g class="more"' not in page
    assert any(x.endswith(" ×30") and "fd-fakes" in x for x in t["labels"]), t["labels"]


def test_the_text_report_never_breaks_a_word_and_says_when_a_line_was_disabled(
    tmp_path: Path,
) -> None:
    """Issue 33, fresh user D. Before (0f0df4a), at 80 columns: `A1 disable-source /tmp/t`
    / `mp.5padkcTgpa/...`, `(* * * *` / `*)`, `/tmp/pytest-of-root/p` / `ytest-938`; F15
    read `opened 13:00:01 ... entry since disabled` though A1 disabled it 9 s later."""
    from rogue_watchdog.report import report_text

    d = "/tmp/tmp.5padkcTgpa"
    t0 = time.mktime((2026, 12, 6, 13, 0, 1, 0, 0, -1))
    cron = CronOrigin(file=f"{d}/cron.d/legacy-retrain", line=1, schedule="* * * * *").to_json()
    state = tmp_path / "state"
    db = StateDB(state)
    cmd = ["/usr/bin/python3", f"{d}/ghost/train_legacy.py"]
    rec = RunRecord("g", 9314, 9314, "root", cmd, cron, "rogue", None, 0, 0, gpus=[])
    db.record_run(rec, t0)
    db.record_run(rec, t0 + 40)
    long_path = "/tmp/pytest-of-root/pytest-938/test_separate_background_jobs_0/train_a.py"
    probe = ["/work/wt4-oneshot/.venv/bin/python", long_path]
    rec = RunRecord("p", 9400, 9400, "root", probe, Origin().to_json(), "rogue", None, 0, 0,
                    gpus=[])  # fmt: skip
    db.record_run(rec, t0)
    db.record_run(rec, t0 + 5)
    message = (
        f"rogue training job PID 9314, user root, `/usr/bin/python3 {d}/ghost/train_legacy.py`, "
        f"from cron {d}/cron.d/legacy-retrain:1 (* * * * *), entry since disabled"
    )
    f15 = db.insert_finding("rogue-job:g", "rogue-job", "high", message, 9314, {}, t0)
    db.record_action("cli:root", "disable-source", f"{d}/cron.d/legacy-retrain", "ok", {},
                     t0 + 9, finding_id=f15)  # fmt: skip
    db.close()
    history = read_history(str(state), t0 - 60)
    assert history is not None
    doc = report_json(*history, t0 - 60, t0 + 60)
    text = report_text(doc)
    lines = text.splitlines()
    for word in (f"{d}/cron.d/legacy-retrain:1", long_path, "(* * * * *)"):
        assert any(word in x for x in lines), (word, text)
    assert f"{d}/cron.d/legacy-retrain: ok by cli:root" in text
    assert "entry since disabled" not in text
    assert "(* * * * *), entry disabled at 13:00:10 (A1)" in " ".join(x.strip() for x in lines)


def crowded_hour(tmp_path: Path, now: float) -> Path:
    """Fresh user E's hour in small (2026-12-06, issue 33): 30 copies of one tmux
    session's jobs at once and a run of unknown origin on the host row, a cron ghost on
    GPU 0 every minute, and findings opened minute after minute in bursts of 3, 5, 5, 3,
    4, 2, 8, 3 (on the host row and on GPU 0), an hour of data on the axis."""
    state = tmp_path / "state"
    db = StateDB(state)
    db.set_meta("gpus", json.dumps({"GPU-a": {"index": 0, "name": "NVIDIA H200"}}))
    tmux = ShellOrigin(session="9", user="root", tmux_session="fe-fakes").to_json()
    for i in range(30):
        pid = 23940 + i
        cmd = ["python3", f"/tmp/fe/fake_{i}.py"]
        rec = RunRecord(f"t{i}", pid, pid, "root", cmd, tmux, "rogue", None, 0, 0, gpus=[])
        db.record_run(rec, now - 900 + i)
        db.record_run(rec, now - 30)
    rec = RunRecord("u", 25782, 25782, "root", ["python3", "/tmp/pytest-of-root/train_x.py"],
                    Origin().to_json(), "rogue", None, 0, 0, gpus=[])  # fmt: skip
    db.record_run(rec, now - 3300)
    db.record_run(rec, now - 60)
    ghost = CronOrigin(
        file="/tmp/rw-try-e/cron.d/legacy-retrain", line=1, entry="* * * * * root ghost",
        user="root", schedule="* * * * *",
    ).to_json()  # fmt: skip
    gpu = {"gpus": [{"uuid": "GPU-a", "index": 0}]}
    for m in range(50):
        pid = 22000 + m
        rec = RunRecord(f"g{m}", pid, pid, "root", ["python3", "/opt/ghost/train_ghost.py"],
                        ghost, "rogue", None, 0, 0, gpus=["GPU-a"])  # fmt: skip
        db.record_run(rec, now - 3300 + 60 * m)
        db.record_run(rec, now - 3300 + 60 * m + 40)
    for k, n in enumerate((3, 5, 5, 3, 4, 2, 8, 3)):
        at = now - 600 + 60 * k
        for j in range(n):
            for row, details in (("host", {}), ("gpu", gpu)):
                db.insert_finding(
                    f"rogue-job:{row}{k}.{j}", "rogue-job", "high", f"rogue job {k}.{j}",
                    None, details, at + j,
                )  # fmt: skip
    db.close()
    return state


def crowded_hour_page(tmp_path: Path) -> Path:
    """:func:`crowded_hour` as the HTML page ``report --format html`` writes; its path."""
    state = crowded_hour(tmp_path, time.time())
    page_path = tmp_path / "hour.html"
    args = ["report", "--state-dir", str(state), "--since", "7d", "--format", "html"]
    assert main([*args, "--output", str(page_path)]) == 0
    return page_path


def timeline_boxes(page: str) -> dict[str, list[tuple[float, float, float, float]]]:
    """The timeline's label boxes, incident mark boxes and incident lines (as boxes of
    no width), read from the SVG: a label is as wide as :data:`LABEL_CHAR_W` a
    character (never cut); a mark is its triangle and its count."""
    from rogue_watchdog.report import LABEL_CHAR_W, MARK_CHAR_W

    num = r"(-?[\d.]+)"
    labels = []
    for m in re.finditer(r'<g class="run"[^>]*>.*?</g>', page):
        g = m.group(0)
        assert "clip" not in g  # a label is never cut
        t = re.search(rf'<text class="bar-label" x="{num}" y="{num}"([^>]*)>([^<]*)</text>', g)
        if t is None:
            continue  # too narrow even for its tag: the key names it
        x, y, text = float(t.group(1)), float(t.group(2)), html_unescape(t.group(4))
        w = LABEL_CHAR_W * len(text)
        x -= w / 2 if 'text-anchor="middle"' in t.group(3) else 0  # a tag, centred
        labels.append((x, x + w, y - 11, y + 3))
    for t in re.finditer(rf'<text class="more-label" x="{num}" y="{num}"[^>]*>([^<]*)<', page):
        x, y = float(t.group(1)), float(t.group(2))
        labels.append((x, x + LABEL_CHAR_W * len(t.group(3)), y - 11, y + 3))
    marks, lines = [], []
    for m in re.finditer(r"<g class=\"incident[^>]*data-x=\"([\d.]+)\"[^>]*>(.*?)</g>", page, re.S):
        x, body = float(m.group(1)), m.group(2)
        top = float(re.search(rf'<path d="M[\d.]+,{num}', body).group(1))  # type: ignore[union-attr]
        count = re.search(r'<text class="mark-count"[^>]*>([^<]*)<', body)
        right = x + 5 + MARK_CHAR_W * len(count.group(1)) if count else x + 4
        marks.append((x - 4, right, top, top + 9))
        for ln in re.finditer(rf'<line x1="{num}" x2="[\d.]+" y1="{num}" y2="{num}"', body):
            lx, y0, y1 = (float(v) for v in ln.groups())
            lines.append((lx, lx, y0, y1))
    return {"labels": labels, "marks": marks, "lines": lines}


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def overlaps(
    boxes: dict[str, list[tuple[float, float, float, float]]],
) -> dict[str, int]:
    """How many pairs cross: a line and a label, a line and another mark, two labels,
    two marks (boxes touching count: they read as one)."""

    def hit(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return a[0] <= b[1] and b[0] <= a[1] and a[2] < b[3] and b[2] < a[3]

    labels, marks, lines = boxes["labels"], boxes["marks"], boxes["lines"]
    pairs = lambda xs: [(a, b) for i, a in enumerate(xs) for b in xs[i + 1 :]]  # noqa: E731
    return {
        "line x label": sum(hit(ln, lb) for ln in lines for lb in labels),
        "line x other mark": sum(
            hit(ln, mk) for ln in lines for mk in marks if not (mk[0] <= ln[0] <= mk[0] + 8)
        ),
        "label x label": sum(hit(a, b) for a, b in pairs(labels)),
        "mark x mark": sum(hit(a, b) for a, b in pairs(marks)),
    }


def test_labels_and_marks_keep_out_of_each_others_way(tmp_path: Path) -> None:
    """Fresh user E (issue 33): dashed incident lines ran through the bar labels (`root ·
    shell tmux session 'fe-fakes' … ×30`, `root · unknown origin`) and the count marks of
    one minute (`×3 ×5 ×5 ×3 ×4 ×2 ×8 ×3`) touched each other. Before (f415060) on this
    history: 3 line/label crossings, 14 touching mark pairs. After: none; marks of one
    instant are merged with their count or stacked, lines go around every label."""
    page = crowded_hour_page(tmp_path).read_text()
    boxes = timeline_boxes(page)
    assert len(boxes["labels"]) >= 3 and boxes["marks"] and boxes["lines"]
    assert overlaps(boxes) == {
        "line x label": 0, "line x other mark": 0, "label x label": 0, "mark x mark": 0,
    }  # fmt: skip
    t = parse_timeline(page)
    # Every finding is still counted, on its own row.
    for gpu in ("", "GPU-a"):
        assert sum(int(i["data-count"]) for i in t["incidents"] if i["data-gpu"] == gpu) == 33
    assert {"root · shell 9 ×30", "root · unknown origin"} <= set(t["labels"])


def test_a_bar_label_is_never_cut_a_narrow_bar_carries_a_tag_the_key_spells_out(
    tmp_path: Path,
) -> None:
    """Fresh user F (issue 33): on a busy hour the bar labels were cut to their bars
    (``root · unkno``, ``root · cron /tmp/rw-try-f/c``): the ghost could not be picked
    out without hovering. Before (132b2a1) on the crowded hour: 52 labels cut to their
    bar (``clip-path``), 50 of them the ghost's, whole nowhere. After: no label is cut; a bar
    too narrow for its label (and with no room beside it) carries a letter, and the key
    under the timeline spells out each letter's label whole."""
    page = crowded_hour_page(tmp_path).read_text()
    assert "clip-path" not in page
    t = parse_timeline(page)
    ghost = "root · cron /tmp/rw-try-e/cron.d/legacy-retrain:1 (* * * * *)"
    assert ghost in t["key"].values()
    tag = next(k for k, v in t["key"].items() if v == ghost)
    ghost_bars = [r for r in t["runs"] if r["data-origin"].startswith("cron /tmp/rw-try-e")]
    assert len(ghost_bars) == 50
    assert t["labels"].count(tag) >= 40  # most of the 40 s bars carry their letter
    # Every letter drawn is in the key, and every label drawn is whole or a letter.
    for text in t["labels"]:
        head = text.split(" ×")[0]
        assert head in t["key"] or " · " in head, text
    assert page.index('id="bar-key"') > page.index("</svg>")


def test_a_long_per_origin_table_keeps_its_first_rows_in_view(tmp_path: Path) -> None:
    """Fresh user F (issue 33): on a busy host the per-origin table was about 800 rows,
    the ghost one of them. The first :data:`TABLE_ROWS` rows (most GPU-hours first: the
    ghost) stay in view; the rest fold under one ``<details>``, still in the page."""
    from rogue_watchdog.report import TABLE_ROWS

    page = crowded_hour_page(tmp_path).read_text()
    table = page.split('<table id="by-origin">')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>([^<]*)</td>", table)
    assert len(rows) == TABLE_ROWS == 25
    assert rows[0] == "cron /tmp/rw-try-e/cron.d/legacy-retrain:1 (* * * * *)"
    rest = page.split('<table id="by-origin">')[1].split("</details>")[0]
    assert "<summary>7 more row(s)</summary>" in rest  # 32 origins in all
    assert len(re.findall(r"<tr><td>", rest)) == 32


def test_report_output_says_it_wrote_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As allowlist suggest --output (first-day report): nothing after the "reading" line
    # looked like nothing done.
    state = busy_week(tmp_path, time.time())
    page = tmp_path / "week.json"
    capsys.readouterr()
    args = ["report", "--state-dir", str(state), "--since", "7d", "--format", "json"]
    assert main([*args, "--output", str(page)]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == f"rogue-watchdog: wrote {page}"
    assert json.loads(page.read_text())
