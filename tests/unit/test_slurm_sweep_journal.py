"""Issue 32: the Slurm sweep's signals are written before they are sent, like every
other action's (``slurm-sweep`` rows with ``signal`` steps); a sweep that cannot write
its record signals nothing and leaves the node drained; a sweep killed half-way is found
by the daemon, what it froze is continued, and nothing is signalled again."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Spawned, poll
from tests.sim.slurm import SlurmMachine

__all__ = ["sim"]  # the fixture, shared
from rogue_watchdog import faults
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.guards import SignalGuard, read_live
from rogue_watchdog.actions.runner import InlineRunner
from rogue_watchdog.actions.slurmsweep import Leftover, SweepJournal, SweepReport, _stop
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.unit.test_action_recovery import Counting, Killed
from tests.unit.test_slurm_sweep_failclosed import drained, leftover, sim, sweep


def test_each_wave_of_the_sweep_is_recorded_before_it_is_sent(sim: SlurmMachine) -> None:
    """Before (bd663fe): the sweep signalled with no record at all (0 rows). Now one
    ``slurm-sweep`` row per job and wave, finished ``ok``, each signal an ``intent``
    before it was sent (the simulator's S5 checks the order at each signal)."""
    h = sim.host
    job, worker = leftover(h)
    report = sweep(sim, job, epilog=True)
    assert (report.exit_code, worker in h.procs) == (0, False)
    [row] = sim.db.actions()
    assert (row.kind, row.actor, row.target, row.outcome, row.state) == (
        "slurm-sweep", "sim", f"leftovers of Slurm job {job}", "ok", "done",
    )  # fmt: skip
    assert [m[0] for m in row.details["members"]] == [worker]
    steps = sim.db.action_steps(row.id)
    assert [(s.op, s.detail.get("signal"), s.status) for s in steps if s.op == "signal"] == [
        ("signal", "SIGSTOP", "done"),
        ("signal", "SIGTERM", "done"),
        ("signal", "SIGCONT", "done"),
    ]


def test_a_sweep_that_cannot_record_signals_nothing_and_drains(sim: SlurmMachine) -> None:
    """The state database refuses writes (full, read-only): nothing is signalled, the
    leftover is still running, exit 1 and the node drained for it."""
    h = sim.host
    job, worker = leftover(h)
    sim.storage(False)
    report = sweep(sim, job, epilog=True)
    assert (report.exit_code, worker in h.procs, drained(h)[0]) == (1, True, True)
    assert sim.effects.signals() == []
    line = next(ln for ln in report.lines() if ln.startswith(f"job {job}: PID {worker}"))
    assert line.startswith(
        f"job {job}: PID {worker} error after no signal (not signalled: the action could not "
        "be recorded (cannot record the slurm-sweep action in the state database: "
    )
    sim.storage(True)
    report = sweep(sim, job, epilog=True)
    assert (report.exit_code, worker in h.procs, drained(h)[0]) == (0, False, False)


def test_a_sweep_killed_after_freezing_is_continued_by_the_daemon_never_repeated(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Before (bd663fe): a sweep killed between its SIGSTOP and its SIGTERM left the
    leftover stopped for good, and no record said so. Now the daemon's next tick finds
    the unfinished ``slurm-sweep`` row, continues the process (SIGCONT), sends no
    SIGTERM or SIGKILL, and raises one ``action-interrupted`` finding."""
    script = tmp_path / "leftover.py"
    script.write_text("import time\ntime.sleep(120)\n")
    p = spawned.start([sys.executable, str(script)])
    poll("it runs", lambda: (read_live(p.pid) or None) is not None, 10)
    live = read_live(p.pid)
    assert live is not None
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
        "enforcement: {mode: observe}\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    fx = Counting()
    enf = Enforcer(cfg, d.db, fx, runner=InlineRunner())
    d.sources.append(enf)
    d.enforcers.append(enf)
    lo = Leftover(p.pid, live.start_ticks, tuple(live.cmdline), "root", 4242, (), "test")

    def hook(name: str) -> None:
        if name == "terminate:freeze:sent":
            raise Killed(name)

    faults.set_hook(hook)
    try:
        with pytest.raises(Killed):
            _stop(SweepReport(), SignalGuard(), fx, 5.0, False, [lo],
                  journal=SweepJournal(d.db, "slurm-epilog"))  # fmt: skip
    finally:
        faults.set_hook(None)
    poll("frozen", lambda: (read_live(p.pid) or live).state == "T", 10)
    # The Epilog's process is gone: its row's owner is a process that no longer runs.
    d.db.conn.execute(
        "UPDATE actions SET owner_json=json_set(owner_json, '$.pid', 999999999, '$.session', 'x')"
    )
    d.tick(1_000_000.0)
    poll("continued", lambda: (read_live(p.pid) or live).state != "T", 10)
    assert (fx.sent[(p.pid, signal.SIGTERM)], fx.sent[(p.pid, signal.SIGKILL)]) == (0, 0)
    assert fx.sent[(p.pid, signal.SIGCONT)] == 1
    [row] = d.db.actions()
    assert (row.kind, row.state) == ("slurm-sweep", "interrupted")
    assert row.details["interrupted"]["recovery"] == (
        f"not continued; sent since: SIGCONT to 1 process(es) (thaw); still running: PID {p.pid}"
    )
    found = [f for f in d.db.open_findings() if f.kind == "action-interrupted"]
    assert len(found) == 1 and "slurm-sweep" in found[0].message, found
    d.db.close()
    assert isinstance(p, subprocess.Popen)


def test_unrecorded_wave_still_says_what_the_guard_refused(sim: SlurmMachine) -> None:
    """Seed 62002 (100,000 steps), shrunk: the database refuses writes and the leftover
    is protected (``enforcement.protect``). Before: the dry run planned nothing (the
    guard refuses it) but the real run reported it "not signalled: could not be
    recorded", a plan the dry run never had (S4). Now both say refused, by the guard."""
    h = sim.host
    job, worker = leftover(h, protected=True)
    sim.storage(False)
    sim._sweep(job, epilog=False, dry_first=True)
    sim.never_wrong_in_the_dangerous_direction()
    assert worker in h.procs and sim.effects.signals() == []
    report = sweep(sim, job)
    [outcome] = report.outcomes[job]
    assert outcome.outcome == "failed"
    assert [(p.pid, p.result) for p in outcome.procs] == [(worker, "refused")]
