"""A wrapper ``enforcement.protect`` names is never in a job's stop set, above a copy or its root.

The user's script of ``test_merged_loop_copy``: a ``nohup``'d trainer and a loop
``bash -c 'while true; do python3 train.py; sleep 5; done'`` running a copy of it, in one
process group whose leader is gone; here the operator protects the loop (``protect:
[{cmdline: 'bash -c while*'}]``). ``terminate``'s live guard never signals it, but the
scan's advice, read for the copy by the same rule as the root's
(:func:`~rogue_watchdog.policy.guard.exclusive_wrappers`), named it: BEFORE, both jobs'
``stop_pids`` and the by-hand ``kill -TERM`` held the protected shell's PID, and the
restart answer said "terminate stops the loop with it" (a loop the terminate then left:
``will-return``). AFTER: the protected shell is outside every stop set and by-hand kill,
and the answer says the job comes back.

Real bash processes and a fake NVML, as in ``test_merged_loop_copy``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Spawned, need_program, run_cli
from tests.unit.test_merged_loop_copy import LOOP, _alive, _config, _record, _results, _start


def test_a_protected_loop_above_a_copy_is_named_by_no_advice_and_left(
    spawned: Spawned, tmp_path: Path
) -> None:
    need_program("gcc", "nohup")
    pids = _start(spawned, tmp_path, LOOP)
    cfg = _config(tmp_path, pids)
    text = cfg.read_text()
    protect = "protect: [{cmdline: 'bash -c while*'}]"
    cfg.write_text(text.replace("grace_s: 2}", f"grace_s: 2, {protect}}}"))
    assert cfg.read_text() != text
    scan = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    shell = pids["shell"]
    for name in ("plain", "copy"):
        (job,) = [j for j in scan["jobs"] if j["root_pid"] == pids[name]]
        advice = job["advice"]
        assert advice["refused"] is None
        assert shell not in advice["stop_pids"], (name, advice)
        assert {pids["plain"], pids["copy"]} <= set(advice["stop_pids"])
        # The by-hand kill (the origin's remediation) names what may be signalled only.
        assert str(shell) not in job["origin"]["remediation"].split(), (name, job["origin"])
        # The protected loop stays: the job comes back after a terminate.
        assert advice["restarts"]["after_terminate"] is True, (name, advice["restarts"])
        # It says what starts the job again, and no step against the protected shell, in
        # words either (before: "stop the loop first: kill -TERM <the shell>").
        assert advice["restarts"]["how"] == (
            f"shell loop `while true` in PID {shell} (PID {shell} matches enforcement.protect "
            "entry 'cmdline=bash -c while*': never signalled)"
        )
        assert advice["restarts"]["stops"] is None
        assert f"kill -TERM {shell}" not in json.dumps(job)
    done = run_cli("terminate", "--config", str(cfg), str(pids["plain"]))
    assert done.returncode == 1, done.stdout + done.stderr
    details = _record(tmp_path)
    assert details["outcome"] == "will-return"
    assert details["will_return"]["stops"] is None
    assert f"kill -TERM {shell}" not in done.stdout + done.stderr
    assert shell not in _results(details)
    assert _alive(shell)
