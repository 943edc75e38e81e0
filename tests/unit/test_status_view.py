"""``status`` for people: GPU split, GPU column, ``--gpu N``, narrow terminals, colour."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.daemon.status import exit_code, filter_gpu, render_status
from tests.unit.test_status import DOC


def two_gpus() -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    doc["gpus"].append(dict(doc["gpus"][0], index=3, uuid="GPU-3", memory_used_bytes=5 * 2**30))
    doc["jobs"].append(
        {
            "root_pid": 5151, "pids": [5151, 5152], "user": None,
            "cmdline": ["/root/.pyenv/versions/3.11.7/bin/python", "/home/a/exp/train_big.py"],
            "verdict": "sanctioned", "rule": "nightly", "origin": "systemd unit train.service",
            "origin_kind": "systemd", "gpu_memory_bytes": 4 * 2**30,
            "gpus": [{"index": 3, "uuid": "GPU-3", "memory_bytes": 4 * 2**30}],
        }
    )  # fmt: skip
    return doc


def test_status_at_80_columns() -> None:
    lines = render_status(two_gpus(), width=80, colour=False).splitlines()
    assert lines[4:16] == [
        "GPUs: 2",
        "  GPU 0  NVIDIA H200  1.5 GiB used of 150.0 GiB  GPU-1",
        "    sanctioned 0 B, unsanctioned 1.0 GiB, not attributable 512.0 MiB",
        "  GPU 3  NVIDIA H200  5.0 GiB used of 150.0 GiB  GPU-3",
        "    sanctioned 4.0 GiB, unsanctioned 0 B, not attributable 1.0 GiB",
        "jobs: 2",
        "  rogue      pid 4242    alice      GPU 0     1.0 GiB",
        "    origin: cron: /etc/cron.d/retrain line 3",
        "    python3 train_x.py \\x1b[2J",
        "  sanctioned pid 5151    -          GPU 3     4.0 GiB",
        "    origin: systemd unit train.service",
        "    /root/.pyenv/versions/3.11.7/bin/python /home/a/exp/train_big.py",
    ]
    assert all(len(x) <= 80 for x in lines[4:16])
    assert "None" not in "\n".join(lines)


def test_status_gpu_filter() -> None:
    doc = filter_gpu(two_gpus(), 3)
    assert [g["index"] for g in doc["gpus"]] == [3]
    assert [j["root_pid"] for j in doc["jobs"]] == [5151]
    assert doc["findings"] == []  # F7 is about PID 4242 on GPU 0
    assert exit_code(dict(doc, degraded={})) == 0
    zero = filter_gpu(two_gpus(), 0)
    assert [f["id"] for f in zero["findings"]] == [7]
    blind = two_gpus()
    blind["findings"].append(dict(blind["findings"][0], id=8, kind="pid-namespace", root_pid=None))
    assert [f["id"] for f in filter_gpu(blind, 3)["findings"]] == [8]


def test_status_colours_verdicts_only_when_asked() -> None:
    coloured = render_status(two_gpus(), width=200, colour=True).splitlines()
    assert coloured[8].startswith("  \x1b[31;1mrogue     \x1b[0m pid 4242 ")
    assert coloured[10].startswith("  \x1b[32msanctioned\x1b[0m pid 5151 ")
    assert "\x1b[" not in render_status(two_gpus(), width=200, colour=False)


def test_a_daemon_too_old_to_say_which_gpu_shows_unknown() -> None:
    doc = copy.deepcopy(DOC)
    del doc["jobs"][0]["gpus"]
    lines = render_status(doc, width=200, colour=False).splitlines()
    assert lines[5] == (
        "  GPU 0  NVIDIA H200  1.5 GiB used of 150.0 GiB: sanctioned -, unsanctioned -,"
        " not attributable -  GPU-1"
    )


def test_a_gpu_view_while_nvml_is_blind_lists_unplaced_jobs_and_keeps_the_exit_code() -> None:
    # NVML down: the daemon places no job on a GPU. `status --gpu 0` used to print
    # "jobs: 0" and exit 0 while F7 (high, a rogue job) was open.
    doc = copy.deepcopy(DOC)
    doc["jobs"][0]["gpus"] = []
    doc["findings"].append(
        dict(doc["findings"][0], id=9, kind="nvml-unavailable", severity="info", root_pid=None)
    )
    narrowed = filter_gpu(doc, 0)
    assert [j["root_pid"] for j in narrowed["jobs"]] == [4242]
    assert [f["id"] for f in narrowed["findings"]] == [7, 9]
    assert exit_code(dict(narrowed, degraded={})) == 1


def test_a_gpu_view_says_why_it_lists_more_than_that_gpu() -> None:
    # Before: `status --gpu 3` on a host where NVML is down listed every job with no word
    # of why, where `scan --gpu 3` said so.
    doc = copy.deepcopy(DOC)
    doc["nvml"] = {"available": False, "driver_version": None, "error": "NVML library not found"}
    doc["gpus"] = []
    doc["jobs"][0]["gpus"] = []
    narrowed = filter_gpu(doc, 3)
    note = (
        "GPU 3: NVML is unavailable, so no job can be placed on a GPU: every training job is listed"
    )
    assert narrowed["gpu_view_note"] == note
    assert [j["root_pid"] for j in narrowed["jobs"]] == [j["root_pid"] for j in doc["jobs"]]
    lines = render_status(narrowed, width=200, colour=False).splitlines()
    assert lines[lines.index("GPUs: 0") + 1] == f"  {note}"
    assert filter_gpu(DOC, 0)["gpu_view_note"] is None
    assert filter_gpu(DOC, 5)["gpu_view_note"] == "GPU 5: NVML lists no such GPU here (GPUs: 0)"


def test_finding_rows_line_up_whatever_the_id_width() -> None:
    """Issue 33, fresh user D: `F1 info     nvml...` and `F15 high     rogue-job` did not
    line up (before, 0f0df4a: the id was never padded)."""
    from rogue_watchdog.daemon.status import _outcome_lines

    findings = [
        {"id": i, "severity": sev, "kind": kind, "message": "m", "age_s": 60, "seen_count": 2}
        for i, sev, kind in ((1, "info", "nvml-unavailable"), (15, "high", "rogue-job"),
                             (None, "warning", "unsanctioned-gpu-use"))
    ]  # fmt: skip
    lines = _outcome_lines({"findings": findings})[1:4]
    assert lines == [
        "  F1  info     nvml-unavailable (open 60s, seen 2x): m",
        "  F15 high     rogue-job (open 60s, seen 2x): m",
        "  -   warning  unsanctioned-gpu-use (seen in the last scan; not in the state database): m",
    ]


def test_status_gpu_that_is_not_here_is_an_error_naming_those_that_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fresh user F (issue 33): `status --gpu 3` on a host with GPUs 0 and 1 exited 0 with
    the note `GPU 3: NVML lists no such GPU here` (before, 132b2a1: exit 0); now exit 2,
    the error naming the GPUs NVML lists, as `scan --gpu` does. While NVML is down, a GPU
    it does not list may be there: the view is shown with its note, as before."""
    from rogue_watchdog.cli import main
    from rogue_watchdog.daemon.ipc import StatusServer

    doc = copy.deepcopy(DOC)
    doc["gpus"].append(dict(doc["gpus"][0], index=1, uuid="GPU-2"))
    s = StatusServer(str(tmp_path / "s.sock"), lambda: doc)
    s.start()
    capsys.readouterr()  # the server's own log line
    try:
        code = main(["status", "--socket", s.path, "--gpu", "3"])
        out, err = capsys.readouterr()
        assert (code, out, err) == (
            2, "", "rogue-watchdog: GPU 3: NVML lists no such GPU here (GPUs: 0, 1)\n"
        )  # fmt: skip
        code = main(["status", "--socket", s.path, "--gpu", "1", "--json"])
        assert code == exit_code(filter_gpu(doc, 1)) != 2
        assert json.loads(capsys.readouterr().out)["gpu_view_note"] is None
        doc["nvml"] = {"available": False, "driver_version": None, "error": "no library"}
        code = main(["status", "--socket", s.path, "--gpu", "3", "--json"])
        assert code == exit_code(filter_gpu(doc, 3)) != 2
        assert json.loads(capsys.readouterr().out)["gpu_view_note"] == (
            "GPU 3: NVML is unavailable, so no job can be placed on a GPU: every training job"
            " is listed"
        )
    finally:
        s.stop()


