"""Trust IV cases on real processes this test starts: a bystander sharing an orphaned
shell is never signalled (case 2), a process that only names a training script is not
training (case 4), the workers of one launch are one job (case 6).

Every process here is started by the test, in a sandbox directory with a random name;
cleanup kills exactly those (by PID and start time), whatever session they moved to.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.config import load_config
from rogue_watchdog.model import OrphanOrigin
from rogue_watchdog.scan import Scanner
from tests.conftest import need_program, poll, run_cli

PY = sys.executable
SLEEP = "import time\ntime.sleep(300)\n"


class Started:
    """Processes the test started, found by their sandbox path; each is killed at the
    end by PID and start time (never a PID reused meanwhile)."""

    def __init__(self, sandbox: Path) -> None:
        self.sandbox = str(sandbox)
        self.seen: dict[int, int] = {}

    def mine(self) -> dict[int, tuple[str, ...]]:
        """Live processes whose command line names the sandbox, with their argv."""
        out = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            live = read_live(int(name))
            if live is not None and live.state != "Z" and self.sandbox in " ".join(live.cmdline):
                self.seen.setdefault(live.pid, live.start_ticks)
                out[live.pid] = live.cmdline
        return out

    def cleanup(self) -> None:
        self.mine()
        for pid, start in self.seen.items():
            live = read_live(pid)
            if live is not None and live.start_ticks == start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    s = Started(tmp_path)
    try:
        yield s
    finally:
        s.cleanup()


def config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "nvml: {enabled: false}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/none.sock'}}\n" + extra
    )
    return path


def find(started: Started, program: str, count: int = 1) -> list[int]:
    """PIDs of the processes whose argv is ``[python, program, ...]`` (never a shell or
    wrapper that only carries the command line)."""

    def probe() -> list[int] | None:
        pids = sorted(
            p
            for p, argv in started.mine().items()
            if argv[:2] in ((PY, program), (PY, "-m"))
            and (argv[1] == program or program in argv[2:3])
        )
        return pids if len(pids) >= count else None

    return poll(f"{count} process(es) running {program}", probe, 20)


def ppid(pid: int) -> int:
    live = read_live(pid)
    assert live is not None
    return live.ppid


def test_orphaned_shell_bystander_is_never_signalled(tmp_path: Path, started: Started) -> None:
    """Case 2: an orphaned shell (adopted by PID 1) runs `python3 -m http.server` and
    `bash -c "timeout 300 python3 train_a.py"`. The signal set is the trainer and the
    `timeout` that exists only for it: never the shell, never the http.server."""
    need_program("setsid", "timeout", "bash")
    train = tmp_path / "train_a.py"
    train.write_text(SLEEP)
    www = tmp_path / "www"
    www.mkdir()
    inner = (
        f"{PY} -m http.server --directory {www} --bind 127.0.0.1 0 >/dev/null 2>&1 & "
        f'bash -c "timeout 300 {PY} {train}"; wait'
    )
    # The starter exits at once: the setsid shell is adopted (its parent exited).
    subprocess.run(["sh", "-c", f"setsid sh -c '{inner}' {tmp_path} & exit 0"], check=True)
    (trainer,) = find(started, str(train))
    (server,) = find(started, "http.server")
    wrapper = ppid(trainer)
    shell = ppid(server)
    assert ppid(wrapper) == shell and read_live(wrapper).cmdline[0] == "timeout"  # type: ignore[union-attr]

    cfg = config(tmp_path)
    result = Scanner(load_config(str(cfg))).scan()
    (job,) = [j for j in result.jobs if j.root_pid == trainer]
    assert isinstance(job.origin, OrphanOrigin)
    assert job.origin.message == (
        f"orphan: its wrapper dash (PID {shell}) was adopted (the wrapper's parent exited)"
    )
    assert job.origin.parent_pid == ppid(shell)  # the adopter of the shell, not `timeout`
    assert job.advice.stop_pids == (trainer, wrapper)
    # `timeout` made a process group of its own holding just the two: the group is exact.
    assert job.advice.by_hand == f"kill -TERM -- -{wrapper}"
    assert job.advice.stop_line(trainer) == (
        f"rogue-watchdog terminate --config {cfg} {trainer}, or by hand: kill -TERM -- -{wrapper}"
    )

    done = run_cli("terminate", str(trainer), "--config", str(cfg), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"left PID {shell} `sh -c" in done.stdout
    assert "it also runs processes outside the job" in done.stdout
    assert "outcome: ok" in done.stdout
    assert read_live(server) is not None and read_live(shell) is not None
    poll("the trainer and its timeout to exit", lambda: all(
        (p := read_live(x)) is None or p.state == "Z" for x in (trainer, wrapper)
    ) or None, 10)  # fmt: skip
    actions = json.loads(
        run_cli("actions", "--json", "--config", str(cfg)).stdout or "[]"
    )  # a person's run is recorded
    signalled = {p["pid"] for a in actions for p in a["details"]["procs"] if p["signals"]}
    assert signalled == {trainer, wrapper}


@pytest.mark.parametrize(
    "argv",
    [
        ["tail", "-f", "{train}"],
        ["pgrep", "-f", "-x", "{py} {train} --epochs 3"],
        ["{py}", "-c", "import time; time.sleep(300)", "{train}"],
        ["{py}", "{other}", "--from", "{train}"],
    ],
    ids=["tail", "pgrep", "python-c", "argument"],
)
def test_naming_a_training_script_is_not_training(
    tmp_path: Path, started: Started, argv: list[str]
) -> None:
    """Case 4: `tail -f /srv/x/train.py` was a high rogue training job. A process that
    names the script as data is not one; the same script run by python is."""
    need_program("tail", "pgrep")
    train = tmp_path / "train.py"
    train.write_text(SLEEP)
    other = tmp_path / "evaluate.py"
    other.write_text(SLEEP)
    token = uuid.uuid4().hex[:8]
    words = [w.format(train=train, py=PY, other=other) for w in argv]
    if words[0] == "pgrep":
        # pgrep exits at once; keep one alive that waits on a pattern that never matches.
        words = ["sh", "-c", f"while pgrep -f -x '{PY} {train} {token}'; do :; done; sleep 300"]
        words = ["setsid", *words]
    proc = subprocess.Popen(words, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.5)
        result = Scanner(load_config(str(config(tmp_path)))).scan()
        assert [j.cmdline for j in result.jobs if str(train) in " ".join(j.cmdline)] == []
        real = subprocess.Popen([PY, str(train)], start_new_session=True)
        try:
            time.sleep(0.5)
            result = Scanner(load_config(str(config(tmp_path)))).scan()
            named = [j.root_pid for j in result.jobs if str(train) in " ".join(j.cmdline)]
            assert named == [real.pid]
        finally:
            real.kill()
            real.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


LAUNCHER = """
import os, subprocess, sys
for rank in range(4):
    subprocess.Popen([sys.executable, sys.argv[1], "--rank", str(rank)], start_new_session=True)
"""


def test_workers_of_one_launch_are_one_job(tmp_path: Path, started: Started) -> None:
    """Case 6: a launcher starts 4 `train_w.py --rank N` workers, each in its own
    session, and exits: one job (one finding), and `terminate` stops all four."""
    train = tmp_path / "train_w.py"
    train.write_text(SLEEP)
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    subprocess.run([PY, str(launcher), str(train)], check=True)
    workers = find(started, str(train), 4)
    assert {ppid(w) for w in workers} != set(workers)  # re-parented, each its own session
    cfg = config(tmp_path)
    result = Scanner(load_config(str(cfg))).scan()
    jobs = [j for j in result.jobs if str(train) in " ".join(j.cmdline)]
    assert [sorted(j.pids) for j in jobs] == [workers]
    assert len([f for f in result.findings if f.root_pid == jobs[0].root_pid]) == 1
    done = run_cli("terminate", str(workers[-1]), "--config", str(cfg), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    poll("every worker to exit", lambda: not find_now(started, str(train)) or None, 10)


def find_now(started: Started, program: str) -> list[int]:
    return [p for p, argv in started.mine().items() if argv[:2] == (PY, program)]
