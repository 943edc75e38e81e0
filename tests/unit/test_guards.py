"""Never-signal guards, one by one, on real processes this test started (PID 1 and
kernel threads are only asked about, never signalled: RecordingEffects proves it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rogue_watchdog.actions.effects import Effects, IdentityChangedError, RecordingEffects
from rogue_watchdog.actions.guards import Expected, LiveProc, Refusal, SignalGuard, read_live
from rogue_watchdog.actions.terminate import terminate_tree
from rogue_watchdog.config.enforcement import Protect
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, poll

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def start(spawned: Spawned, *extra: str) -> tuple[int, int]:
    """A sleeping python; returns (pid, start_ticks)."""
    p = spawned.start([*SLEEPER, *extra])
    for _ in range(50):
        live = read_live(p.pid)
        if live is not None and live.cmdline[:1] == (sys.executable,):
            return p.pid, live.start_ticks
        time.sleep(0.02)
    raise AssertionError("sleeper did not start")


def refused(result: Refusal | LiveProc) -> str:
    assert isinstance(result, Refusal), result
    return result.guard


def alive(pid: int, start: int) -> bool:
    live = read_live(pid)
    return live is not None and live.start_ticks == start and live.state != "Z"


def test_pid_1_is_refused_and_never_signalled() -> None:
    fx = RecordingEffects()
    init = read_live(1)
    assert init is not None
    assert refused(SignalGuard().check(1, Expected(1, init.start_ticks))) == "pid-1"
    out = terminate_tree([Expected(1, init.start_ticks)], SignalGuard(), fx, 0.0, kill_wait_s=0)
    assert fx.calls == []
    assert [(p.pid, p.result) for p in out.procs] == [(1, "refused")]
    assert out.outcome == "refused"


def test_kernel_threads_are_refused_and_never_signalled() -> None:
    kthreadd = read_live(2)
    assert kthreadd is not None and kthreadd.kernel_thread
    assert refused(SignalGuard().check(2, Expected(2, kthreadd.start_ticks))) == "kernel-thread"
    kids = [
        int(n)
        for n in os.listdir("/proc")
        if n.isdigit() and (p := read_live(int(n))) and p.ppid == 2
    ]
    assert kids, "no kernel thread below kthreadd"
    kid = read_live(kids[0])
    assert kid is not None
    fx = RecordingEffects()
    out = terminate_tree(
        [Expected(kid.pid, kid.start_ticks)], SignalGuard(), fx, 0.0, kill_wait_s=0
    )
    assert fx.calls == []
    assert out.procs[0].result == "refused" and "kernel thread" in out.procs[0].reason


def test_self_and_ancestors_are_refused() -> None:
    me = read_live(os.getpid())
    parent = read_live(os.getppid())
    assert me is not None and parent is not None
    assert refused(SignalGuard().check(os.getpid(), Expected(me.pid, me.start_ticks))) == "self"
    # Run from a detached shell, the test's parent is init, which has its own refusal.
    why = "pid-1" if parent.pid == 1 else "ancestor"
    assert refused(SignalGuard().check(parent.pid, Expected(parent.pid, parent.start_ticks))) == why
    fx = RecordingEffects()
    terminate_tree(
        [Expected(parent.pid, parent.start_ticks)], SignalGuard(), fx, 0.0, kill_wait_s=0
    )
    assert fx.calls == []


def test_invisible_pid_is_refused() -> None:
    with open("/proc/sys/kernel/pid_max") as fh:
        pid = int(fh.read()) + 1  # can never exist
    assert refused(SignalGuard().check(pid, Expected(pid, 1))) == "invisible"


def test_zombie_is_refused_and_its_parent_reported(spawned: Spawned) -> None:
    p = spawned.start([sys.executable, "-c", "pass"])
    for _ in range(100):
        live = read_live(p.pid)
        if live is not None and live.state == "Z":
            break
        time.sleep(0.05)
    res = SignalGuard().check(p.pid, Expected(p.pid, live.start_ticks) if live else None)
    assert isinstance(res, Refusal) and res.guard == "zombie"
    assert res.report_pid == os.getpid()


def test_sanctioned_member_is_not_signalled_with_real_effects(spawned: Spawned) -> None:
    pid, start_ticks = start(spawned)
    guard = SignalGuard(sanctioned_pids={pid})
    assert refused(guard.check(pid, Expected(pid, start_ticks))) == "sanctioned"
    out = terminate_tree([Expected(pid, start_ticks)], guard, Effects(), 0.2)
    assert out.procs[0].result == "refused" and out.procs[0].signals == []
    assert alive(pid, start_ticks)


def test_protect_list_wins_with_real_effects(spawned: Spawned) -> None:
    pid, start_ticks = start(spawned, "keep-me-rwtest")
    guard = SignalGuard(protect=(Protect(cmdline="*keep-me-rwtest*", text="*keep-me-rwtest*"),))
    res = guard.check(pid, Expected(pid, start_ticks))
    assert isinstance(res, Refusal) and res.guard == "protected"
    assert "'*keep-me-rwtest*'" in res.reason
    out = terminate_tree([Expected(pid, start_ticks)], guard, Effects(), 0.2)
    assert out.outcome == "refused"
    assert alive(pid, start_ticks)
    # exe and user entries
    me = read_live(pid)
    assert me is not None
    assert refused(SignalGuard(protect=(Protect(exe=me.exe),)).check(pid)) == "protected"
    assert refused(SignalGuard(protect=(Protect(user=me.user),)).check(pid)) == "protected"
    assert isinstance(SignalGuard(protect=(Protect(user="no-such-user-rw"),)).check(pid), LiveProc)


def test_reused_pid_is_not_hit(spawned: Spawned) -> None:
    """The decision recorded a start time the live PID no longer has: a different process."""
    pid, start_ticks = start(spawned)
    stale = Expected(pid, start_ticks - 1, None)
    res = SignalGuard().check(pid, stale)
    assert isinstance(res, Refusal) and res.guard == "identity"
    assert f"start time {start_ticks}, not {start_ticks - 1}" in res.reason
    out = terminate_tree([stale], SignalGuard(), Effects(), 0.2)
    assert out.procs[0].signals == [] and out.procs[0].result == "reused"
    assert alive(pid, start_ticks)


def test_exec_into_another_command_is_not_hit(spawned: Spawned) -> None:
    pid, start_ticks = start(spawned)
    decided_on = Expected(pid, start_ticks, ("/usr/bin/python3", "train_other.py"))
    assert refused(SignalGuard().check(pid, decided_on)) == "identity"
    assert alive(pid, start_ticks)


def test_a_plain_rogue_passes_and_dies(spawned: Spawned) -> None:
    pid, start_ticks = start(spawned)
    res = SignalGuard().check(pid, Expected(pid, start_ticks))
    assert isinstance(res, LiveProc) and res.pid == pid
    out = terminate_tree([Expected(pid, start_ticks)], SignalGuard(), Effects(), 5.0)
    assert [(p.pid, p.signals, p.result) for p in out.procs] == [
        (pid, ["SIGSTOP", "SIGTERM", "SIGCONT"], "exited")
    ]
    assert out.outcome == "ok"
    assert not alive(pid, start_ticks)


def test_retitled_process_without_trailing_nul_is_protected(
    spawned: Spawned, tmp_path: Path
) -> None:
    """nginx/postgres-style retitle: `/proc/PID/cmdline` has no trailing NUL. The guards
    read it with the scan's reader and the `protect` glob matches: no signal."""
    exe = tmp_path / "retitle"
    src = Path(__file__).with_name("retitle.c")
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    title = "postgres: checkpointer of protected-db main cluster"
    p = spawned.start(
        ["x"], executable=str(exe), env={"RETITLE": title, "PAD": "p" * 200},
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    raw = Path(f"/proc/{p.pid}/cmdline").read_bytes()
    # The case: no NUL anywhere, not even at the end (the title padded with spaces).
    assert b"\0" not in raw and raw.rstrip(b" ") == title.encode() and len(raw) > 200
    live = read_live(p.pid)
    assert live is not None and live.cmdline == (raw.decode(),)
    table = ProcessTable()
    table.refresh()
    scanned = table.get(p.pid)
    assert scanned is not None and scanned.cmdline == live.cmdline
    guard = SignalGuard(protect=(Protect(cmdline="postgres: *", text="postgres: *"),))
    exp = Expected(p.pid, live.start_ticks, scanned.cmdline)
    assert refused(guard.check(p.pid, exp)) == "protected"
    out = terminate_tree([exp], guard, Effects(), 0.2, kill_wait_s=0)
    assert [(r.pid, r.signals, r.result) for r in out.procs] == [(p.pid, [], "refused")]
    assert out.outcome == "refused"
    assert alive(p.pid, live.start_ticks)


def test_signal_is_pinned_to_the_identity_through_a_pidfd(spawned: Spawned) -> None:
    """The PID now carries another start time (reused between check and kill): the pidfd
    path sends nothing; with the identity decided on, the very process is signalled."""
    pid, start_ticks = start(spawned)
    with pytest.raises(IdentityChangedError) as info:
        Effects().send_signal(pid, signal.SIGTERM, start_ticks + 1)
    assert info.value.strerror == (
        f"PID {pid} now has start time {start_ticks}, not {start_ticks + 1}: "
        "a different process (PID reused)"
    )
    assert alive(pid, start_ticks)
    Effects().send_signal(pid, signal.SIGTERM, start_ticks)
    poll("the pinned SIGTERM", lambda: not alive(pid, start_ticks), 10, 0.02)


def test_pid_2_in_a_pid_namespace_is_not_a_kernel_thread(tmp_path: Path) -> None:
    """Inside `unshare --pid`, PID 2 is the namespace's second process, not kthreadd:
    kernel thread means PF_KTHREAD, never `ppid == 2` or `pid == 2`."""
    script = (
        "import subprocess, sys\n"
        "from rogue_watchdog.actions.guards import SignalGuard, Refusal, read_live\n"
        "kid = subprocess.Popen(['sleep', '30'])\n"  # PID 2 in the new namespace
        "import time\n"
        "for _ in range(200):\n"
        "    two = read_live(2)\n"
        "    if two.cmdline == ('sleep', '30'):\n"
        "        break\n"
        "    time.sleep(0.02)\n"
        "print(kid.pid, two.kernel_thread, two.cmdline)\n"
        "g = SignalGuard(self_pid=1).check(2)\n"
        "print(g.guard if isinstance(g, Refusal) else 'allowed')\n"
        "kid.kill()\n"
    )
    res = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", script],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2],
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["2 False ('sleep', '30')", "allowed"]


def test_host_proc_seen_from_a_child_pid_namespace_refuses_every_signal() -> None:
    """`unshare --pid --fork` without --mount-proc: /proc shows host PIDs, but kill(2)
    here takes numbers of our own namespace. Nothing may be signalled."""
    script = (
        "import os, sys\n"
        "from rogue_watchdog.actions.guards import SignalGuard, Refusal\n"
        "g = SignalGuard(self_pid=os.getpid()).check(int(sys.argv[1]))\n"  # a host PID
        "print(g.guard if isinstance(g, Refusal) else 'allowed')\n"
    )
    res = subprocess.run(
        ["unshare", "--pid", "--fork", sys.executable, "-c", script, str(os.getpid())],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2],
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout == "pid-namespace\n"
