"""The live view's screen on a busy host (issue 33, item 2): 110 jobs on 4 GPUs at 80x24
and 200x50. The GPUs and the selected job are always on screen, the list scrolls, sorts
and filters, and a pane scrolls.

Before: "… 83 line(s) hidden: the terminal has 24 rows", the GPU header and the selected
job off screen, j/k not scrolling, no sort, no filter.
"""

from __future__ import annotations

from typing import Any

import pytest

from rogue_watchdog.cli.top import (
    KEYS,
    KEYS_SHORT,
    PANE_KEYS,
    Pane,
    View,
    handle,
    keys_of,
    layout,
    move,
    shown_jobs,
)

GIB = 1024**3
NOW = 1_700_100_000.0
BTIME = 1_700_000_000.0
USERS = ["alice", "bob", "mlops", "svc-old"]
VERDICTS = ["rogue", "sanctioned", "excess", "sanctioned"]


def busy(n: int = 110) -> dict[str, Any]:
    gpus = [
        {"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i:08d}-1111-2222-3333-444444444444",
         "memory_used_bytes": (10 + i) * GIB, "memory_total_bytes": 140 * GIB}
        for i in range(4)
    ]  # fmt: skip
    jobs = []
    for k in range(n):
        g = gpus[k % 4]
        jobs.append(
            {"root_pid": 10000 + k, "user": USERS[k % 4], "verdict": VERDICTS[k % 4],
             "origin": f"cron /etc/cron.d/job{k}:4 (*/5 * * * *)",
             "cmdline": ["python3", f"/srv/train_{k}.py"], "gpu_memory_bytes": (k % 7) * GIB,
             "start_ticks": 100 * (n - k),  # the last job started first: age order differs
             "gpus": [{"index": g["index"], "uuid": g["uuid"], "memory_bytes": (k % 7) * GIB}]}
        )  # fmt: skip
    findings = [
        {
            "id": k,
            "severity": "high",
            "kind": "rogue-job",
            "message": f"rogue job PID {10000 + k}",
            "root_pid": 10000 + k,
        }
        for k in range(0, n, 4)
    ]
    return {"host": "gpu-07", "gpus": gpus, "jobs": jobs, "findings": findings}


def screen(doc: dict[str, Any], view: View, width: int, rows: int) -> list[str]:
    lines = layout(doc, "daemon (/run/rogue-watchdog/status.sock)", view, width, rows, now=NOW)
    assert len(lines) <= rows
    assert all(len(x) <= width for x in lines), [x for x in lines if len(x) > width]
    return lines


def selected_row(lines: list[str]) -> str:
    rows = [x for x in lines if x.startswith("> ")]
    assert len(rows) == 1, lines
    return rows[0]


