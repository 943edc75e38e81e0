"""Freeze, SIGTERM, grace, SIGKILL, verify on real process trees this test started."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rogue_watchdog.actions.effects import Effects, RecordingEffects
from rogue_watchdog.actions.guards import Expected, SignalGuard, read_live
from rogue_watchdog.actions.terminate import plan_tree, terminate_tree
from tests.conftest import Spawned, poll

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
    out = terminate_tree([exp], SignalGuard(), Effects(), grace_s=1.0)
    assert [(x.pid, x.signals, x.result) for x in out.procs] == [
        (p.pid, ["SIGSTOP", "SIGTERM", "SIGCONT", "SIGSTOP", "SIGKILL"], "killed")
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
    plan = plan_tree([root], SignalGuard())
    assert [(e.pid, depth) for e, depth in plan] == [(child, 1), (p.pid, 0)]
    out = terminate_tree([root], SignalGuard(), Effects(), grace_s=5.0)
    assert [(x.pid, x.signals, x.result) for x in out.procs] == [
        (child, ["SIGSTOP", "SIGTERM", "SIGCONT"], "exited"),
        (p.pid, ["SIGSTOP", "SIGTERM", "SIGCONT"], "exited"),
    ]
    assert gone(root) and gone(kid)


def test_dry_run_sends_nothing(spawned: Spawned) -> None:
    p = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    exp = identity(p.pid)
    fx = RecordingEffects()
    out = terminate_tree([exp], SignalGuard(), fx, 1.0, dry_run=True)
    assert fx.calls == []
    assert out.outcome == "dry-run"
    assert [(x.pid, x.result) for x in out.procs] == [(p.pid, "would-signal")]
    assert not gone(exp)


def test_recorded_signals_are_term_then_kill(spawned: Spawned) -> None:
    """With recording effects nothing dies, so the SIGKILL after grace is recorded too."""
    p = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    exp = identity(p.pid)
    fx = RecordingEffects()
    out = terminate_tree([exp], SignalGuard(), fx, 0.0, kill_wait_s=0.0)
    # Frozen, TERM and continued; frozen again and KILLed; continued since it "survived".
    sent = [signal.SIGSTOP, signal.SIGTERM, signal.SIGCONT, signal.SIGSTOP, signal.SIGKILL]
    assert fx.signals() == [(p.pid, sig) for sig in [*sent, signal.SIGCONT]]
    assert out.procs[0].result == "survived" and out.outcome == "partial"


def test_member_that_already_exited_is_gone_not_signalled(spawned: Spawned) -> None:
    p = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    exp = identity(p.pid)
    p.kill()
    p.wait()
    fx = RecordingEffects()
    out = terminate_tree([exp], SignalGuard(), fx, 0.0, kill_wait_s=0.0)
    assert fx.calls == []
    assert [(x.pid, x.result) for x in out.procs] == [(p.pid, "gone")]
    assert out.outcome == "ok"


def _session(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    out = []
    for name in os.listdir("/proc"):
        live = read_live(int(name)) if name.isdigit() else None
        if live is not None and live.sid == sid and live.state != "Z":
            out.append(live.pid)
    return out


WORKER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_DFL); time.sleep(60)"
LAUNCHER = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # a torchrun-like agent
    f"work = [sys.executable, '-c', {WORKER!r}]\n"
    "w = subprocess.Popen(work)\n"
    "print(w.pid, flush=True)\n"
    "while True:\n"
    "    if w.poll() is not None:\n"
    "        w = subprocess.Popen(work)\n"  # restarts its worker at once
    "    time.sleep(0.05)\n"
)


def test_launcher_ignoring_sigterm_that_respawns_its_worker_is_stopped_whole(
    spawned: Spawned,
) -> None:
    """The worker dies on SIGTERM, the launcher ignores it and starts a new worker during
    the grace period: the new worker is found and killed too, nothing is left, and only
    then is the outcome `ok`."""
    p = spawned.start([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE)
    assert p.stdout is not None
    worker = identity(int(p.stdout.readline()))
    launcher = identity(p.pid)

    def handles_sigterm() -> bool:  # the worker has undone the SIG_IGN it inherited
        status = Path(f"/proc/{worker.pid}/status").read_text()
        ignored = int(
            next(x for x in status.splitlines() if x.startswith("SigIgn:")).split()[1], 16
        )
        return not ignored & (1 << (signal.SIGTERM - 1))

    poll("the worker to take SIGTERM", handles_sigterm, 10, 0.02)
    out = terminate_tree([launcher, worker], SignalGuard(), Effects(), grace_s=1.0)
    by_pid = {x.pid: (x.signals, x.result) for x in out.procs}
    assert by_pid[worker.pid] == (["SIGSTOP", "SIGTERM", "SIGCONT"], "exited")
    assert by_pid[launcher.pid] == (
        ["SIGSTOP", "SIGTERM", "SIGCONT", "SIGSTOP", "SIGKILL"],
        "killed",
    )
    respawned = [pid for pid in by_pid if pid not in (worker.pid, launcher.pid)]
    assert len(respawned) == 1  # the worker started during the grace period
    assert by_pid[respawned[0]] == (["SIGSTOP", "SIGKILL"], "killed")
    assert out.outcome == "ok"
    assert p.wait(timeout=5) == -signal.SIGKILL
    assert _session(p.pid) == []


def test_wrapper_loop_is_stopped_with_its_job(spawned: Spawned, tmp_path: Path) -> None:
    """`bash -c 'while :; do python3 train_job.py; sleep 1; done'`: the job is the python,
    the loop would bring it back in 1 s; the bash is stopped with it."""
    (tmp_path / "train_job.py").write_text("import time\ntime.sleep(60)\n")
    loop = "while :; do python3 train_job.py; sleep 1; done"
    p = spawned.start(["bash", "-c", loop], cwd=tmp_path)

    def python() -> int | None:
        kids = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        for kid in kids:
            live = read_live(int(kid))
            # argv[0] may be a full path (a pyenv shim re-executes python3)
            if live is not None and live.cmdline[1:] == ("train_job.py",):
                return int(kid)
        return None

    job = poll("the python below the loop", python, 10, 0.02)
    root = identity_of(job)
    bash = identity_of(p.pid)
    assert [(e.pid, d) for e, d in plan_tree([root], SignalGuard())] == [(job, 0), (p.pid, -1)]
    out = terminate_tree([root], SignalGuard(), Effects(), grace_s=5.0)
    assert [(x.pid, x.signals, x.result) for x in out.procs] == [
        (job, ["SIGSTOP", "SIGTERM", "SIGCONT"], "exited"),
        (bash.pid, ["SIGSTOP", "SIGTERM", "SIGCONT"], "exited"),
    ]
    assert out.outcome == "ok"
    assert p.wait(timeout=5) == -signal.SIGTERM  # the loop is gone: nothing restarts it
    assert _session(p.pid) == []


def identity_of(pid: int) -> Expected:
    live = read_live(pid)
    assert live is not None
    return Expected(pid, live.start_ticks, live.cmdline)


def test_recheck_30s_after_terminate_opens_remediation_failed(
    spawned: Spawned, tmp_path: Path
) -> None:
    """A process of the terminated tree still runs 30 s later, or the same command is back
    under another origin (a worker re-parented to PID 1): `remediation-failed`."""
    from datetime import UTC, datetime

    from rogue_watchdog.actions.enforcer import Enforcer
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.model import Job, NvmlStatus, OrphanOrigin, ScanResult
    from rogue_watchdog.state import StateDB

    left = identity_of(spawned.start([sys.executable, "-c", "import time; time.sleep(60)"]).pid)
    cfg = parse_config(f"daemon: {{state_dir: '{tmp_path}/state'}}\n", "t.yaml")
    db = StateDB(str(tmp_path / "state"))
    t = 4_000_000.0
    cmd = ["/usr/bin/python3", "/p/train_job.py"]
    aid = db.record_action(
        "daemon", "terminate", "PID 40 (2 process(es))", "ok",
        {"root": [40, 100], "procs": [
            {"pid": 40, "start_ticks": 100, "cmdline": cmd, "signals": ["SIGKILL"]},
            {"pid": left.pid, "start_ticks": left.start_ticks, "cmdline": list(left.cmdline or ()),
             "signals": ["SIGSTOP", "SIGTERM", "SIGCONT"]},
        ]},
        t,
    )  # fmt: skip
    back = Job(
        root_pid=41, pids=[41], user="root", cmdline=tuple(cmd), start_ticks=left.start_ticks + 1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=OrphanOrigin(),
    )  # fmt: skip
    now = datetime.now(UTC)
    empty = ScanResult("h", now, 0.0, NvmlStatus(True), jobs=[])
    assert Enforcer(cfg, db, clock=lambda: t + 29).findings(t + 29, empty) == []
    [f] = Enforcer(cfg, db, clock=lambda: t + 30).findings(t + 30, empty)
    assert (f.kind, f.severity, f.root_pid) == ("remediation-failed", "critical", None)
    assert f.details == {
        "fingerprint": f"terminate-{aid}", "actions": [aid],
        "left": [{"pid": left.pid, "start_ticks": left.start_ticks}], "back": [],
    }  # fmt: skip
    assert f"1 process(es) of its tree still run 30 s or more after it: PID {left.pid} `" in (
        f.message
    )
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    assert Enforcer(cfg, db, clock=lambda: t + 31).findings(t + 31, empty) == []
    # The same command back as something that is not training (a notebook kernel whose
    # training run was stopped, restarted): not a failed remediation (issue 35).
    kernel = dataclasses.replace(back, workload="interactive")
    notebook = ScanResult("h", now, 0.0, NvmlStatus(True), jobs=[kernel])
    assert Enforcer(cfg, db, clock=lambda: t + 35).findings(t + 35, notebook) == []
    result = ScanResult("h", now, 0.0, NvmlStatus(True), jobs=[back])
    [f] = Enforcer(cfg, db, clock=lambda: t + 35).findings(t + 35, result)
    assert f.details["back"] == [41] and f.root_pid == 41
    assert f.message.endswith(
        "`/usr/bin/python3 /p/train_job.py` is back as PID 41, spawned by " + describe_orphan()
    )
    assert Enforcer(cfg, db, clock=lambda: t + 3700).findings(t + 3700, result) == []


def describe_orphan() -> str:
    from rogue_watchdog.model import OrphanOrigin

    return OrphanOrigin().describe()


def test_leftovers_of_a_gone_session_that_run_something_else_are_left_alone(
    spawned: Spawned, tmp_path: Path
) -> None:
    """A login that started `python3 train_x.py &` and `sleep 600 &` and ended: both
    stay in its session, whose leader is gone. Only the job's own command is stopped."""
    (tmp_path / "train_x.py").write_text("import time\ntime.sleep(60)\n")
    marker = tmp_path / "pids"
    p = spawned.start(
        ["sh", "-c", f"{sys.executable} train_x.py & t=$!; sleep 600 & echo $t $! > {marker}"],
        cwd=tmp_path,
    )
    p.wait(timeout=10)  # the session leader is gone
    train_pid, sleep_pid = (int(x) for x in poll("the pids", marker.read_text, 10).split())
    train = poll(
        "the trainer's exec",
        lambda: (t := identity_of(train_pid)).cmdline[-1:] == ("train_x.py",) and t,
        10,
        0.02,
    )
    other = poll(
        "the sleep's exec",
        lambda: (t := identity_of(sleep_pid)).cmdline[:1] == ("sleep",) and t,
        10,
        0.02,
    )
    assert read_live(sleep_pid).sid == read_live(train_pid).sid == p.pid  # type: ignore[union-attr]
    out = terminate_tree([train], SignalGuard(), Effects(), grace_s=5.0)
    assert [(x.pid, x.result) for x in out.procs] == [(train_pid, "exited")]
    assert out.outcome == "ok"
    assert not gone(other)


