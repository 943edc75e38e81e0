"""The one-shot reads a process's status and cgroup only when something asks for them
(issue 34, item 2): candidates and the lineages of jobs, and every process's only where
something looks at every process (for a job's unit or container: the guard's "stopping
its source stops what", the service scope). Its answer is the answer of a table that
reads them at once, on a simulated procfs (tests/sim/host.py) with a rogue job in a
service's unit beside the service's own process, one in a container, one under cron,
and processes that are no job at all."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.render import result_json
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.procfs import (
    _CGROUP,
    _UID,
    _UNREAD,
    _UNREAD_UID,
    LateProc,
    ProcessTable,
)
from tests.sim.host import PY, SimContainer, SimHost


class CountingLate(ProcessTable):
    """A late-cgroup table that records whose cgroup was read."""

    def __init__(self, proc_root: str) -> None:
        super().__init__(proc_root, late_reads=True)
        self.cgroup_reads: list[int] = []
        self.status_reads: list[int] = []

    def late_cgroup(self, proc: object) -> tuple[str, ...]:
        self.cgroup_reads.append(proc.pid)  # type: ignore[attr-defined]
        return super().late_cgroup(proc)  # type: ignore[arg-type]

    def late_status(self, proc: object) -> tuple[int | None, tuple[int, ...]]:
        self.status_reads.append(proc.pid)  # type: ignore[attr-defined]
        return super().late_status(proc)  # type: ignore[arg-type]


def _host(tmp_path: Path) -> SimHost:
    h = SimHost(tmp_path, tmp_path / "nvml.json")
    for n in range(40):  # bystanders: sleepers in units of their own and in none
        h.spawn(1, ("/bin/sleep", str(1000 + n)), "/bin/sleep", ("system", ""),
                cgroup=f"/system.slice/idle{n % 4}.service" if n % 2 else "/")  # fmt: skip
    return h


def _scan(h: SimHost, table: ProcessTable) -> dict[str, object]:
    config = parse_config(
        f"nvml: {{enabled: false}}\n"
        f"paths: {{proc_root: '{h.proc}', crontab: '{h.etc}/crontab', cron_d: '{h.cron_d}',"
        f" cron_spool: ['{h.spool}'], unit_dirs: ['{h.root}/units'],"
        f" cgroup_root: '{h.root}/cgroup'}}\n"
        f"training: {{device_glob: '{h.root}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{h.root}/state'}}\n",
        "test.yaml",
    )
    scanner = Scanner(config, remember=False, one_shot=True)
    scanner.table = table
    out = result_json(scanner.scan(now=datetime(2026, 12, 6, 12, 0, tzinfo=UTC)))
    out.pop("duration_s")  # how long it took: the one field that may differ
    return out


def test_late_reads_give_the_answer_of_reads_at_once(tmp_path: Path) -> None:
    h = _host(tmp_path)
    hub = h.unit_run("td-hub.service", (PY, "/srv/hub/hub_server.py"), ("service", ""))
    h.spawn(hub.pid, (PY, "/srv/hub/train_hub.py"), PY, ("job", "hub"))
    h.container_start(SimContainer("c" * 64, "ctr-1", "always"))
    h.cron_run("python3 /srv/train_cron.py", (PY, "/srv/train_cron.py"), "cron")
    late = CountingLate(str(h.proc))
    at_once = _scan(h, ProcessTable(str(h.proc)))
    assert _scan(h, late) == at_once
    jobs = at_once["jobs"]
    assert isinstance(jobs, list) and len(jobs) == 3
    # The unit's job made the guard look at every process's cgroup: all were read, once.
    assert len(late.cgroup_reads) == len(set(late.cgroup_reads))


def test_only_what_is_asked_is_read(tmp_path: Path) -> None:
    h = _host(tmp_path)
    job = h.cron_run("python3 /srv/train_cron.py", (PY, "/srv/train_cron.py"), "cron")
    late = CountingLate(str(h.proc))
    at_once = _scan(h, ProcessTable(str(h.proc)))
    assert _scan(h, late) == at_once
    # A cron job's origin asks its lineage's cgroups, not the 40 bystanders'.
    assert job.pid in late.procs
    assert 0 < len(late.cgroup_reads) < len(late.procs) / 2
    assert 0 < len(late.status_reads) < len(late.procs) / 2
    assert len(late.status_reads) == len(set(late.status_reads))  # one read each


def test_a_process_gone_before_its_cgroup_is_read_has_none() -> None:
    # A real process: read by a late table, killed and reaped, then asked.
    child = subprocess.Popen(["sleep", "60"])
    try:
        table = ProcessTable(late_reads=True)
        table.refresh()
        proc = table.procs[child.pid]
        assert isinstance(proc, LateProc)
        assert _CGROUP.__get__(proc, type(proc)) is _UNREAD
        assert _UID.__get__(proc, type(proc)) == _UNREAD_UID
        mine = ProcessTable().read(os.getpid())
        assert mine is not None and table.procs[os.getpid()] == mine  # read when compared
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    time.sleep(0.01)
    assert proc.cgroup == ()
    assert (proc.uid, proc.user, proc.nspid) == (None, None, ())
