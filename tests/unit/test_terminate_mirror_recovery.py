"""A relay a dead daemon's freeze made stop is continued by the run that takes over.

util-linux ``script`` (and ``sudo``) stop themselves when their child stops
(tests/unit/test_terminate_stop_mirror.py). A terminate watches them before its freeze
and continues them afterwards; a daemon killed between the freeze and that release left
them stopped (``T``) for good: the watch list lived only in the dead process. It is now
a ``watch`` step of the action's journal, written before the freeze, and the run taking
the action over (finishing it, or only continuing what it stopped) makes the same
release: SIGCONT only to a recorded process whose identity (PID + start time) still
holds, which is stopped now and was not before the freeze, recorded as a ``release``
step.

The kill is the fault point's hook raising, as in tests/unit/test_action_recovery.py:
nothing of the dead run's own code runs after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rogue_watchdog import faults
from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.guards import Expected, SignalGuard, read_live
from rogue_watchdog.actions.recovery import terminate_resume
from rogue_watchdog.actions.runner import InlineRunner
from rogue_watchdog.actions.terminate import Resume, TerminateRun, run_to_end
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.state import ActionJournal
from tests.conftest import Spawned, need_program, poll
from tests.unit.test_terminate_stop_mirror import (
    TRAIN,
    MirrorSettles,
    _job,
    _nobody_dir,
    _state,
    script_env,
)


class Killed(BaseException):
    """The daemon died here (not an Exception: nothing in the daemon catches it)."""


class Counting(Effects):
    """Real signals; every attempt counted per (PID, signal), also one refused."""

    def __init__(self) -> None:
        super().__init__()
        self.tried: Counter[tuple[int, int]] = Counter()

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        self.tried[(pid, sig)] += 1
        super().send_signal(pid, sig, start_ticks)


@pytest.fixture(autouse=True)
def no_hook() -> object:
    yield
    faults.set_hook(None)


def _observer(tmp_path: Path, fx: Effects) -> Daemon:
    """A daemon over ``tmp_path/state`` that only observes (it takes interrupted actions
    over; it starts none of its own)."""
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
        "enforcement:\n  mode: observe\n  grace_s: 1\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db, fx, runner=InlineRunner())
    d.sources.append(enf)
    d.enforcers.append(enf)
    return d


def _under_script(spawned: Spawned, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Expected]:
    """``script -qfc RUN.sh /dev/null``, RUN.sh exec'ing the trainer: script's command
    line does not carry the job's, so it is no part of the tree, only above it."""
    need_program("script")
    (tmp_path / "train.py").write_text(TRAIN)
    run = tmp_path / "run.sh"
    run.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'train.py'} 61\n")
    run.chmod(0o755)
    top = spawned.start(
        ["script", "-qfc", str(run), "/dev/null"], cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=script_env(),
    )  # fmt: skip
    return top, _job(top.pid)


def _end(job: Expected) -> None:
    """Kill the trainer (script put it in a session of its own: the teardown's group
    kill of script's group does not reach it), pinned to its identity."""
    live = read_live(job.pid)
    if live is not None and live.start_ticks == job.start_ticks:
        with contextlib.suppress(OSError):
            Effects().send_signal(job.pid, int(signal.SIGKILL), job.start_ticks)


def _killed_after_the_freeze(d: Daemon, job: Expected, top: int) -> ActionJournal:
    """A terminate of ``job`` journaled in ``d``'s database and killed right after its
    freeze was sent (its mark not written), begun by a process that is gone."""
    journal = ActionJournal.begin(
        d.db, "cli:alice", "terminate", f"PID {job.pid}",
        {"root": [job.pid, job.start_ticks], "cmdline": list(job.cmdline or ()),
         "origin": {"kind": "orphan"}, "members": [[job.pid, job.start_ticks,
         list(job.cmdline or ())]], "grace_s": 1},
    )  # fmt: skip
    effects = MirrorSettles(top)
    run = TerminateRun([job], SignalGuard(), effects, 1.0, journal=journal)

    def hook(name: str) -> None:
        if name == "terminate:freeze:sent":
            raise Killed(name)

    faults.set_hook(hook)
    with pytest.raises(Killed):
        run_to_end(run)
    faults.set_hook(None)
    assert effects.mirrored, "script did not stop itself: the case was not set up"
    d.db.conn.execute(
        "UPDATE actions SET owner_json=json_set(owner_json, '$.pid', 999999999, '$.session', 'x')"
    )
    return journal


