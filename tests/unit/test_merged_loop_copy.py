"""A job whose copy runs under a shell loop: the restart answer is every instance's.

The user's case, as they ran it: one script that then exits starts ``nohup python3
train.py &`` and ``nohup bash -c 'while true; do python3 train.py; sleep 5; done' &``.
Both trainers have one owner and one command line and share the script's process
group, whose leader is gone: ``terminate`` takes the second in as a copy of the first
(docs/architecture.md, the rule for a killed torchrun's workers). BEFORE: ``terminate
<nohup'd PID>`` ended both trainers, left the loop's ``bash`` running (it is above the
copy only), said ``outcome: ok`` (exit 0) and the loop started the trainer again 5 s
later; the restart answer was read from the first instance's lineage alone. AFTER: the
loop above the copy is read as the job's, by the rule a lone loop follows: a shell that
runs nothing but the copy is stopped with it (the record says so), a shell that also
runs other work is left and the outcome is ``will-return`` naming it.

Real bash processes, a fake NVML listing both trainers; every process is in the
test's own process group and killed with it at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rogue_watchdog.sources.procfs import ProcessTable
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned, need_program, poll, process_picture, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path

TRAINER = "import time\ntime.sleep(300)\n"
LOOP = "while true; do python3 train.py; sleep 5; done"
# A loop shell that also runs other work (a `sleep` beside the loop): never signalled.
SHARED_LOOP = "sleep 300 & " + LOOP


def _run_script(spawned: Spawned, tmp_path: Path, loop: str) -> int:
    """Run the user's script (``nohup`` a trainer, ``nohup`` a ``bash -c`` of ``loop``,
    exit at once); its PID, the leader of the group the three are left in."""
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "start.sh").write_text(
        "nohup python3 train.py >/dev/null 2>&1 &\n"
        f"nohup bash -c '{loop}' >/dev/null 2>&1 &\n"
        "exit 0\n"
    )
    script = spawned.start(
        ["/bin/bash", "start.sh"], cwd=tmp_path, env=dict(os.environ, PATH="/usr/bin:/bin")
    )
    script.wait(timeout=10)
    return script.pid


def _start(spawned: Spawned, tmp_path: Path, loop: str) -> dict[str, int]:
    """Run the user's script (it exits at once); the PIDs of the ``nohup``'d trainer
    (``plain``), the loop's shell (``shell``) and the trainer it runs (``copy``)."""
    script = _run_script(spawned, tmp_path, loop)

    def found() -> dict[str, int] | None:
        # A fresh table each look: one kept would keep a command line read before its
        # process's exec (`nohup` not yet `bash -c`).
        table = ProcessTable()
        table.refresh()
        group = [p for p in table.procs.values() if p.pgid == script and not p.is_zombie]
        shell = [p for p in group if p.cmdline == ("bash", "-c", loop)]
        trainers = [p for p in group if p.cmdline == ("python3", "train.py")]
        if len(shell) != 1 or len(trainers) != 2:
            return None
        (copy,) = [p for p in trainers if p.ppid == shell[0].pid] or [None]
        (plain,) = [p for p in trainers if p.ppid != shell[0].pid] or [None]
        if copy is None or plain is None:
            return None
        return {"plain": plain.pid, "shell": shell[0].pid, "copy": copy.pid}

    try:
        return poll("the two trainers and the loop's shell", found, 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{process_picture('train.py')}") from None


def gpu_config(tmp_path: Path, gpu_pids: Iterable[int]) -> Path:
    """A configuration whose fake NVML lists ``gpu_pids`` on one GPU, with its state,
    backups and a 2 s grace in ``tmp_path``."""
    procs = [{"pid": pid, "mem": 2**30} for pid in sorted(set(gpu_pids))]
    lib = fake_nvml(
        tmp_path, {"devices": [{"uuid": "GPU-a", "total": 80 * 2**30, "processes": procs}]}
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"enforcement: {{backup_dir: '{tmp_path}/bk', grace_s: 2}}\n"
    )
    return cfg


def _config(tmp_path: Path, pids: dict[str, int]) -> Path:
    return gpu_config(tmp_path, (pids["plain"], pids["copy"]))


def _plain(cfg: Path, pids: dict[str, int]) -> dict[str, Any]:
    """The nohup'd job as ``scan --json`` lists it."""
    scan = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    (plain,) = [j for j in scan["jobs"] if j["root_pid"] == pids["plain"]]
    return plain


def _record(tmp_path: Path) -> dict[str, Any]:
    db = StateDB(tmp_path / "state")
    try:
        (act,) = [a for a in db.actions() if a.kind == "terminate"]
        return {"outcome": act.outcome, **act.details}
    finally:
        db.close()


def _results(details: dict[str, Any]) -> dict[int, str]:
    return {p["pid"]: p["result"] for p in details["procs"]}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_loop_above_the_copy_is_stopped_with_it_and_nothing_comes_back(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The loop's shell runs nothing but the copy: stopped with it, as a lone loop's is.
    BEFORE: `outcome: ok`, the shell left running, the trainer back 5 s later."""
    need_program("gcc", "nohup")
    pids = _start(spawned, tmp_path, LOOP)
    cfg = _config(tmp_path, pids)
    plain = _plain(cfg, pids)
    # The advice of the nohup'd job says what its terminate does: the copy's loop too.
    assert plain["advice"]["restarts"] == {
        "when": "after about 5 s",
        "how": f"shell loop `while true` in PID {pids['shell']}",
        "stops": "terminate stops the loop with it",
        "after_terminate": False,
    }
    assert {pids["plain"], pids["copy"], pids["shell"]} <= set(plain["advice"]["stop_pids"])
    dry = run_cli("terminate", "--dry-run", "--config", str(cfg), str(pids["plain"]))
    assert f"PID {pids['shell']} `bash -c " in dry.stdout, dry.stdout
    done = run_cli("terminate", "--config", str(cfg), str(pids["plain"]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "outcome: ok" in done.stdout
    details = _record(tmp_path)
    assert details["outcome"] == "ok"
    got = _results(details)
    for name in ("plain", "copy", "shell"):
        assert got.get(pids[name]) in ("exited", "killed"), (name, got)
    assert details["source_stopped"] == f"shell loop `while true` in PID {pids['shell']}"
    assert "will_return" not in details and "loop_left" not in details
    assert not _alive(pids["shell"])
    # The loop's shell is gone, so nothing can start the trainer again: none runs.
    table = ProcessTable()
    table.refresh()
    assert not [p for p in table.procs.values() if p.cmdline == ("python3", "train.py")]


def test_a_shared_loop_above_the_copy_is_left_and_the_outcome_says_it_comes_back(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The loop's shell also runs a `sleep`: never signalled (the dangerous direction
    stays closed), and the terminate says the job comes back, naming the loop.
    BEFORE: `outcome: ok` (exit 0), nothing said of the loop."""
    need_program("gcc", "nohup")
    pids = _start(spawned, tmp_path, SHARED_LOOP)
    cfg = _config(tmp_path, pids)
    done = run_cli("terminate", "--config", str(cfg), str(pids["plain"]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "outcome: will-return" in done.stdout
    details = _record(tmp_path)
    assert details["outcome"] == "will-return"
    assert pids["shell"] not in _results(details)
    assert _alive(pids["shell"])
    assert details["will_return"] == {
        "restarts": f"restarts it: after about 5 s, shell loop `while true` in PID {pids['shell']}",
        "stops": f"stop the loop first: kill -TERM {pids['shell']} (its shell alone: what else "
        "it started keeps running)",
    }
    assert "source_stopped" not in details


# The loop sleeps first: at the scan and the terminate no copy runs below it, and
# nothing below it is a job of the scan.
BETWEEN_RUNS = "while true; do sleep 300; python3 train.py; done"


def _start_between(spawned: Spawned, tmp_path: Path, loop: str) -> dict[str, int]:
    """The user's script with a loop that sleeps first: the PIDs of the `nohup`'d
    trainer (``plain``, also ``copy`` for :func:`_config`) and the loop's shell."""
    script = _run_script(spawned, tmp_path, loop)

    def found() -> dict[str, int] | None:
        table = ProcessTable()
        table.refresh()
        group = [p for p in table.procs.values() if p.pgid == script and not p.is_zombie]
        shell = [p.pid for p in group if p.cmdline == ("bash", "-c", loop)]
        plain = [p.pid for p in group if p.cmdline == ("python3", "train.py")]
        if len(shell) != 1 or len(plain) != 1:
            return None
        return {"plain": plain[0], "shell": shell[0], "copy": plain[0]}

    return poll("the trainer and the loop's shell", found, 30)


def test_a_loop_between_two_runs_in_the_jobs_group_makes_the_terminate_will_return(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The loop's shell is in its `sleep` (the copy it ran ended, or has not started):
    it is left (it runs the sleep, not the job) and the terminate says the job comes
    back, naming it. BEFORE: `outcome: ok` (exit 0), no restart answer, and the loop
    started the trainer again when its sleep ended."""
    need_program("gcc", "nohup")
    pids = _start_between(spawned, tmp_path, BETWEEN_RUNS)
    cfg = _config(tmp_path, pids)
    plain = _plain(cfg, pids)
    assert plain["advice"]["restarts"] == {
        "when": "when its loop comes round",
        "how": f"shell loop `while true` in PID {pids['shell']}",
        "stops": f"stop the loop first: kill -TERM {pids['shell']} (its shell alone: what "
        "else it started keeps running)",
        "after_terminate": True,
    }
    assert pids["shell"] not in plain["advice"]["stop_pids"]
    done = run_cli("terminate", "--config", str(cfg), str(pids["plain"]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "outcome: will-return" in done.stdout
    details = _record(tmp_path)
    assert details["outcome"] == "will-return"
    assert pids["shell"] not in _results(details)
    assert _alive(pids["shell"])


def test_a_loop_of_another_command_line_between_runs_is_never_named(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The loop between runs starts `python3 train.py --prod`, which the allowlist
    sanctions: in its sleep it is no job and none of the guard's, but it is no source of
    the rogue `python3 train.py` (same script, another command line), and the advice
    never tells a person to kill it. Found by this branch's own first version, which
    named it (`stop the loop first: kill -TERM <the pipeline's loop>`)."""
    need_program("gcc", "nohup")
    loop = "while true; do sleep 300; python3 train.py --prod; done"
    pids = _start_between(spawned, tmp_path, loop)
    cfg = _config(tmp_path, pids)
    rule = "sanctioned:\n  - name: pipeline\n    cmdline: '*--prod*'\n    origin: {any: true}\n"
    cfg.write_text(cfg.read_text() + rule)
    plain = _plain(cfg, pids)
    assert plain["advice"]["restarts"] is None
    assert str(pids["shell"]) not in plain["advice"]["stop"]
