"""Real atd runs a fake trainer; the at resolver must name the job and its queued copy.

atd is shared with every test process (tests/system/hostdaemon.py): the one that runs,
or one started for the tests and stopped by the last that uses it. The jobs queued here
are removed with atrm; the trainer is killed only when its argv is exactly
``/usr/bin/python3 SANDBOX/at/train_fake.py`` (random SANDBOX) and its parent chain
reaches the atd in use.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from rogue_watchdog.lineage.at import AtResolver
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import need, need_program, need_root
from tests.system.cronharness import PYTHON, TRAINER_SOURCE, _cmdline, _pids, _ppid
from tests.system.hostdaemon import DaemonLease, wake

pytestmark = pytest.mark.system


def _submit(when: str, command: str, cwd: Path) -> int:
    done = subprocess.run(
        ["at", when], input=command + "\n", capture_output=True, text=True, cwd=cwd, check=True
    )
    m = re.search(r"^job (\d+) at", done.stderr, re.M)
    assert m, done.stderr
    return int(m.group(1))


def _chain_has(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        pid = _ppid(pid)
    return False


@pytest.fixture
def at_job() -> Iterator[tuple[int, int, int, str]]:
    """(trainer PID, running job, queued copy, command)."""
    need_root()
    need_program("atd", "at", "atrm", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    sandbox = Path(tempfile.mkdtemp(prefix="rwtest-at-"))
    lease: DaemonLease | None = None
    jobs: list[int] = []
    trainer = sandbox / "at" / "train_fake.py"
    atd_pid = 0
    try:
        lease = DaemonLease("atd", ["atd", "-f"])
        atd_pid = lease.acquire()
        trainer.parent.mkdir()
        trainer.write_text(TRAINER_SOURCE)
        command = f"{PYTHON} {trainer}"
        # The copy first, an hour out: the pattern of a job that re-queues itself.
        jobs.append(_submit("now + 1 hour", command, sandbox))
        jobs.append(_submit("now", command, sandbox))
        # at(1) wakes the atd named in /run/atd.pid; one started for the tests may not be
        # that one (atd(8): SIGHUP makes it look at the queue now). Sent again every few
        # seconds while the job has not started: a wake-up that lands while atd is still
        # reading the queue (at(1)'s own, for the first job) can be lost, and atd then
        # sleeps until the job an hour out (CI, stop 43: "atd did not start the job within
        # 30 s", under the lanes' load). Sent only once atd catches it: before its handler
        # is installed, SIGHUP would end an atd started a moment ago.
        deadline = time.monotonic() + 30
        found = 0
        woken = 0.0
        while not found and time.monotonic() < deadline:
            if lease.ours and time.monotonic() - woken > 5:
                assert wake(atd_pid, signal.SIGHUP), f"atd (PID {atd_pid}) is gone"
                woken = time.monotonic()
            for pid in _pids():
                if _cmdline(pid) == (PYTHON, str(trainer)) and _chain_has(pid, atd_pid):
                    found = pid
            time.sleep(0.3)
        if not found:
            atq = subprocess.run(["atq"], capture_output=True, text=True).stdout
            alive = os.path.exists(f"/proc/{atd_pid}")
            pytest.fail(f"atd did not start the job within 30 s (atd alive: {alive}; atq: {atq!r})")
        yield found, jobs[1], jobs[0], command
    finally:
        for job in jobs:
            subprocess.run(["atrm", str(job)], capture_output=True)
        for pid in _pids():
            if _cmdline(pid) == (PYTHON, str(trainer)) and _chain_has(pid, atd_pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if lease is not None:
            lease.release()
        shutil.rmtree(sandbox, ignore_errors=True)


def test_at_job_resolves_to_job_number(at_job: tuple[int, int, int, str]) -> None:
    pid, job, copy, command = at_job
    table = ProcessTable()
    table.refresh()
    ctx = ResolveContext(table=table, now=datetime.now().astimezone())
    lineage = table.ancestors(pid)
    assert CronResolver().resolve(lineage, ctx) is None
    origin = AtResolver().resolve(lineage, ctx)
    assert origin is not None and origin.kind == "at"
    assert origin.fields["job"] == job
    assert origin.fields["queue"] == "a"
    assert origin.fields["user"] == "root"
    assert origin.fields["command"] == command
    assert origin.fields["pending_same_command"] == [copy]
    assert origin.remediation == f"atrm {copy}"  # the queued copy: atrm leaves the run


def test_a_run_whose_job_file_was_not_read_finds_its_copy_in_real_job_files(
    at_job: tuple[int, int, int, str],
) -> None:
    """Hostile tester i: a run whose own job file was not read is matched to queued jobs
    of its owner that run the same script, read as sh(1) parses at(1)'s real job files
    (the whole environment exported, then ``cd DIR || {``): the absolute copy, and a
    relative one resolved against the directory at(1) wrote; another owner's never."""
    from rogue_watchdog.lineage import at

    _pid, _job, copy, command = at_job
    trainer = command.split(" ", 1)[1]
    sandbox = Path(trainer).parent.parent
    relative = _submit("now + 2 hours", f"python3 at/{Path(trainer).name}", sandbox)
    try:
        program = at.program_of((PYTHON, trainer))
        scan = at._scan_queue(0, program)
        assert scan is not None
        copies, _unsure = scan
        assert copy in copies and relative in copies, (copy, relative, scan)
        other = at._scan_queue(1001, program)  # another owner's run: none is its copy
        assert other is not None and not {copy, relative} & {*other[0], *other[1]}, other
    finally:
        subprocess.run(["atrm", str(relative)], capture_output=True)


def test_the_advice_of_a_requeuing_at_job_is_read_live_and_ends_in_terminate(
    at_job: tuple[int, int, int, str], tmp_path: Path
) -> None:
    """Issue 31, case 3: the advice lists the queued copies as the queue is now (each scan
    reads it again), and stopping the source is followed by ``terminate`` (atrm does not
    stop the running job). BEFORE (4ec0a01): the stop line was `atrm JOB COPY` alone; then
    `atrm JOB COPY && rogue-watchdog terminate PID`; now disable-source does it (item 4)."""
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.hostpaths import config_args
    from rogue_watchdog.scan import Scanner

    pid, _job, copy, command = at_job

    def advice() -> tuple[str | None, str | None]:
        result = Scanner(parse_config("nvml: {enabled: false}\n", "t.yaml")).scan()
        [found] = [j for j in result.jobs if j.root_pid == pid]
        again = found.advice.restarts
        return found.advice.stop_line(pid), again.line() if again else None

    cli = config_args("t.yaml")  # printed commands carry the --config that judged the job
    # disable-source acts on at jobs (issue 31, item 4): it removes the queued copies,
    # read live when it runs, and terminate stops the running one.
    stop = (
        f"rogue-watchdog disable-source{cli} {pid} && rogue-watchdog terminate{cli} {pid}"
        "  # --dry-run first to preview"
    )
    assert cli.startswith(" --config /")
    assert advice() == (
        stop,
        f"restarts it: on schedule, at job(s) {copy} queued with the same commands (it "
        "re-queues itself)",
    )
    # It queued one more meanwhile: the next advice names both.
    later = _submit("now + 2 hours", command, tmp_path)
    try:
        assert advice() == (
            stop,
            f"restarts it: on schedule, at job(s) {copy}, {later} queued with the same "
            "commands (it re-queues itself)",
        )
    finally:
        subprocess.run(["atrm", str(later)], capture_output=True, check=False)


def test_a_running_scanner_reads_the_queue_again_as_soon_as_it_changes(
    at_job: tuple[int, int, int, str], tmp_path: Path
) -> None:
    """Issue 31, case 3, in the daemon's Scanner (kept across ticks): the origin it
    resolved is reused for 30 s while the lineage is the same, but not past a change of
    the at spool. BEFORE: the second look still said `atrm JOB COPY` (cached)."""
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.scan import Scanner

    pid, _job, copy, command = at_job
    scanner = Scanner(parse_config("nvml: {enabled: false}\n", "t.yaml"))

    def remediation() -> str | None:
        [found] = [j for j in scanner.scan().jobs if j.root_pid == pid]
        return found.origin.remediation

    assert remediation() == f"atrm {copy}"
    later = _submit("now + 2 hours", command, tmp_path)
    try:
        assert remediation() == f"atrm {copy} {later}"
    finally:
        subprocess.run(["atrm", str(later)], capture_output=True, check=False)
    assert remediation() == f"atrm {copy}"


def _atq() -> dict[int, str]:
    """Queued jobs: number → the rest of its atq line (time, queue, user)."""
    out = subprocess.run(["atq"], capture_output=True, text=True, check=True).stdout
    return {int(ln.split()[0]): " ".join(ln.split()[1:]) for ln in out.splitlines() if ln}


def test_disable_source_removes_the_queued_copies_and_undo_queues_them_again(
    at_job: tuple[int, int, int, str], tmp_path: Path
) -> None:
    """Issue 31, item 4 with a real atd: disable-source of a job that re-queues itself
    saves each queued copy's script from the spool and removes it with atrm (read live);
    the running job is left to terminate. Undo queues the saved script again at the same
    time in the same queue. BEFORE (bd663fe): "disabling a at source is not supported"."""
    import sys

    pid, _job, copy, _command = at_job
    config = tmp_path / "c.yaml"
    config.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")

    def cli(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stderr[-3000:]
        return done.returncode, done.stdout

    queued = _atq()[copy]
    rc, out = cli("disable-source", str(pid), "--dry-run")
    lines = out.splitlines()
    assert rc == 0, out
    assert lines[0].endswith(f": at job(s) {copy}"), out
    assert lines[1].startswith(f"  save /var/spool/cron/atjobs/a{copy:05x}"), out
    assert lines[2:] == [
        f"  atrm {copy}",
        "  (the running job is left to terminate: atrm does not stop it)",
    ], out
    assert copy in _atq()
    rc, out = cli("disable-source", str(pid))
    assert rc == 0, out
    assert copy not in _atq()
    last = out.splitlines()[-1]
    assert re.fullmatch(  # the command itself (issue 33: "use `terminate`" was no command)
        rf"the running job is not stopped by this; to stop it: rogue-watchdog terminate "
        rf"--config \S+ {pid}",
        last,
    ), out
    assert os.path.exists(f"/proc/{pid}")
    m = re.search(r"undo with: rogue-watchdog undo --config \S+ (\d+)", out)
    assert m is not None, out
    before = set(_atq())
    rc, out = cli("undo", m.group(1))
    again = set(_atq()) - before
    try:
        assert (rc, out.splitlines()[-1]) == (0, "outcome: ok"), out
        assert out.splitlines()[1].startswith("  at -q a -t "), out
        [new] = again
        assert _atq()[new] == queued  # the same time, queue and owner
        # The same commands: the re-queued job is one of its copies again.
        rc, out = cli("disable-source", str(pid), "--dry-run")
        assert out.splitlines()[0].endswith(f": at job(s) {new}"), out
    finally:
        for n in again:
            subprocess.run(["atrm", str(n)], capture_output=True, check=False)
