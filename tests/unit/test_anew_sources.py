"""A run a source brings back on a new terminal is its source's return, never a person's new job.

:func:`~rogue_watchdog.policy.anew.started_anew` calls a run back after a terminate a person's
new job (its ``rogue-job`` alone: no ``respawned``, no critical ``remediation-failed``)
when its origin is a person's session other than the stopped run's. A terminal is no
person: a shell loop that runs the trainer through ``script -qec CMD /dev/null`` gives
each run a pseudo-terminal of its own, and the number differs from the stopped run's as
soon as anyone else holds the freed one (a login meanwhile; here the test takes it).
BEFORE: the loop, which the terminate left (``will-return``) and which started the
trainer again, was read as a person starting it again by hand: the return paged
nothing. AFTER: a run whose lineage holds a shell running a command string or script
(the loop, ``script``'s ``sh -c``) before any interactive shell is its source's: the
return pages ``respawned`` and ``remediation-failed``.

Real processes, the real ``terminate`` command and a real state database, as in
``test_hand_restart``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rogue_watchdog.model import Job, Origin, Proc, ShellOrigin, SystemdOrigin
from rogue_watchdog.policy.anew import started_anew
from tests.conftest import Spawned, poll, run_cli
from tests.unit.test_hand_restart import GHOST, PROMPT, T0, _daemon, _opened, _origin, _running


def _run_below(shell: int, script: Path) -> int | None:
    """The PID of the trainer (``python GHOST``, not the runner whose command line
    names it too) running below ``shell`` (any depth), or None."""
    want = f"{sys.executable}\0{script}\0".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not _running(int(entry), script):
            continue
        try:
            if Path(f"/proc/{entry}/cmdline").read_bytes() != want:
                continue
        except OSError:
            continue
        pid = int(entry)
        while pid > 1:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                break
            pid = int(stat.rpartition(")")[2].split()[1])
            if pid == shell:
                return int(entry)
    return None


# How the loop gives each run a terminal of its own: util-linux `script`, or a Python
# keeper's pty.spawn (pexpect and the like: a program, not a wrapper, above the run).
RUNNERS = {
    "script": "script -qec '{python} {ghost}' /dev/null",
    "pty-spawn": "{python} -c 'import pty, sys; pty.spawn(sys.argv[1:])' {python} {ghost}",
}


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_loop_that_runs_the_trainer_on_a_new_terminal_still_pages(
    spawned: Spawned, tmp_path: Path, runner: str
) -> None:
    if runner == "script" and shutil.which("script") is None:
        pytest.skip("needs util-linux script")
    d, config = _daemon(tmp_path)
    script = tmp_path / "train_ghost.py"
    script.write_text(GHOST)
    go = tmp_path / "go"
    # The loop's shell also runs a sleep: terminate leaves it (will-return). It runs the
    # trainer again once the test has taken the freed terminal (`go`).
    run = RUNNERS[runner].format(python=sys.executable, ghost=script)
    loop = (
        f"sleep 300 & while true; do {run}; "
        f"while [ ! -e {go} ]; do sleep 0.05; done; rm -f {go}; done"
    )
    env = dict(os.environ, SHELL="/bin/sh")
    shell = spawned.start(["bash", "-c", loop], env=env, stdout=subprocess.DEVNULL).pid
    first = poll("the loop's first run", lambda: _run_below(shell, script), 10, 0.01)
    d.tick(T0)
    was = _origin(d, first)
    assert was["kind"] == "shell"
    tty = str(was["tty"])
    assert tty.startswith("/dev/pts/")
    res = run_cli("terminate", "--config", str(config), str(first))
    assert res.returncode in (0, 1), res.stdout + res.stderr
    if runner == "script":  # (a keeper program above the run: its launcher, may-return)
        assert "will come back" in res.stdout, res.stdout + res.stderr
    poll("the stopped run's terminal to be freed", lambda: not os.path.exists(tty), 10, 0.01)
    # Someone else's login takes the freed number: terminals are opened (and held) until
    # it is in use again (by one of them, or by another process on the host).
    held: list[int] = []
    try:
        while not os.path.exists(tty) and len(held) < 128:
            held.extend(os.openpty())
        assert os.path.exists(tty)
        go.touch()
        d.tick(T0 + 15)
        second = poll("the loop's next run", lambda: _run_below(shell, script), 10, 0.05)
        d.tick(T0 + 37)
        now = _origin(d, second)
        assert now["kind"] == "shell" and now["tty"] != tty, now
        # Before: [("rogue-job", "high")], the loop's return read as a person's new job.
        assert _opened(d, second) == [
            ("respawned", "critical"), ("rogue-job", "high"), ("remediation-failed", "critical"),
        ]  # fmt: skip
    finally:
        for fd in held:
            os.close(fd)


def _back(origin: Origin, lineage: list[Proc] | None = None) -> Job:
    """A run back with ``origin``, typed at a login shell's prompt unless ``lineage``."""
    return Job(
        root_pid=50, pids=[50], user="root", cmdline=("python3", "/p/train.py"),
        start_ticks=200, gpu_memory_bytes=None, gpu_uuids=[],
        lineage=PROMPT if lineage is None else lineage, origin=origin,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("back", "was"),
    [
        # A unit (or its timer) whose ExecStart runs `tmux new -d -s train CMD`: each
        # start is a new tmux session id on the unit's server. Before: a person's.
        (
            SystemdOrigin(unit="train.service", in_tmux=True, tmux_socket="/tmp/tmux-0/default",
                          tmux_session="train", tmux_session_id="$1"),
            {"kind": "systemd", "unit": "train.service", "in_tmux": True,
             "tmux_socket": "/tmp/tmux-0/default", "tmux_session": "train",
             "tmux_session_id": "$0"},
        ),
        # A remote cron's `ssh host CMD`: a new logind session each run, no terminal.
        (
            ShellOrigin(session="ssh from 10.0.0.5, session-9.scope", user="root",
                        login_session="session-9.scope"),
            {"kind": "shell", "session": "ssh from 10.0.0.5, session-8.scope",
             "login_session": "session-8.scope"},
        ),
    ],
    ids=["unit-tmux-new-session", "ssh-without-terminal"],
)  # fmt: skip
def test_a_new_session_with_no_terminal_is_no_persons_new_run(
    back: Origin, was: dict[str, object]
) -> None:
    assert back.by_hand
    assert not started_anew(_back(back), [was])


def test_a_persons_other_terminal_is_still_a_new_run() -> None:
    """The rule's other side holds: another terminal, typed at a prompt (also through
    `sudo` or `nohup`); not below a program or a shell running code."""
    back = ShellOrigin(session="terminal /dev/pts/7", user="root", tty="/dev/pts/7")
    was = [{"kind": "shell", "tty": "/dev/pts/4"}]
    assert started_anew(_back(back), was)
    sudo = Proc(49, 48, 150, "S", "sudo", exe="/usr/bin/sudo", cmdline=("sudo", "python3"))
    assert started_anew(_back(back, [PROMPT[0], sudo, PROMPT[1]]), was)
    loop = Proc(49, 48, 150, "S", "bash", exe="/usr/bin/bash", cmdline=("bash", "-c", "x"))
    keeper = Proc(49, 48, 150, "S", "python3", exe="/usr/bin/python3", cmdline=("python3",))
    for above in (loop, keeper):
        assert not started_anew(_back(back, [PROMPT[0], above, PROMPT[1]]), was)
    assert not started_anew(_back(back, []), was)  # no lineage: nothing to tell
