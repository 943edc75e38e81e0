"""A terminate advised to stop a shell loop's shell with its run, whose live decision
leaves that shell (the scan-to-act race).

The scan's advice found the loop's shell running only the job, so ``terminate`` was to
stop it too, and the loop's finding resolves at once (``details.source_stopped``). The
terminate decides its wrappers again from the live processes when it acts. BEFORE: the
record claimed ``source_stopped`` from the advice, before any signal, also when the
shell was left by then (its script file changed since the scan; a ``-c`` shell that
started another child meanwhile): the finding resolved as if the loop had stopped while
it ran on. AFTER: the claim stands only when that very shell (PID and start time) was
stopped; else the outcome is ``will-return``, naming the loop, and the finding waits.

Real bash loops run a real trainer; each shell is left to PID 1 (``sh -c 'bash ... &
exit 0'``) so that no launcher above it answers instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.actions.remedy import Remedy, target_from_job
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.tracking.current import ended_for_good
from rogue_watchdog.model import Job, Proc
from rogue_watchdog.policy.guard import STOPS_WITH_LOOP, ScanProtection, with_advice
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned, poll
from tests.unit.test_script_loop import trainer_under

SCRIPT = "#!/bin/bash\nwhile true\ndo\n    python3 train_loop.py\n    sleep 7\ndone\n"
# Exclusive until it gets SIGUSR1: then it starts a `sleep` beside the run (a trap runs
# at once while the shell waits on the run with `wait`), and waits on the run again.
DASH_C = (
    'trap "sleep 30 &" USR1; while true; do python3 train_loop.py & p=$!; '
    "while kill -0 $p 2>/dev/null; do wait $p; done; sleep 7; done"
)


def _loop_job(spawned: Spawned, tmp_path: Path, shell_argv: list[str]) -> tuple[Job, Proc]:
    """The advised job of the ``python3 train_loop.py`` that ``shell_argv`` (left to PID
    1) starts, and its shell."""
    job, table = trainer_under(spawned, tmp_path, shell_argv)
    (advised,) = with_advice([job], ScanProtection(), table)
    return advised, job.lineage[1]


def _remedy(tmp_path: Path) -> tuple[Remedy, StateDB]:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"enforcement: {{backup_dir: '{tmp_path}/bk', grace_s: 5}}\n",
        "t.yaml",
    )
    db = StateDB(tmp_path / "state")
    remedy = Remedy(
        cfg.enforcement, db, Effects(), actor="test", backup_dir=str(tmp_path / "bk"),
        protection=ScanProtection(),
    )  # fmt: skip
    return remedy, db


def _terminate(tmp_path: Path, job: Job) -> tuple[str, dict[str, Any], str | None]:
    """Terminate ``job`` as advised; the outcome, the record's details, and why the
    loop's finding would resolve early (:func:`ended_for_good`; None: it waits)."""
    remedy, db = _remedy(tmp_path)
    aid, res = remedy.terminate(target_from_job(job, "sig", None), time.time())
    act = db.action(aid)
    assert act is not None and act.outcome == res.outcome
    rec = SimpleNamespace(details={"periodic": {"last_at": 0.0, "pid": job.root_pid}})
    early = ended_for_good(rec, [act])  # type: ignore[arg-type]
    db.close()
    return res.outcome, act.details, early


def _advised_to_stop(job: Job, shell: Proc) -> None:
    again = job.advice.restarts
    assert again is not None and again.stops == STOPS_WITH_LOOP
    assert again.shell == (shell.pid, shell.start_ticks)
    assert shell.pid in job.advice.stop_pids


