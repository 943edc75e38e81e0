"""A job whose launcher still runs: its terminate never says ``ok``.

Stop 46's fresh user: ``supervisor.py`` ran ``subprocess.call(["python3", "train.py"])``
then ``sleep 5`` in a loop. The scan said ``restarts it: unknown, its launcher PID N
`python3 supervisor.py` still runs and may start it again``, yet ``terminate`` of the
trainer said ``outcome: ok`` (exit 0) and the trainer was back 5 s later, paged
``remediation-failed`` (critical). BEFORE: the launcher's answer was one the terminate
stops with the job (``after_terminate`` False), which it is not. AFTER: the terminate
ends ``may-return`` (exit 1), records ``may_return`` with what stops it (the launcher
first), and the trainer does come back.

Real processes, a fake NVML listing the trainer; every process is in the test's own
process group and killed with it at the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rogue_watchdog.sources.procfs import ProcessTable
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned, need_program, poll, run_cli
from tests.unit.test_merged_loop_copy import gpu_config

SUPERVISOR = (
    "import subprocess, sys, time\n"
    "while True:\n"
    "    subprocess.call([sys.executable, 'train.py', '3608'])\n"
    "    time.sleep(1)\n"
)


def _trainers(supervisor: int) -> list[int]:
    table = ProcessTable()
    table.refresh()
    return [
        p.pid
        for p in table.procs.values()
        if p.ppid == supervisor and p.cmdline[1:] == ("train.py", "3608") and not p.is_zombie
    ]


def test_a_terminate_whose_launcher_still_runs_says_it_may_come_back(
    spawned: Spawned, tmp_path: Path
) -> None:
    need_program("gcc")
    (tmp_path / "train.py").write_text("import time\ntime.sleep(300)\n")
    (tmp_path / "supervisor.py").write_text(SUPERVISOR)
    sup = spawned.start([sys.executable, "supervisor.py"], cwd=tmp_path).pid
    (trainer,) = poll("the supervisor's trainer", lambda: _trainers(sup) or None, 20)
    cfg = gpu_config(tmp_path, [trainer])
    scan = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    (job,) = [j for j in scan["jobs"] if j["root_pid"] == trainer]
    restarts = job["advice"]["restarts"]
    assert restarts["when"] == "unknown" and restarts["after_terminate"] is True
    assert f"its launcher PID {sup} " in restarts["how"]
    done = run_cli("terminate", "--config", str(cfg), str(trainer))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "outcome: may-return" in done.stdout
    db = StateDB(tmp_path / "state")
    try:
        (act,) = [a for a in db.actions() if a.kind == "terminate"]
    finally:
        db.close()
    assert act.outcome == "may-return"
    assert act.details["may_return"]["stops"] == f"stop the launcher first: kill -TERM {sup}"
    # What it said is what happens: the launcher starts the trainer again.
    (back,) = poll("the trainer back", lambda: _trainers(sup) or None, 20)
    assert back != trainer