def _releases(d: Daemon, action_id: int) -> list[tuple[list[int], str, list[list[int]]]]:
    """Each ``release`` step: the PIDs it is for, its status, the identities reached."""
    return [
        ([p[0] for p in s.detail["procs"]], s.status, (s.result or {}).get("sent", []))
        for s in d.db.action_steps(action_id)
        if s.op == "signal" and s.detail.get("wave") == "release"
    ]


def _under_sudo(spawned: Spawned) -> tuple[subprocess.Popen[bytes], Expected, Path]:
    """``sudo -n -u nobody RUN.sh`` (no tty: sudo waits for its child and suspends
    itself when the child stops), RUN.sh exec'ing the trainer; and the directory to
    remove after."""
    where = _nobody_dir()
    top = spawned.start(["sudo", "-n", "-u", "nobody", str(where / "run.sh")])
    return top, _job(top.pid), where


@pytest.mark.parametrize("wrapper", ["script", "sudo"])
def test_a_relay_left_stopped_by_a_dead_daemon_is_continued_by_the_next(
    spawned: Spawned, tmp_path: Path, wrapper: str
) -> None:
    """The abandon path: a person's terminate (never gone on with) killed after its
    freeze; the daemon takes it over, continues the job and the relay above it."""
    where: Path | None = None
    if wrapper == "script":
        top, job = _under_script(spawned, tmp_path)
    else:
        top, job, where = _under_sudo(spawned)
    try:
        d = _observer(tmp_path, Counting())
        journal = _killed_after_the_freeze(d, job, top.pid)
        assert (_state(top.pid), _state(job.pid)) == ("T", "T")  # the dead daemon's leftovers
        [watch] = [s for s in d.db.action_steps(journal.action_id) if s.op == "watch"]
        assert [a[0] for a in watch.detail["above"]][:1] == [top.pid]
        fx = Counting()
        again = _observer(tmp_path, fx)

        again.tick(1_000_000.0)

        [row] = again.db.actions()
        assert (row.state, row.outcome) == ("interrupted", "interrupted"), row
        assert _state(top.pid) not in ("T", None), row.details
        assert _state(job.pid) not in ("T", None)
        start = read_live(top.pid)
        assert start is not None
        assert _releases(again, row.id) == [([top.pid], "done", [[top.pid, start.start_ticks]])]
        assert [c["pid"] for c in row.details["continued"]] == [top.pid], row.details
        # Nothing but the job and the relay its freeze stopped was signalled.
        assert {pid for pid, _sig in fx.tried} == {job.pid, top.pid}, fx.tried
        assert fx.tried[(top.pid, signal.SIGCONT)] >= 1
        assert not [k for k in fx.tried if k[0] == top.pid and k[1] != signal.SIGCONT]
    finally:
        _end(job)
        if where is not None:
            shutil.rmtree(where, ignore_errors=True)