def test_a_loop_shell_stopped_with_its_run_resolves_its_finding_early(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The normal case: the shell is still the job's alone when the terminate acts."""
    script = tmp_path / "retrain.sh"
    script.write_text(SCRIPT)
    job, shell = _loop_job(spawned, tmp_path, ["/bin/bash", str(script)])
    _advised_to_stop(job, shell)
    outcome, details, early = _terminate(tmp_path, job)
    assert outcome == "ok"
    assert (shell.pid, "exited") in [(p["pid"], p["result"]) for p in details["procs"]]
    assert details["source_stopped"] == job.advice.restarts.how  # type: ignore[union-attr]
    assert "loop_left" not in details and "will_return" not in details
    assert early is not None and "with what restarted it (shell loop" in early


def test_a_script_changed_between_scan_and_terminate_leaves_the_loop_and_says_so(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The script file changes after the scan: the terminate no longer knows what the
    shell runs and leaves it. BEFORE: `source_stopped` recorded, outcome `ok`, the
    finding resolved early; AFTER: `will-return` naming the loop, the finding waits."""
    script = tmp_path / "retrain.sh"
    script.write_text(SCRIPT)
    job, shell = _loop_job(spawned, tmp_path, ["/bin/bash", str(script)])
    _advised_to_stop(job, shell)
    with script.open("a") as fh:
        fh.write("# edited after the scan\n")
    later = time.time() + 60  # surely after the shell started, whatever the clock's grain
    os.utime(script, (later, later))
    outcome, details, early = _terminate(tmp_path, job)
    assert read_live(shell.pid) is not None  # the loop runs on
    assert outcome == "will-return"
    assert "source_stopped" not in details
    assert early is None
    assert details["will_return"] == {
        "restarts": f"restarts it: after about 7 s, shell loop `while true` in the script "
        f"`{script}` of PID {shell.pid} (as the file reads now)",
        "stops": f"stop the loop first: kill -TERM {shell.pid} (its shell alone: what else "
        "it started keeps running)",
    }
    assert details["loop_left"]["pid"] == shell.pid and details["loop_left"]["running"]
    (left,) = [x for x in details["left"] if x["pid"] == shell.pid]
    assert left["reason"].endswith("its loop starts the job again")


def test_a_dash_c_shell_that_started_another_child_since_the_scan_is_left_and_said(
    spawned: Spawned, tmp_path: Path
) -> None:
    """`bash -c 'while ...'`, exclusive at the scan; before the terminate acts it starts
    a `sleep` beside the run: shared, so never signalled. BEFORE: the finding resolved
    as if its loop had stopped; AFTER: `will-return` naming the loop."""
    argv = ["/bin/bash", "-c", DASH_C]
    job, shell = _loop_job(spawned, tmp_path, argv)
    _advised_to_stop(job, shell)
    os.kill(shell.pid, signal.SIGUSR1)  # a process this test started

    def beside() -> bool:
        out = subprocess.run(
            ["ps", "-o", "args=", "--ppid", str(shell.pid)], capture_output=True, text=True
        ).stdout
        return "sleep 30" in out

    poll("the shell's second child", beside, 10)
    outcome, details, early = _terminate(tmp_path, job)
    assert read_live(shell.pid) is not None  # the loop runs on
    assert outcome == "will-return"
    assert "source_stopped" not in details and early is None
    assert details["will_return"]["restarts"] == (
        f"restarts it: when its loop comes round, shell loop `while true` in PID {shell.pid}"
    )
    (left,) = [x for x in details["left"] if x["pid"] == shell.pid]
    assert left["reason"].startswith("it also runs processes outside the job")
    assert left["reason"].endswith("; its loop starts the job again")


def test_the_terminate_command_says_the_loop_left_brings_the_job_back() -> None:
    """`rogue-watchdog terminate`'s last line for a loop whose shell it left (it printed
    none: the advice said the loop stops with the job); none when it stopped it."""
    from rogue_watchdog.actions.terminate import TerminateOutcome
    from rogue_watchdog.cli.actions import _loop_left
    from rogue_watchdog.model import Restarts

    how = "shell loop `while true` in PID 812"
    loop = Restarts("after about 7 s", how, STOPS_WITH_LOOP, False, shell=(812, 4242))
    left = [{"pid": 812, "cmdline": ["bash", "-c", "…"], "reason": "its loop starts the job again"}]
    assert _loop_left(loop, TerminateOutcome([], "will-return", left=left)) == (
        "will come back: its loop's shell PID 812 was left running, not the job's alone when "
        f"the terminate acted (after about 7 s, {how}); stop the loop first: kill -TERM 812 "
        "(its shell alone: what else it started keeps running)"
    )
    assert _loop_left(loop, TerminateOutcome([], "ok")) is None
