"""A rogue cannot open a GPU on cgroup v2 (issue 36, item 2): the daemon's
``BPF_CGROUP_DEVICE`` program, with the kernel's real cgroup v2.

This host is cgroup v1 (hybrid): the cgroup2 hierarchy is mounted by the test itself on
a folder of its own inside a private mount namespace (``unshare -m``), where
tests/system/gpu_open_v2_driver.py makes one child cgroup of its own, starts its
openers there and runs the real daemon with ``paths.cgroup_root`` that mount. The GPU is
a stand-in node (``mknod DIR/nvidia0 c 195 0``): ENXIO when allowed, EPERM when denied.
``enforcement.gpu_open`` is set only through a rule naming the test's folder. The driver
removes every cgroup it or its daemon made; the test checks that it said so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.actions import devprog
from tests.conftest import REPO, need, need_program, need_root

pytestmark = pytest.mark.system

PREFIX = "rogue-watchdog-gpu-deny"


def drive(tmp_path: Path, mode: str) -> dict[str, Any]:
    need_root()
    need_program("unshare", "mount")
    need(devprog.supported() is None, "needs BPF_CGROUP_DEVICE programs (CONFIG_CGROUP_BPF)")
    probe = tmp_path / "probe"
    probe.mkdir()
    can = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mount -t cgroup2 none {probe} && umount {probe}"],
        capture_output=True, check=False,
    )  # fmt: skip
    need(can.returncode == 0, "needs a cgroup2 mount in a private mount namespace")
    box = tmp_path / "box"
    box.mkdir()
    os.mknod(box / "nvidia0", 0o600 | 0o020000, os.makedev(195, 0))
    run = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-m",
         "tests.system.gpu_open_v2_driver", str(box), mode],
        capture_output=True, text=True, timeout=180, check=False, cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    out: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    assert "exception" not in out, out["exception"]
    # Cleaned up: the test's own child cgroup (and every denial in it) is gone, and the
    # host's own view of the hierarchy (when it mounts one) holds none of it.
    assert (out["test_cgroup_removed"], out["driver_cgroup_unchanged"]) == (True, True)
    unified = Path("/sys/fs/cgroup/unified")
    if unified.is_dir():
        assert [p for p in unified.iterdir() if p.name.startswith("rw-test-gpuv2.")] == []
    return out


def test_v2_denies_the_rogue_only_and_undo_job_end_and_sanction_lift_it(tmp_path: Path) -> None:
    out = drive(tmp_path, "enforce")
    box, s = tmp_path / "box", out["session"]
    names = ["rogue", "pipeline", "ignored", "rogue_ends", "rogue_later_ok"]
    assert out["check_config"] == (
        f"  this host: can enforce (cgroup v2 device program, BPF_CGROUP_DEVICE under {box}/cg2)"
    )
    assert out["before"] == dict.fromkeys(names, "ENXIO")
    assert out["verdicts"] == {
        "rogue": "rogue", "pipeline": "sanctioned", "ignored": "ignored",
        "rogue_ends": "rogue", "rogue_later_ok": "rogue",
    }  # fmt: skip
    # The rogues get EPERM; the pipeline and the ignored job reach the driver (ENXIO).
    assert out["after"] == {
        "rogue": "EPERM", "pipeline": "ENXIO", "ignored": "ENXIO",
        "rogue_ends": "EPERM", "rogue_later_ok": "EPERM",
    }  # fmt: skip
    # Other devices stay usable; mknod of a GPU node is denied too.
    assert (out["rogue_dev_null"], out["rogue_mknod"], out["pipeline_mknod"]) == (
        "opened", "EPERM", "made",
    )  # fmt: skip
    # Each rogue alone in a child of the cgroup it shared with the others.
    ids = {d["procs"][0][0]: d["id"] for d in out["denies"]}
    assert out["cgroups"] == {
        "rogue": f"/{PREFIX}.{s}.{ids['rogue']}", "pipeline": "", "ignored": "",
        "rogue_ends": f"/{PREFIX}.{s}.{ids['rogue_ends']}",
        "rogue_later_ok": f"/{PREFIX}.{s}.{ids['rogue_later_ok']}",
    }  # fmt: skip
    assert out["status"] == {
        "controller": "cgroup-v2", "state": "off",
        "rules": [{"rule": "mine", "gpu_open": "enforce", "state": "enforcing"}],
    }  # fmt: skip
    for deny in out["denies"]:
        (cg,) = deny["programs"]
        prog = deny["programs"][cg]
        assert (deny["outcome"], deny["dry_run"], deny["procs"][0][1]) == ("ok", False, "denied")
        assert deny["undo"] == [{"op": "cgroup_lift", "cgroup": cg, "programs": [prog]}]
        # Recorded before it was made; attached to the denial's cgroup alone, and in force.
        assert deny["steps"] == [
            ["cgroup-mkdir", "done"], ["bpf-attach", "done"], ["cgroup-move", "done"],
        ]  # fmt: skip
        assert (deny["attached"], deny["effective_has_it"]) == ({cg: [prog]}, {cg: True})
    # The CLI undo detaches the recorded program, moves the rogue back, removes its cgroup.
    assert out["undo_rc"] == 0
    detached = ["bpf-detach", {"detached": True}]  # found by its recorded id
    assert out["undo_steps"] == {"undo": [detached, "cgroup-move", "cgroup-rmdir"]}
    assert out["after_undo"] == {
        "rogue": "ENXIO", "pipeline": "ENXIO", "ignored": "ENXIO",
        "rogue_ends": "EPERM", "rogue_later_ok": "EPERM",
    }  # fmt: skip
    assert out["rogue_cgroup_after_undo"] == ""
    # After a restart (a new daemon session), the job that ended and the one the new
    # config sanctions: lifted by its first tick, by the ids the first daemon recorded.
    assert out["restarted_session"] != s
    assert [lift[:3] for lift in out["lifts"]] == [
        ["rogue_ends", "ok", "the job ended: nothing is left in its cgroup"],
        ["rogue_later_ok", "ok",
         f"the guard now refuses it: PID {out['lifts'][1][3][0]} belongs to a sanctioned job"],
    ]  # fmt: skip
    assert sorted(out["lift_steps"]) == [
        [detached, "cgroup-move", "cgroup-rmdir"], [detached, "cgroup-rmdir"],
    ]  # fmt: skip
    assert out["after_lifts"] == dict.fromkeys(
        ["rogue", "pipeline", "ignored", "rogue_later_ok"], "ENXIO"
    )
    assert out["left"] == []


def test_v2_audit_denies_nothing_and_records_each_would_be_denial(tmp_path: Path) -> None:
    out = drive(tmp_path, "audit")
    assert out["after"] == {"rogue": "ENXIO", "pipeline": "ENXIO", "ignored": "ENXIO"}
    assert (out["rogue_mknod"], out["cgroups"]["rogue"], out["left_after_tick"]) == ("made", "", [])
    (audit,) = out["denies"]
    assert (audit["outcome"], audit["dry_run"], audit["undo"], audit["procs"]) == (
        "audit", True, None, [["rogue", "would-deny"]],
    )  # fmt: skip
    assert out["status"]["rules"] == [{"rule": "mine", "gpu_open": "audit", "state": "auditing"}]


def test_v2_never_overrides_a_program_of_the_cgroup_above(tmp_path: Path) -> None:
    """A program attached above with BPF_F_ALLOW_OVERRIDE (not ALLOW_MULTI) would stop
    running for a child that attaches its own: a container's device list lifted. The
    denial is not made, says why, and leaves no cgroup."""
    out = drive(tmp_path, "override")
    (above,) = out["above"]
    (deny,) = out["denies"]
    assert (deny["outcome"], deny["procs"], deny["undo"], deny["programs"]) == (
        "failed", [["rogue", "error"]], None, {},
    )  # fmt: skip
    assert deny["steps"] == [
        ["cgroup-mkdir", "done"], ["bpf-attach", "failed"], ["cgroup-rmdir", "done"],
    ]  # fmt: skip
    (error,) = out["errors"]
    assert f"would stop the device program(s) {above} of a cgroup above" in error
    assert (out["after"], out["cgroups"], out["left_after_tick"]) == (
        {"rogue": "ENXIO"},
        {"rogue": ""},
        [],
    )
