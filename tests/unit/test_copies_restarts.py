"""The restart answer over a job and the copies its terminate takes in, on fixture
trees (no process started): policy/copies.py and guard.with_advice.

A script (its group's leader, gone) left ``python3 train.py`` (PID 201) and ``bash -c
'while true; do python3 train.py; sleep 5; done'`` (202) running ``python3 train.py``
(203). ``terminate 201`` stops 203 as a copy of the same dead leader. BEFORE: 201's
advice read only 201's lineage: nothing restarts it, stop 201 alone. AFTER: the loop
above the copy is the job's, as a loop above its root is (test_merged_loop_copy.py runs
it for real).
"""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.model import Job, Restarts
from rogue_watchdog.model.origins import OrphanOrigin
from rogue_watchdog.policy.copies import most_restarting
from rogue_watchdog.policy.guard import STOPS_WITH_LOOP, ScanProtection, with_advice
from rogue_watchdog.sources.procfs import ProcessTable

LOOP = "while true; do python3 train.py; sleep 5; done"
TRAIN = ["python3", "train.py"]


def _proc(root: Path, pid: int, ppid: int, argv: list[str], pgid: int = 100) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    comm = argv[0].rsplit("/", 1)[-1][:15]
    # proc(5) stat: pid (comm) state ppid pgrp session ... starttime (field 22)
    (d / "stat").write_text(
        f"{pid} ({comm}) S {ppid} {pgid} {pgid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {1000 + pid} 0 0\n"
    )
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t0\t0\t0\t0\nNSpid:\t{pid}\n")
    (d / "cgroup").write_text("0::/\n")


def _advised(tmp_path: Path, *, copy_pgid: int = 100, shared: bool = False) -> list[Job]:
    _proc(tmp_path, 1, 0, ["/sbin/init"], pgid=1)
    _proc(tmp_path, 201, 1, TRAIN)
    _proc(tmp_path, 202, 1, ["bash", "-c", LOOP], pgid=copy_pgid)
    _proc(tmp_path, 203, 202, TRAIN, pgid=copy_pgid)
    if shared:
        _proc(tmp_path, 204, 202, ["sleep", "300"], pgid=copy_pgid)
    table = ProcessTable(str(tmp_path))
    table.refresh()
    jobs = [
        Job(pid, [pid], "root", tuple(TRAIN), 1000 + pid, None, [], table.ancestors(pid),
            origin=OrphanOrigin())
        for pid in (201, 203)
    ]  # fmt: skip
    return with_advice(jobs, ScanProtection(), table)


def test_a_loop_that_runs_only_the_copy_is_the_jobs_and_stopped_with_it(tmp_path: Path) -> None:
    plain, copy = _advised(tmp_path)
    again = plain.advice.restarts
    assert again is not None
    assert (again.when, again.how, again.stops, again.after_terminate) == (
        "after about 5 s", "shell loop `while true` in PID 202", STOPS_WITH_LOOP, False,
    )  # fmt: skip
    assert again.shell == (202, 1202)
    assert plain.advice.stop_pids == (201, 203, 202)
    # By hand as terminate does it: the copy and its loop's shell too.
    assert plain.advice.by_hand == "kill -TERM 201 202 203"
    # The copy's own job: the same answer, its own instance first.
    assert copy.advice.restarts == again and set(copy.advice.stop_pids) == {201, 202, 203}


def test_a_shared_loop_above_the_copy_says_it_comes_back(tmp_path: Path) -> None:
    """The loop's shell also runs a `sleep`: never one to stop; the job comes back."""
    plain, _copy = _advised(tmp_path, shared=True)
    again = plain.advice.restarts
    assert again is not None and again.after_terminate and again.known
    assert again.stops == (
        "stop the loop first: kill -TERM 202 (its shell alone: what else it started keeps running)"
    )
    assert 202 not in plain.advice.stop_pids and 204 not in plain.advice.stop_pids
    assert set(plain.advice.stop_pids) == {201, 203}


def test_a_trainer_in_another_group_is_no_copy(tmp_path: Path) -> None:
    """Not in the group of the job's dead leader: its terminate leaves it, and its loop
    says nothing of the job."""
    plain, copy = _advised(tmp_path, copy_pgid=202)
    assert plain.advice.restarts is None
    assert plain.advice.stop_pids == (201,)
    assert copy.advice.restarts is not None and copy.advice.stop_pids == (203, 202)


def test_most_restarting_prefers_a_return_then_the_jobs_own() -> None:
    comes_back = Restarts("at once", "systemd Restart=always", "disable-source first")
    may = Restarts("unknown", "its launcher may", "stop the launcher first")
    with_loop = Restarts("after about 5 s", "shell loop", STOPS_WITH_LOOP, False)
    assert most_restarting([None, None]) is None
    assert most_restarting([None, with_loop]) is with_loop
    assert most_restarting([with_loop, may]) is may
    assert most_restarting([may, comes_back, with_loop]) is comes_back
    other = Restarts("after about 9 s", "shell loop 2", STOPS_WITH_LOOP, False)
    assert most_restarting([with_loop, other]) is with_loop