# A launcher that starts the trainer and a helper of its own beside it.
LAUNCHER_WITH_HELPER = (
    "import subprocess, sys, time\n"
    "t = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "h = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(61)'])\n"
    "print(t.pid, h.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_launcher_is_stopped_with_its_run_only_when_it_runs_nothing_else(
    spawned: Spawned,
) -> None:
    """Issue 31, case 7: a rogue service named as the run's launcher is frozen first and
    stopped with it; one that also runs a helper the finding does not name is left."""
    p = spawned.start([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    assert p.stdout is not None
    child = identity(int(p.stdout.readline()))
    launcher = identity(p.pid)
    out = terminate_tree([child], SignalGuard(), Effects(), grace_s=2.0, launchers=[launcher])
    assert out.outcome == "ok" and not out.left
    assert [(x.pid, x.signals[:2]) for x in out.procs] == [
        (child.pid, ["SIGSTOP", "SIGTERM"]),
        (launcher.pid, ["SIGSTOP", "SIGTERM"]),
    ]
    assert gone(child) and poll("launcher exit", lambda: p.poll() is not None, 5)

    q = spawned.start([sys.executable, "-c", LAUNCHER_WITH_HELPER], stdout=subprocess.PIPE)
    assert q.stdout is not None
    run_pid, helper_pid = map(int, q.stdout.readline().split())
    run, helper, svc = identity(run_pid), identity(helper_pid), identity(q.pid)
    out = terminate_tree([run], SignalGuard(), Effects(), grace_s=2.0, launchers=[svc])
    assert [x.pid for x in out.procs] == [run.pid]
    assert [(x["pid"], x["reason"].split(" (")[0]) for x in out.left] == [
        (svc.pid, "it also runs processes the finding does not name")
    ]
    assert not gone(svc) and not gone(helper)
