"""Terminating one job stops the other jobs the scan lists as its copies: the words say so.

A fresh user's case: a script that then exits starts ``python3 train.py 3600``,
``3601``, ``3602`` and ``3603`` with ``nohup … &``. The four trainers have one owner and
one program and sit in the script's process group, whose leader is gone. The scan lists
four jobs (it merges only identical command lines), but ``terminate`` of one takes the
other three in as its copies (the rule for a killed torchrun's workers, whose arguments
differ: docs/respawn.md). BEFORE: nothing in ``explain``, the scan or ``terminate
--dry-run`` said that terminating one job stops the others ("Terminating one job stopped
other jobs the scan listed separately."). AFTER: each names them and says why.

Real processes, a fake NVML listing the four trainers; every process is in the test's
own process group and killed with it at the end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rogue_watchdog.sources.procfs import ProcessTable
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned, need_program, poll, process_picture, run_cli
from tests.unit.test_merged_loop_copy import TRAINER, gpu_config

# The user's four, and a fifth: the words name three copies and count the rest.
PORTS = ("3600", "3601", "3602", "3603", "3604")


def _start(spawned: Spawned, tmp_path: Path) -> tuple[int, dict[str, int]]:
    """Run the user's script (five ``nohup``'d trainers, then exit); its PID (the gone
    leader of the trainers' group) and each trainer's PID by its argument."""
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "start.sh").write_text(
        "".join(f"nohup python3 train.py {port} >/dev/null 2>&1 &\n" for port in PORTS) + "exit 0\n"
    )
    script = spawned.start(
        ["/bin/bash", "start.sh"], cwd=tmp_path, env=dict(os.environ, PATH="/usr/bin:/bin")
    )
    script.wait(timeout=10)

    def found() -> dict[str, int] | None:
        table = ProcessTable()
        table.refresh()
        got = {
            p.cmdline[2]: p.pid
            for p in table.procs.values()
            if p.pgid == script.pid and not p.is_zombie and len(p.cmdline) == 3
            and p.cmdline[:2] == ("python3", "train.py")
        }  # fmt: skip
        return got if len(got) == len(PORTS) else None

    try:
        return script.pid, poll("the five trainers", found, 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{process_picture('train.py')}") from None


def test_terminate_of_one_job_names_the_other_jobs_it_stops(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``explain``, the scan (text and JSON), ``terminate --dry-run``, the terminate's
    output and its record say which other jobs it stops and why. BEFORE: none did (the
    dry run listed their PIDs as if they were the job's)."""
    need_program("gcc", "nohup")
    leader, pids = _start(spawned, tmp_path)
    cfg = gpu_config(tmp_path, pids.values())
    first = pids["3600"]
    words = (
        "terminate also stops 4 other jobs the scan lists separately: "
        f"PID {pids['3601']} `python3 train.py 3601`, PID {pids['3602']} `python3 train.py "
        f"3602`, PID {pids['3603']} `python3 train.py 3603`, and 1 more (the same program "
        f"and owner, in process group {leader} whose leader is gone: they are taken as "
        "this run's copies)"
    )
    others = [pids[port] for port in PORTS[1:]]

    explain = run_cli("explain", "--config", str(cfg), str(first))
    (remedy,) = [ln for ln in explain.stdout.splitlines() if ln.startswith("Remediation: ")]
    assert remedy.endswith(
        f", or by hand: kill -TERM {first} {' '.join(map(str, others))}; {words}"
    )

    scan = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    advice = {j["root_pid"]: j["advice"] for j in scan["jobs"]}
    assert advice[first]["copies"] == others
    assert advice[pids["3602"]]["copies"] == [pids[p] for p in PORTS if p != "3602"]
    text = run_cli("scan", "--config", str(cfg), env={"COLUMNS": "400"}).stdout
    assert f"\n    {words}\n    stop: rogue-watchdog terminate" in text, text

    dry = run_cli("terminate", "--dry-run", "--config", str(cfg), str(first))
    lines = dry.stdout.splitlines()
    assert lines[0].startswith(f"would terminate rogue job PID {first} "), dry.stdout
    assert lines[1] == f"  {words}", dry.stdout

    done = run_cli("terminate", "--config", str(cfg), str(first))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[1] == f"  {words}", done.stdout
    db = StateDB(tmp_path / "state")
    try:
        (act,) = [a for a in db.actions() if a.kind == "terminate"]
    finally:
        db.close()
    assert act.details["copies"] == others
    assert {p["pid"] for p in act.details["procs"]} == set(pids.values())


def test_a_copys_command_line_is_quoted_as_host_text_and_one_copy_reads_singular() -> None:
    """A copy's command line is host text: a backtick in it never ends the code span
    (the outputs escape the newline, as every line they print: ``printable``)."""
    from types import SimpleNamespace

    from rogue_watchdog.policy.guard import _copies_said
    from rogue_watchdog.render import printable

    copy = SimpleNamespace(root_pid=41, cmdline=("python3", "x`y", "a\nb"))
    said = _copies_said([copy], ["process group 40 whose leader it stops"])  # type: ignore[list-item]
    assert said is not None and said.pids == (41,)
    assert said.text() == (
        "terminate also stops 1 other job the scan lists separately: PID 41 "
        "`python3 x\\x60y a\nb` (the same program and owner, in process group 40 whose "
        "leader it stops: it is taken as this run's copy)"
    )
    assert "PID 41 `python3 x\\x60y a\\nb` (the same" in printable(said.text())
