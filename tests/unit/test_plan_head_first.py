"""A plan's head line comes first: ``terminate`` prints what it is about under it.

BEFORE: ``terminate --dry-run`` of a job whose source starts it again printed ``its
source starts it again: ...`` above ``would terminate rogue job PID ...``, a line that
read as belonging to nothing (or to the command before); ``--and-source`` whose
disable was refused printed ``its source is not disabled: ...`` above it too. AFTER:
the head line first, then those lines, indented under it like the rest.

A real bash loop runs a real trainer, left to PID 1 (``sh -c '... & exit 0'``); it
also started a ``sleep`` beside it, so its shell is shared: the terminate leaves it and
the loop starts the trainer again.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Spawned, need_program, poll, run_cli
from tests.unit.test_script_loop import TRAINER

LOOP = "sleep 300 & while true; do python3 train_loop.py; sleep 5; done"


def _loop(spawned: Spawned, tmp_path: Path) -> tuple[Path, int, int]:
    """The config, the trainer's PID and its loop shell's."""
    need_program("bash")
    (tmp_path / "train_loop.py").write_text(TRAINER)
    spawned.start(
        ["/bin/sh", "-c", f"/bin/bash -c '{LOOP}' >/dev/null 2>&1 & exit 0"],
        cwd=tmp_path, env=dict(os.environ, PATH="/usr/bin:/bin"),
    ).wait(timeout=10)  # fmt: skip

    def trainer() -> tuple[int, int] | None:
        for name in os.listdir("/proc"):
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[:-1]
                cwd = os.readlink(f"/proc/{name}/cwd")
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, ValueError):
                continue
            if argv == [b"python3", b"train_loop.py"] and cwd == str(tmp_path):
                return int(name), int(stat[1])
        return None

    pid, shell = poll("the trainer", trainer, 20)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/none.sock'}}\n"
    )
    return cfg, pid, shell


def test_terminate_dry_run_says_its_head_line_first(spawned: Spawned, tmp_path: Path) -> None:
    cfg, pid, shell = _loop(spawned, tmp_path)
    res = run_cli("terminate", "--config", str(cfg), str(pid), "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"would terminate rogue job PID {pid} `python3 train_loop.py` ")
    assert lines[1] == (
        f"  its source starts it again: after about 5 s, shell loop `while true` in PID {shell}"
    )
    assert lines[-1].startswith("would come back: its source restarts it; ")
    # --and-source, its disable refused (an orphan's loop names no file or unit): said
    # under the terminate's head line too.
    res = run_cli("terminate", "--config", str(cfg), str(pid), "--dry-run", "--and-source")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"would terminate rogue job PID {pid} `python3 train_loop.py` ")
    assert lines[1:3] == [
        "  its source is not disabled: its origin (orphan) names nothing to disable, and "
        "enforcement.quarantine_unknown_exe is off",
        f"  its source starts it again: after about 5 s, shell loop `while true` in PID {shell}",
    ]


def test_and_source_leaves_a_cron_lines_shell_loop_said(tmp_path: Path) -> None:
    """A cron line's own shell loops over the trainer and also runs a ``sleep``: the
    terminate leaves that shell, and commenting out the line does not stop a loop
    already running. Before: ``--and-source`` dropped both ``its source starts it
    again: ... shell loop`` and ``would come back``, as if the disable had stopped it."""
    from tests.fixtures.proc.fakeproc import FakeProc, write_tree

    proc, crond = tmp_path / "proc", tmp_path / "cron.d"
    crond.mkdir()
    loop = "sleep 300 & while true; do python3 /srv/train_ghost.py; sleep 5; done"
    (crond / "legacy").write_text(f"* * * * * root {loop}\n")
    cg = ["0::/system.slice/cron.service"]
    write_tree(proc, [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(100, 1, ["/usr/sbin/cron", "-f"], cgroup=cg),
        FakeProc(200, 100, ["/bin/sh", "-c", loop], exe="/bin/sh", cgroup=cg, start=200),
        FakeProc(700, 200, ["python3", "/srv/train_ghost.py"], cgroup=cg, start=300, pgid=200),
        FakeProc(701, 200, ["sleep", "300"], cgroup=cg, start=300, pgid=200),
    ])  # fmt: skip
    cfg = tmp_path / "t.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\ntraining: {launchers: [train_ghost.py]}\n"
        f"paths: {{proc_root: {proc}, crontab: {tmp_path}/crontab, cron_d: {crond}, "
        "cron_spool: []}\n"
        f"daemon: {{state_dir: {tmp_path}/state, socket: {tmp_path}/none.sock}}\n"
        f"enforcement: {{backup_dir: {tmp_path}/backups}}\n"
    )
    res = run_cli("terminate", "--config", str(cfg), "700", "--dry-run", "--and-source")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("would disable its source first ")
    head = next(i for i, line in enumerate(lines) if line.startswith("would terminate "))
    assert lines[head + 1] == (
        "  its source starts it again: after about 5 s, shell loop `while true` in PID 200"
    )
    assert lines[-1].startswith("would come back: its source restarts it; stop the loop first")
