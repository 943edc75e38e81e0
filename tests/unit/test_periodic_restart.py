"""Fresh user F (issue 33), item 5: a daemon restart added a high page for a cron ghost
whose loop was already one open finding.

The case (/work/notes/fresh-f-tmp/state/state.db): the ghost's runs PID 2334 (16:36:03)
and 17325 (16:39:01) each ended by themselves, one periodic finding (F439); the daemon
was restarted; the next run, PID 22472 at 16:40:01, opened F696 ``respawned: gone at
16:39:41, back at 16:40:01 (+0m20s)`` at high next to F439. The exit statuses of the
runs before the restart were in the old process's memory only, so the return had no
evidence of how the run before ended. Now the open periodic finding, read from the
database, covers the run: no ``respawned``, the loop goes on (runs 3).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import CronOrigin, Job, Proc
from rogue_watchdog.policy.findings import job_findings
from tests.unit.test_pages import _daemon

CMD = ("/usr/bin/python3", "/tmp/rw-try-f/ghost/train_ghost.py", "--epochs", "40")
FILE = "/proc/13313/root/etc/cron.d/legacy-retrain"
T_RUN3, T_GONE3 = 1796574963.0, 1796574999.0  # 16:36:03, 16:36:39
T_RUN4, T_GONE4 = 1796575141.0, 1796575181.0  # 16:39:01, 16:39:41
T_RUN5 = 1796575201.0  # 16:40:01, the restarted daemon's first tick


def _run(pid: int, start: int) -> Job:
    origin = CronOrigin(
        file=FILE, line=1, user="root", schedule="* * * * *",
        entry="* * * * * root /usr/bin/python3 /tmp/rw-try-f/ghost/train_ghost.py --epochs 40",
    )  # fmt: skip
    root = Proc(pid=pid, ppid=pid - 1, start_ticks=start, state="S", comm="python3", uid=0)
    return Job(
        root_pid=pid, pids=[pid], user="root", cmdline=CMD, start_ticks=start,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[root], origin=origin,
    )  # fmt: skip


def _runs(d: Daemon, job: Job, start: float, gone: float, status: int | None) -> None:
    for now in (start, start + 5, start + 10):
        d.tracker.update([job], job_findings([job]), now)
    d.tracker.update([], [], gone, exits={job.root_pid: status} if status is not None else None)


def _open(d: Daemon) -> list[tuple[str, str]]:
    return sorted((f.kind, f.fingerprint.split(":")[1]) for f in d.db.open_findings())


def _restarted(tmp_path: Path, status: int) -> Daemon:
    d = _daemon(tmp_path)
    _runs(d, _run(2334, 4900642), T_RUN3, T_GONE3, 0)
    _runs(d, _run(17325, 4918648), T_RUN4, T_GONE4, status)
    assert _open(d) == [("rogue-job", "periodic")]
    d.db.close()
    return _daemon(tmp_path)  # the restart: the same state directory, no exit statuses


def test_a_run_an_open_periodic_finding_covers_is_the_loops_after_a_restart(
    tmp_path: Path,
) -> None:
    d = _restarted(tmp_path, 0)
    job = _run(22472, 4924652)
    for now in (T_RUN5, T_RUN5 + 5, T_RUN5 + 10):
        d.tracker.update([job], job_findings([job]), now)
    # Before: [("respawned", …), ("rogue-job", "periodic")], a second high open.
    assert _open(d) == [("rogue-job", "periodic")]
    (loop,) = d.db.open_findings()
    assert loop.details["periodic"]["runs"] == 3 and loop.details["periodic"]["pid"] == 22472
    opens = d.db.conn.execute("SELECT COUNT(*) FROM deliveries WHERE event = 'open'").fetchone()
    assert opens[0] == 1  # the loop's open only (was 2: + respawned)


@pytest.mark.parametrize("status", [signal.SIGKILL, None])
def test_a_loops_run_that_ended_while_watched_unlike_itself_still_opens_respawned(
    tmp_path: Path, status: int | None
) -> None:
    """No restart: a run killed (its exit status says a signal), or one whose exit this
    process did not see (events lost), and back: news, as before (never quieter without
    evidence)."""
    d = _daemon(tmp_path)
    _runs(d, _run(2334, 4900642), T_RUN3, T_GONE3, 0)
    _runs(d, _run(17325, 4918648), T_RUN4, T_GONE4, status)
    job = _run(22472, 4924652)
    d.tracker.update([job], job_findings([job]), T_RUN5)
    assert [k for k, _fp in _open(d)] == ["respawned", "rogue-job"]