def test_status_severity_and_limit_put_the_critical_finding_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fresh user F (issue 33): 221 open findings printed in full, the one critical
    `remediation-failed` among them, and no way to narrow them (before, 132b2a1:
    `status --severity critical` was a usage error, exit 2). Now `--severity LEVEL` keeps
    that severity and above, `--limit N` the N most severe, most severe first; the exit
    code follows those shown, as with --gpu."""
    from rogue_watchdog.cli import main
    from rogue_watchdog.daemon.ipc import StatusServer

    doc = copy.deepcopy(DOC)
    doc["degraded"] = {}
    base = doc["findings"][0]
    doc["findings"] = [
        dict(base, id=10 + k, severity="high" if k % 2 else "info", message=f"job {k}")
        for k in range(220)
    ]
    doc["findings"].insert(
        150, dict(base, id=440, severity="critical", kind="remediation-failed", message="back")
    )
    s = StatusServer(str(tmp_path / "s.sock"), lambda: doc)
    s.start()
    capsys.readouterr()  # the server's own log line
    try:
        assert main(["status", "--socket", s.path, "--severity", "critical"]) == 1
        lines = capsys.readouterr().out.splitlines()
        at = next(i for i, x in enumerate(lines) if x.startswith("open findings:"))
        assert lines[at : at + 3] == [
            "open findings: 221 (1 shown: at least critical, most severe first)",
            "  F440 critical remediation-failed (open 10m, seen 120x): back",
            "alerts: 2 queued, 1 retrying, last error: slack: HTTP 500",
        ]
        assert main(["status", "--socket", s.path, "--limit", "3", "--json"]) == 1
        got = json.loads(capsys.readouterr().out)
        assert [(f["id"], f["severity"]) for f in got["findings"]] == [
            (440, "critical"), (11, "high"), (13, "high"),
        ]  # fmt: skip
        assert got["findings_selected"] == {"open": 221, "severity": None, "limit": 3}
        # Only info left: nothing at warning or above is shown, exit 0.
        doc["findings"] = [f for f in doc["findings"] if f["severity"] == "info"]
        assert main(["status", "--socket", s.path, "--severity", "warning"]) == 0
        assert "open findings: 110 (0 shown: at least warning, most severe first)" in (
            capsys.readouterr().out.splitlines()
        )
        for bad, said in (
            (["--severity", "bad"], "argument --severity: invalid choice: 'bad'"),
            (["--limit", "0"], "argument --limit: '0': expected a number from 1 to 100000"),
        ):
            with pytest.raises(SystemExit) as exc:
                main(["status", "--socket", s.path, *bad])
            assert exc.value.code == 2
            assert said in capsys.readouterr().err
    finally:
        s.stop()