def press(view: View, doc: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert handle(view, key, shown_jobs(doc, view, NOW), []) is True


@pytest.mark.parametrize(("width", "rows"), [(80, 24), (200, 50)])
def test_gpus_and_the_selected_job_stay_on_screen_while_the_list_scrolls(
    width: int, rows: int
) -> None:
    doc, view = busy(), View(btime_s=BTIME)
    lines = screen(doc, view, width, rows)
    assert lines[1 if width == 200 else 2] == (KEYS if width == 200 else KEYS_SHORT)
    for i in range(4):
        assert any(x.startswith(f"  GPU {i} ") for x in lines), lines
    order = [j["root_pid"] for j in shown_jobs(doc, view, NOW)]
    assert selected_row(lines).split()[2] == str(order[0])
    assert lines[-1] == "job 1 of 110, by GPU memory"
    page = view.page
    steps = {"j": 1, "down": 1, "k": -1, "up": -1, "pgdn": page, "pgup": -page}
    seen, expected, at = [], [], 1
    for keys in (["j"] * 57, ["pgdn"] * 3, ["down"] * 5, ["end"], ["pgup"], ["k", "up"], ["home"]):
        press(view, doc, *keys)
        for key in keys:
            at = {"end": 110, "home": 1}.get(key, max(1, min(110, at + steps.get(key, 0))))
        expected.append(at)
        lines = screen(doc, view, width, rows)
        pid = int(selected_row(lines).split()[2])
        where = order.index(pid) + 1
        assert lines[-1] == f"job {where} of 110, by GPU memory"
        for i in range(4):
            assert any(x.startswith(f"  GPU {i} ") for x in lines)
        # Its origin and command whole under the list.
        assert f"  PID {pid} from cron /etc/cron.d/job{pid - 10000}:4 (*/5 * * * *)" in lines
        seen.append(where)
    assert seen == expected
    assert seen[0] == 58 and seen[3] == 110 and seen[-1] == 1


def test_sort_keys_order_the_list_and_i_inverts() -> None:
    doc, view = busy(), View(btime_s=BTIME)

    def column(key: str, field: str) -> list[Any]:
        press(view, doc, key)
        return [j[field] for j in shown_jobs(doc, view, NOW)]

    mem = [j["gpu_memory_bytes"] for j in shown_jobs(doc, view, NOW)]
    assert mem == sorted(mem, reverse=True)  # M, the default: most GPU memory first
    assert column("U", "user")[:28] == ["alice"] * 28
    press(view, doc, "V")
    assert [j["verdict"] for j in shown_jobs(doc, view, NOW)][:28] == ["rogue"] * 28
    press(view, doc, "A")  # oldest first: the last job started first
    assert shown_jobs(doc, view, NOW)[0]["root_pid"] == 10109
    press(view, doc, "P", "I")
    assert [j["root_pid"] for j in shown_jobs(doc, view, NOW)][:2] == [10109, 10108]
    lines = screen(doc, view, 80, 24)
    assert lines[-1].endswith("by inverted PID")
    # The selection follows its job through a new order.
    press(view, doc, "j", "j")
    pid = view.selected
    press(view, doc, "U")
    assert int(selected_row(screen(doc, view, 80, 24)).split()[2]) == pid
    # Another key sorts in its own order; the key in force again inverts it (as nvitop).
    # Before: I then M read "by inverted GPU memory" (the new user's hour, issue 33).
    press(view, doc, "I", "M")
    assert screen(doc, view, 80, 24)[-1].endswith("by GPU memory")
    press(view, doc, "M")
    assert screen(doc, view, 80, 24)[-1].endswith("by inverted GPU memory")


def test_slash_filters_as_typed_and_esc_clears() -> None:
    doc, view = busy(), View(btime_s=BTIME)
    press(view, doc, "/", *"svc gpu3")
    lines = screen(doc, view, 80, 24)
    assert lines[-1].startswith("/ filter: svc gpu3_")
    press(view, doc, "\r")
    lines = screen(doc, view, 80, 24)
    shown = shown_jobs(doc, view, NOW)
    assert len(shown) == 27 and {j["user"] for j in shown} == {"svc-old"}
    assert lines[-1] == "job 1 of 27 matching 'svc gpu3' (of 110), by GPU memory"
    press(view, doc, "/", "\x7f" * 4, "esc")
    assert view.query == "" and len(shown_jobs(doc, view, NOW)) == 110
    press(view, doc, "/", *"nothing-like-this", "\r")
    assert "  no training jobs match the filter" in screen(doc, view, 80, 24)


def test_a_pane_scrolls_and_keeps_its_keys() -> None:
    doc, view = busy(), View(btime_s=BTIME)
    text = "\n".join(f"lineage row {i}" for i in range(200))
    view.pane = Pane("explanation (q/Esc: back)", text)
    lines = screen(doc, view, 80, 24)
    assert lines[2].startswith("q/Esc: back to the list") and PANE_KEYS.startswith(lines[2])
    bar = next(x for x in lines if x.startswith("── explanation"))
    assert "(lines 1-" in bar and "of 200)" in bar
    assert lines[lines.index(bar) + 1] == "lineage row 0"
    for i in range(4):
        assert any(x.startswith(f"  GPU {i} ") for x in lines)
    press(view, doc, "pgdn")
    lines = screen(doc, view, 80, 24)
    assert lines[lines.index(next(x for x in lines if x.startswith("──"))) + 1] == (
        f"lineage row {view.page}"
    )
    press(view, doc, "end")
    lines = screen(doc, view, 80, 24)
    assert "lineage row 199" in lines and "of 200)" in next(x for x in lines if "──" in x)
    press(view, doc, "home", "q")
    assert view.pane is None


def test_keys_are_read_from_their_escape_sequences() -> None:
    data = "\x1b[A\x1b[6~jk\x1b[1~\x1b[4~\x1bOH\x1b[F\x1b[15~/\x1b"
    assert keys_of(data) == ["up", "pgdn", "j", "k", "home", "end", "home", "end", "/", "esc"]


def test_a_dry_run_plan_waits_for_y_and_scroll_keys_do_not_cancel_it() -> None:
    doc, view = busy(), View(btime_s=BTIME)
    view.pane = Pane("terminate: the dry run", "plan\n" * 100, confirm=["terminate", "1"],
                     what="terminate PID 1")  # fmt: skip
    assert screen(doc, view, 80, 24)[-1] == (
        "press y to do what the dry run above says, any other key to cancel"
    )
    press(view, doc, "pgdn", "j")
    assert view.pane is not None and view.pane.top > 0
    press(view, doc, "n")
    assert view.pane is None and view.note == "terminate PID 1: cancelled"


def test_move_on_an_empty_list_is_harmless() -> None:
    view = View()
    move(view, [], "end")
    lines = layout({"jobs": [], "gpus": []}, "local scan", view, 80, 24)
    assert "  no training jobs" in lines and len(lines) <= 24


def test_the_findings_follow_the_filter_and_the_selection() -> None:
    """Fresh-user hour (2026-12-06): `/` filtered the jobs but not the findings, and the
    selected ghost's finding never showed (2 of 14 shown at 80x24). Before, at 80x24 with
    job 10100 selected: `F0`, `F4` shown, "open findings: 28 (2 shown; ...)"; filtered
    by 'train_100.', the same 28."""
    doc, view = busy(), View(btime_s=BTIME, selected=10100)
    lines = screen(doc, view, 80, 24)
    at = next(i for i, x in enumerate(lines) if x.startswith("  open findings:"))
    assert lines[at] == ("  open findings: 28 (2 shown; `rogue-watchdog status` lists all)")
    assert lines[at + 1].startswith("* F100  high     rogue-job: rogue job PID 10100")
    assert lines[at + 2].startswith("  F0    high     rogue-job: rogue job PID 10000")
    press(view, doc, "/", *"train_104.", "\r")
    lines = screen(doc, view, 80, 24)
    at = next(i for i, x in enumerate(lines) if x.startswith("  open findings:"))
    assert lines[at : at + 2] == [
        "  open findings: 1 matching 'train_104.' (of 28)",
        "* F104  high     rogue-job: rogue job PID 10104",
    ]
    # A finding's own words match too (an id, a kind); a job-less one is not hidden by it.
    doc["findings"].append(
        {"id": 900, "severity": "critical", "kind": "gpu-blind", "message": "GPU 3 unreadable"}
    )
    press(view, doc, "/", "esc", "/", *"blind", "\r")
    lines = screen(doc, view, 200, 50)
    at = next(i for i, x in enumerate(lines) if x.startswith("  open findings:"))
    assert lines[at : at + 2] == [
        "  open findings: 1 matching 'blind' (of 29)",
        "  F900  critical gpu-blind: GPU 3 unreadable",
    ]
    press(view, doc, "/", "esc")
    lines = screen(doc, view, 200, 50)
    at = next(i for i, x in enumerate(lines) if x.startswith("  open findings:"))
    # A critical one first, then the selected job's, then the rest by severity. Before
    # (132b2a1): `* F104`, `F900 critical`, `F0`: with 2 shown, a selection pushed the
    # critical one off (fresh user F, 221 open).
    assert [x[:16] for x in lines[at + 1 : at + 4]] == [
        "  F900  critical", "* F104  high    ", "  F0    high    ",
    ]  # fmt: skip


def test_a_critical_finding_is_first_and_a_short_list_leaves_its_rows_to_the_findings() -> None:
    """Fresh user F (issue 33): `open findings: 221 (2 shown; ...)` at 80x24; at 200x50
    about 33 blank rows under the job list while 7 of 221 were shown. Before (132b2a1),
    200x50 with 3 jobs and 222 findings: 7 shown; after: 33, the critical one first."""
    doc, view = busy(3), View(btime_s=BTIME, selected=10001)
    doc["findings"] = [
        {"id": 1000 + k, "severity": "warning", "kind": "rogue-job", "message": f"job {k}",
         "root_pid": 20000 + k}
        for k in range(220)
    ]  # fmt: skip
    doc["findings"].insert(
        150, {"id": 99, "severity": "critical", "kind": "remediation-failed", "message": "back"}
    )
    doc["findings"].append(
        {"id": 5, "severity": "high", "kind": "rogue-job", "message": "x", "root_pid": 10001}
    )
    lines = screen(doc, view, 200, 50)
    at = next(i for i, x in enumerate(lines) if x.startswith("  open findings:"))
    assert lines[at] == "  open findings: 222 (33 shown; `rogue-watchdog status` lists all)"
    assert [x[:16] for x in lines[at + 1 : at + 4]] == [
        "  F99   critical", "* F5    high    ", "  F1000 warning ",
    ]  # fmt: skip
    assert lines[-1] == screen(doc, view, 200, 50)[-1]  # the status line stays last
    small = screen(doc, view, 80, 24)
    at = next(i for i, x in enumerate(small) if x.startswith("  open findings:"))
    assert small[at + 1].startswith("  F99   critical remediation-failed: back")


def test_the_explain_pane_wraps_at_words_under_its_indent() -> None:
    # Fresh-user hour: at 80 columns the pane cut lines mid-word.
    doc, view = busy(), View(btime_s=BTIME)
    text = "  origin: " + " ".join(f"word{i:02d}" for i in range(20))
    view.pane = Pane("explanation (q/Esc: back)", text)
    lines = screen(doc, view, 80, 24)
    bar = next(i for i, x in enumerate(lines) if x.startswith("── explanation"))
    assert lines[bar + 1 : bar + 3] == [
        "  origin: " + " ".join(f"word{i:02d}" for i in range(10)),
        "    " + " ".join(f"word{i:02d}" for i in range(10, 20)),
    ]


def test_rows_at_80_columns_keep_the_end_of_an_origins_path() -> None:
    # Fresh-user hour: both cron rows read `cron /work/fresh-try/cron…` until selected.
    from rogue_watchdog.cli.top import _row

    rows = []
    for name in ("ghost:1", "pipeline:2"):
        j = {"root_pid": 21706, "user": "root", "verdict": "rogue", "gpus": [],
             "origin": f"cron /work/fresh-try/cron.d/{name} (* * * * *)",
             "cmdline": ["python3", "/work/fresh-try/train.py"]}  # fmt: skip
        rows.append(_row(j, " ", 80, False, NOW, View()))
    assert rows == [
        "  rogue        21706 root       -            -      - cron …/ghost:1 (* * * * *)",
        "  rogue        21706 root       -            -      - cron …/pipeline:2 (* * * …",
    ]


def test_rows_of_one_origin_at_80_columns_differ_by_their_script() -> None:
    # Fresh user E: thirty jobs from one tmux session, every row at 80x24 read
    # `rogue 23948 root - - 0m04s shell tmux session 'fe-fa…`: nothing told them apart.
    from rogue_watchdog.cli.top import _row

    origin = "shell tmux session 'fe-fakes' ($0) on /dev/pts/3"
    rows = []
    for i in (7, 8):
        argv = ["python3", f"/tmp/fe/fake_{i}.py", "--epochs", "3"]
        j = {"root_pid": 23948 + i, "user": "root", "verdict": "rogue", "gpus": [],
             "origin": origin, "cmdline": argv}  # fmt: skip
        rows.append(_row(j, " ", 80, False, NOW, View(), shared=True))
    assert [r[54:] for r in rows] == [
        "shell tmux s… · fake_7.py…",
        "shell tmux s… · fake_8.py…",
    ]


# -- printed commands are never wrapped inside themselves (issue 33 item 4, fresh user D) --

D = "/tmp/tmp.5padkcTgpa"
SED = f"sed -i '1s/^/# disabled by rogue-watchdog: /' {D}/cron.d/legacy-retrain"
DISABLE = f"rogue-watchdog disable-source --config {D}/config.yaml F15"
TERMINATE = f"rogue-watchdog terminate --config {D}/config.yaml 24604"
STATUS = f"rogue-watchdog status --config {D}/config.yaml"
# Padded ("seen; " x23) so that the base commit (0f0df4a) wrapped it at 200 columns as
# fresh user D saw it: `... or by hand: sed` / `    -i '1s/^/...` (`-i: command not found`).
EXPLAIN = (
    "restarts it: on schedule, its cron line (* * * * *) " + "; ".join(["seen"] * 23)
    + f"; to stop the source: {DISABLE} (backs up the crontab; the `rogue-watchdog undo` it "
    f"prints, with the action id, restores it), or by hand: {SED}"
)  # fmt: skip
REFUSAL = (
    "disable-source PID 24604: refused: its origin (shell) names nothing to disable; stop "
    f"the run with `{TERMINATE}`"
)


def pane_screen(text: str, width: int, rows: int, *keys: str) -> list[str]:
    doc, view = busy(), View(btime_s=BTIME)
    view.pane = Pane("explanation (q/Esc: back)", "  " + text)
    press(view, doc, *keys)
    return screen(doc, view, width, rows)


@pytest.mark.parametrize(("width", "rows"), [(80, 24), (200, 50)])
def test_commands_in_panes_and_footers_are_whole_on_one_line(width: int, rows: int) -> None:
    """Before (0f0df4a): at 200x50 the explain pane broke `sed` / `-i '1s/^/...`; at 80x24
    the refusal pane broke `rogue-watchdog terminate --config` / `/tmp/.../config.yaml
    24604` and the footer `rogue-watchdog status --config` / `/tmp/.../config.yaml`."""
    lines = pane_screen(EXPLAIN, width, rows)
    assert any(DISABLE in x for x in lines), lines
    if width == 200:
        assert f"    {SED}" in lines, lines
    else:
        # Wider than the terminal: a line of its own, cut visibly; → shows its end.
        assert f"    {SED}"[:79] + "»" in lines, lines
        right = pane_screen(EXPLAIN, width, rows, "right")
        assert "«" + f"    {SED}"[13:] in right, right
        bar = next(x for x in right if x.startswith("── explanation"))
        assert bar.endswith(", columns 13-91 of 91: ←/→) ──"), bar
    lines = pane_screen(REFUSAL, width, rows)
    assert any(f"`{TERMINATE}`" in x for x in lines), lines
    doc, view = busy(), View(btime_s=BTIME)
    doc["config"] = {"path": f"{D}/config.yaml"}
    doc["findings"] = doc["findings"] * 8
    lines = screen(doc, view, width, rows)
    assert any(f"`{STATUS}` lists all" in x for x in lines), lines


def test_the_selected_jobs_periodic_finding_is_shown_with_it() -> None:
    """Fresh user I (issue 33): at 80x24, "open findings: 301 (7 shown; …)" showed F9-F20
    in id order while the selected ghost's loop finding (F323, periodic: it names no run,
    root_pid None) was off screen. Its status entry now names its latest run's root
    (``details.periodic.pid``), so it follows the selection. Before: `root_pids` [] and
    the finding not among those shown; after: first, marked ``*``."""
    from rogue_watchdog.daemon.status import _entry
    from rogue_watchdog.state import FindingRecord

    rec = FindingRecord(
        id=323, fingerprint="rogue-job:periodic:abc", kind="rogue-job", severity="high",
        message="periodic: 4 runs about every 1m; latest run: rogue job PID 10105",
        root_pid=None, details={"periodic": {"runs": 4, "cadence_s": 60.0, "pid": 10105}},
        opened_at=NOW - 300, last_seen=NOW, seen_count=9, resolved_at=None,
        last_alert_at=NOW - 295,
    )  # fmt: skip
    entry = _entry(rec, NOW)
    assert entry["root_pids"] == [10105]
    doc = busy()
    doc["findings"].append(entry)
    lines = screen(doc, View(btime_s=BTIME, selected=10105), 80, 24)
    at = next(i for i, x in enumerate(lines) if x.startswith("  open findings:"))
    assert lines[at + 1].startswith("* F323  high     rogue-job: periodic: 4 runs")
