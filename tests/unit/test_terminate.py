"""SIGTERM, grace, SIGKILL on real process trees this test started."""

from __future__ import annotations

import signal
import sys
import time

from tests.conftest import Spawned
from watchdog.actions.effects import Effects, RecordingEffects
from watchdog.actions.guards import Expected, Guard, read_live
from watchdog.actions.terminate import plan_tree, terminate_tree

STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
PARENT = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def identity(pid: int) -> Expected:
    for _ in range(100):
        live = read_live(pid)
        if live is not None and live.cmdline[:1] == (sys.executable,):
            return Expected(pid, live.start_ticks, live.cmdline)
        time.sleep(0.02)
    raise AssertionError(f"PID {pid} did not start")


def gone(exp: Expected) -> bool:
    live = read_live(exp.pid)
    return live is None or live.start_ticks != exp.start_ticks or live.state == "Z"


def test_grace_then_sigkill_for_a_process_ignoring_sigterm(spawned: Spawned) -> None:
    import subprocess

    p = spawned.start([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    exp = identity(p.pid)
    out = terminate_tree([exp], Guard(), Effects(), grace_s=1.0)
    assert [(x.pid, x.signals, x.result) for x in out.procs] == [
        (p.pid, ["SIGTERM", "SIGKILL"], "killed")
    ]
    assert out.outcome == "ok"
    assert p.wait(timeout=5) == -signal.SIGKILL


def test_whole_tree_leaves_first(spawned: Spawned) -> None:
    import subprocess

    p = spawned.start([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    assert p.stdout is not None
    child = int(p.stdout.readline())
    root = identity(p.pid)
    kid = identity(child)
    plan = plan_tree([root], Guard())
    assert [(e.pid, depth) for e, depth in plan] == [(child, 1), (p.pid, 0)]
    out = terminate_tree([root], Guard(), Effects(), grace_s=5.0)
    assert [(x.pid, x.signals, x.result) for x in out.procs] == [
        (child, ["SIGTERM"], "exited"),
        (p.pid, ["SIGTERM"], "exited"),
    ]
    assert gone(root) and gone(kid)


def test_dry_run_sends_nothing(spawned: Spawned) -> None:
    p = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    exp = identity(p.pid)
    fx = RecordingEffects()
    out = terminate_tree([exp], Guard(), fx, 1.0, dry_run=True)
    assert fx.calls == []
    assert out.outcome == "dry-run"
    assert [(x.pid, x.result) for x in out.procs] == [(p.pid, "would-signal")]
    assert not gone(exp)


def test_recorded_signals_are_term_then_kill(spawned: Spawned) -> None:
    """With recording effects nothing dies, so the SIGKILL after grace is recorded too."""
    p = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    exp = identity(p.pid)
    fx = RecordingEffects()
    out = terminate_tree([exp], Guard(), fx, 0.0, kill_wait_s=0.0)
    assert fx.signals() == [(p.pid, signal.SIGTERM), (p.pid, signal.SIGKILL)]
    assert out.procs[0].result == "survived" and out.outcome == "partial"


def test_member_that_already_exited_is_gone_not_signalled(spawned: Spawned) -> None:
    p = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    exp = identity(p.pid)
    p.kill()
    p.wait()
    fx = RecordingEffects()
    out = terminate_tree([exp], Guard(), fx, 0.0, kill_wait_s=0.0)
    assert fx.calls == []
    assert [(x.pid, x.result) for x in out.procs] == [(p.pid, "gone")]
    assert out.outcome == "ok"