def test_a_terminate_taken_over_and_finished_continues_the_script_too(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The path that goes on: the run taking over (as the enforcer builds it) sends the
    SIGTERM the dead one never did, and releases the script before the job goes on."""
    top, job = _under_script(spawned, tmp_path)
    try:
        d = _observer(tmp_path, Counting())
        journal = _killed_after_the_freeze(d, job, top.pid)
        assert _state(top.pid) == "T"
        steps = d.db.action_steps(journal.action_id)
        resume = terminate_resume(steps, True, "/proc")
        fx = Counting()
        run = TerminateRun(
            [job], SignalGuard(), fx, 5.0, journal=journal, resume=resume, poll_s=0.05
        )

        out = run_to_end(run)

        assert _state(top.pid) != "T", out.to_json()
        assert read_live(job.pid) is None or _state(job.pid) == "Z", out.to_json()
        assert [c["pid"] for c in out.continued] == [top.pid], out.to_json()
        assert [r[0] for r in _releases(d, journal.action_id)][:1] == [[top.pid]]
        assert {pid for pid, _sig in fx.tried} == {job.pid, top.pid}, fx.tried
    finally:
        _end(job)


def _kids(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize("recorded", ["same", "reused", "stopped-before", "unrelated"])
def test_only_the_recorded_identity_stopped_by_the_freeze_is_continued(
    spawned: Spawned, tmp_path: Path, recorded: str
) -> None:
    """The watch list names the process above the job (a ``sh`` this test stops itself,
    as a relay mirrors its child's stop) as it is now: its PID with its very start time
    (``same``: continued), with another start time (the PID reused since: never
    signalled), or as already stopped before the freeze (not the freeze's doing: left as
    it is). ``unrelated``: an entry naming a stopped ``sleep`` that is not the job's
    parent (a damaged or forged journal) is never continued; before, any stopped
    process so named was."""
    (tmp_path / "train.py").write_text(TRAIN)
    parent = spawned.start(["/bin/sh", "-c", f"{sys.executable} {tmp_path / 'train.py'} 61; :"])
    stray = spawned.start(["sleep", "600"])
    (job_pid,) = poll("the job", lambda: _kids(parent.pid), 10)
    other = stray if recorded == "unrelated" else parent
    for stopped in {parent.pid, stray.pid}:
        os.kill(stopped, signal.SIGSTOP)
        poll("stopped", lambda p=stopped: _state(p) == "T", 10, 0.02)
    job_live = poll("the job", lambda: read_live(job_pid), 10)
    other_live = poll("the recorded process", lambda: read_live(other.pid), 10)
    job = Expected(job_live.pid, job_live.start_ticks, job_live.cmdline)
    d = _observer(tmp_path, Counting())
    journal = ActionJournal.begin(d.db, "cli:alice", "terminate", f"PID {job.pid}", {})
    start = other_live.start_ticks + (1 if recorded == "reused" else 0)
    before = "T" if recorded == "stopped-before" else "S"
    step = journal.intent(
        "watch", {"above": [[other.pid, start, ["script"], job.pid, job.start_ticks, before]]}
    )
    journal.done(step)
    step = journal.intent(
        "signal", {"wave": "freeze", "signal": "SIGSTOP",
                   "procs": [[job.pid, job.start_ticks, list(job.cmdline or ())]]},
    )  # fmt: skip
    os.kill(job.pid, signal.SIGSTOP)
    journal.done(step, {"sent": [[job.pid, job.start_ticks]]})
    resume = terminate_resume(d.db.action_steps(journal.action_id), False, "/proc")
    assert isinstance(resume, Resume) and len(resume.mirrors) == 1
    fx = Counting()
    run = TerminateRun([job], SignalGuard(), fx, 1.0, journal=journal, resume=resume)

    out = run_to_end(run)

    assert _state(job.pid) != "T", out.to_json()  # the job itself is thawed either way
    if recorded == "same":
        assert _state(other.pid) != "T"
        assert [r[:2] for r in _releases(d, journal.action_id)] == [([other.pid], "done")]
        assert fx.tried[(other.pid, signal.SIGCONT)] == 1
    else:
        assert _state(other.pid) == "T", out.to_json()
        assert _releases(d, journal.action_id) == []
        assert not [k for k in fx.tried if k[0] == other.pid], fx.tried
        assert out.continued == []
        os.kill(parent.pid, signal.SIGCONT)  # the test's own stop, ended


def test_a_journal_without_a_watch_list_is_taken_over_as_before(
    spawned: Spawned, tmp_path: Path
) -> None:
    """A row written before the list was journaled: no relay is known, none is sent
    anything, and the job is thawed as it always was."""
    (tmp_path / "train.py").write_text(TRAIN)
    p = spawned.start([sys.executable, str(tmp_path / "train.py"), "61"])
    live = poll("up", lambda: read_live(p.pid), 10)
    job = Expected(live.pid, live.start_ticks, live.cmdline)
    d = _observer(tmp_path, Counting())
    journal = ActionJournal.begin(d.db, "cli:alice", "terminate", f"PID {job.pid}", {})
    step = journal.intent(
        "signal", {"wave": "freeze", "signal": "SIGSTOP",
                   "procs": [[job.pid, job.start_ticks, list(job.cmdline or ())]]},
    )  # fmt: skip
    os.kill(job.pid, signal.SIGSTOP)
    journal.done(step, {"sent": [[job.pid, job.start_ticks]]})
    resume = terminate_resume(d.db.action_steps(journal.action_id), False, "/proc")
    assert resume.mirrors == []
    fx = Counting()

    out = run_to_end(TerminateRun([job], SignalGuard(), fx, 1.0, journal=journal, resume=resume))

    assert out.outcome == "interrupted" and _state(job.pid) != "T"
    assert set(fx.tried) == {(job.pid, signal.SIGCONT)}
