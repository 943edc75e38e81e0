"""A real single-node Slurm (munged + slurmctld + slurmd), fully sandboxed, for system tests.

Everything lives in one temporary directory: munged gets its own key (``--key-file``),
socket, PID, log and seed files, and Slurm is told to use that socket
(``AuthInfo=socket=...``, slurm.conf(5)); slurm.conf, state and spool directories are
in the sandbox too and every daemon and client finds them through ``SLURM_CONF``. Nothing
under /etc, /run or /var/spool is read or written, and /etc/munge/munge.key is never
touched. Ports are picked free at start. Teardown cancels every job the tests submitted,
waits for their slurmstepd to go, then stops the three daemons by PID.

Facts this relies on (Slurm 22.05, Debian 12): ``slurmctld -D -i`` / ``slurmd -D`` stay in
the foreground; a batch job runs as ``slurmstepd: [JOBID.batch]`` → ``/bin/sh
SPOOL/jobNNNNN/slurm_script`` → the wrapped command; with
``AccountingStorageType=accounting_storage/none`` Slurm still records ``--account`` as
given (no association check), so ``squeue``/``scontrol`` report it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import need, need_program, need_root

PYTHON = "/usr/bin/python3"
TRAINER = "import sys, time\ntime.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 600)\n"


def _start_ticks(pid: int) -> int | None:
    """The start time of PID (clock ticks after boot), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class StartedPids(list[int]):
    """PIDs the tests started beside Slurm's own, each pinned to its start time when
    added. :meth:`kill` signals only a process that is still the one added: a PID that
    ended (a copy the sweep killed) and was reused since, by another test or another
    engineer's process, is never signalled."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: dict[int, int | None] = {}

    def append(self, pid: int) -> None:
        self.starts[pid] = _start_ticks(pid)
        super().append(pid)

    def extend(self, pids: Iterable[int]) -> None:
        for pid in pids:
            self.append(pid)

    def kill(self, pids: Iterable[int] | None = None) -> None:
        """SIGKILL ``pids`` (default: all) that are still the processes added."""
        for pid in list(self if pids is None else pids):
            start = self.starts.get(pid)
            if start is None:
                continue  # gone when added: nothing of ours to stop
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                # Checked through the pidfd: the number cannot be reused under it.
                if _start_ticks(pid) == start:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmHarness:
    """One sandboxed Slurm cluster of one node; see the module docstring.

    Attributes:
        root: The sandbox directory (also the jobs' working directory).
        conf: Path of the sandbox slurm.conf.
        env: Environment for client commands (``SLURM_CONF`` set).
        trainer: A fake training script ``ROOT/train_fake.py`` (sleeps; argv[1] is a tag).
        cpus: CPUs the node offers (all of this host's).
        partition: The one partition's name.
    """

    partition = "rwtest"

    def __init__(self, proctrack: str = "linuxproc") -> None:
        self.proctrack = proctrack
        # Job ids of their own: another cluster on this host (a second harness, another
        # session's) numbers from 1, and a job cgroup names only the number.
        self.first_job_id = random.randrange(100_000, 900_000, 1000)
        self.root = Path(tempfile.mkdtemp(prefix="rw-slurm-", dir="/tmp"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.trainer = self.root / "train_fake.py"
        self.cpus = os.cpu_count() or 1
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.ctld: subprocess.Popen[bytes] | None = None
        self.job_ids: list[int] = []
        self.extra_pids = StartedPids()

    # -- start ---------------------------------------------------------------------

    def start(self) -> None:
        """Start munged, slurmctld and slurmd; wait until the node is idle.

        Raises:
            RuntimeError: A daemon exited or the node did not become idle in 30 s
                (the logs under ``root/log`` say why).
        """
        self.trainer.write_text(TRAINER)
        sock = self._start_munge()
        host = socket.gethostname().split(".")[0]
        for sub in ("state", "spool", "log", "out"):
            (self.root / sub).mkdir()
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=rwtest",
                    f"SlurmctldHost={host}(127.0.0.1)",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={sock}",
                    "CredType=cred/munge",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    f"StateSaveLocation={r}/state",
                    f"SlurmdSpoolDir={r}/spool",
                    f"SlurmctldPidFile={r}/slurmctld.pid",
                    f"SlurmdPidFile={r}/slurmd.pid",
                    f"SlurmctldLogFile={r}/log/slurmctld.log",
                    f"SlurmdLogFile={r}/log/slurmd.log",
                    f"PlugStackConfig={r}/plugstack.conf",
                    f"FirstJobId={self.first_job_id}",
                    *self._proctrack_lines(),
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "SchedulerType=sched/backfill",
                    "AccountingStorageType=accounting_storage/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    f"NodeName={host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 "
                    "State=UNKNOWN",
                    f"PartitionName={self.partition} Nodes={host} Default=YES "
                    "MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        (r / "plugstack.conf").write_text("")
        if self.proctrack == "cgroup":
            # cgroup.conf(5), next to slurm.conf: the v1 hierarchies of this host.
            (r / "cgroup.conf").write_text(
                "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                "ConstrainCores=no\nConstrainRAMSpace=yes\nAllowedRAMSpace=100\n"
            )
        self.ctld = self._daemon(["slurmctld", "-D", "-i"])
        self._daemon(["slurmd", "-D"])
        self._wait_node({"idle"})

    def _proctrack_lines(self) -> list[str]:
        if self.proctrack == "cgroup":
            return [
                "ProctrackType=proctrack/cgroup",
                "TaskPlugin=task/cgroup",
                "PrologFlags=Contain",
            ]
        return ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none"]

    def _daemon(self, argv: list[str]) -> subprocess.Popen[bytes]:
        r = self.root
        with open(r / "log" / f"{argv[0]}.out", "ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=r,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.daemons.append(proc)
        return proc

    def _wait_node(self, states: set[str], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_daemons()
            state = self.cli("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
            if state in states:
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm node not {states} after {timeout_s} s; logs in {self.root}/log")

    def stop_controller(self) -> None:
        """Stop slurmctld (SIGTERM, by PID): jobs keep running under slurmd, and every
        client call fails until :meth:`start_controller`."""
        assert self.ctld is not None
        self.ctld.terminate()
        self.ctld.wait(timeout=30)
        self.daemons.remove(self.ctld)
        self.ctld = None

    def start_controller(self) -> None:
        """Start slurmctld again from its saved state; wait until it answers and slurmd
        has registered with it (the node is UNKNOWN until then)."""
        assert self.ctld is None
        self.ctld = self._daemon(["slurmctld", "-D", "-i"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self._check_daemons()
            nodes = self.cli("sinfo", "-h", "-o", "%t", check=False)
            if nodes.returncode == 0 and not nodes.stdout.strip().startswith("unk"):
                return  # answering, and slurmd has registered again
            time.sleep(0.3)
        raise RuntimeError(f"slurmctld does not answer after 30 s; logs in {self.root}/log")

    def _start_munge(self) -> Path:
        mdir = self.root / "munge"
        mdir.mkdir(mode=0o755)
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        shutil.chown(mdir, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        sock = mdir / "munge.socket"
        self.daemons.append(
            subprocess.Popen(
                [
                    "/usr/sbin/munged",
                    "--foreground",
                    "--force",  # /tmp is world-writable (sticky): munged would refuse
                    f"--socket={sock}",
                    f"--key-file={key}",
                    f"--pid-file={mdir}/munged.pid",
                    f"--log-file={mdir}/munged.log",
                    f"--seed-file={mdir}/munged.seed",
                ],
                user="munge",
                group="munge",
                extra_groups=[],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        for _ in range(100):
            if sock.exists():
                return sock
            self._check_daemons()
            time.sleep(0.05)
        raise RuntimeError("munged did not create its socket")

    def _check_daemons(self) -> None:
        for d in self.daemons:
            if d.poll() is not None:
                name = d.args[0] if isinstance(d.args, list) else d.args
                raise RuntimeError(
                    f"{name!s} exited with {d.returncode}; logs in {self.root / 'log'}"
                )

    # -- client ----------------------------------------------------------------------

    def cli(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster, from the sandbox."""
        return subprocess.run(
            list(argv),
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        )

    def sbatch(self, *options: str, wrap: str) -> int:
        """Submit ``--wrap`` with ``options``; the job id is recorded for teardown."""
        out = self.cli(
            "sbatch", "--parsable", "-o", f"{self.root}/out/%j.out", *options, "--wrap", wrap
        )
        job_id = int(out.stdout.strip().split(";")[0])
        self.job_ids.append(job_id)
        return job_id

    def state(self, job_id: int) -> str:
        """``%T`` state of a job per ``squeue`` (empty once Slurm forgot it)."""
        return self.cli("squeue", "-h", "-j", str(job_id), "-o", "%T", check=False).stdout.strip()

    def wait_state(self, job_id: int, states: set[str], timeout_s: float = 30) -> str:
        """Poll until the job is in one of ``states``; returns it.

        Raises:
            AssertionError: Not reached within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            last = self.state(job_id)
            if last in states:
                return last
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} stayed {last!r}, wanted {sorted(states)}")

    def trainer_pid(self, tag: str, timeout_s: float = 30) -> int:
        """PID of the ``train_fake.py TAG`` process (a job's payload).

        Raises:
            AssertionError: No such process appeared within ``timeout_s``.
        """
        want = (PYTHON, str(self.trainer), tag)
        table = ProcessTable()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for pid, proc in table.refresh().items():
                if proc.cmdline[:3] == want:
                    return pid
            time.sleep(0.2)
        raise AssertionError(f"no process {' '.join(want)}")

    # -- stop --------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel our jobs, stop the daemons by PID, remove the sandbox. Never raises."""
        if self.job_ids and all(d.poll() is None for d in self.daemons):
            with contextlib.suppress(Exception):
                self.cli("scancel", *map(str, self.job_ids), check=False)
                self._wait_steps_gone(15)
        self.extra_pids.kill()
        # slurmd, slurmctld, then munged (reverse start order).
        for d in reversed(self.daemons):
            if d.poll() is None:
                d.terminate()
                try:
                    d.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    d.kill()
                    d.wait(timeout=5)
        self._kill_leftover_steps()
        self._remove_job_cgroups()
        shutil.rmtree(self.root, ignore_errors=True)

    def _remove_job_cgroups(self) -> None:
        """Remove the (empty) job cgroups of our jobs that slurmstepd left, deepest first;
        the ``slurm`` and ``uid_N`` levels only when no other slurmd runs on this host
        (another cluster may be using them)."""
        if self.proctrack != "cgroup":
            return
        jobs = {f"job_{j}" for j in self.job_ids}
        others = any(p.comm in ("slurmd", "slurmstepd") for p in ProcessTable().refresh().values())
        for top in [
            *Path("/sys/fs/cgroup").glob("*/slurm"),
            *Path("/sys/fs/cgroup").glob("*/slurm_*"),
        ]:
            dirs = sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts))
            for d in [*dirs, top]:
                ours = any(part in jobs for part in d.relative_to(top).parts)
                if ours or not others:
                    with contextlib.suppress(OSError):
                        d.rmdir()

    def _our_steps(self) -> list[int]:
        titles = tuple(f"slurmstepd: [{j}." for j in self.job_ids)
        out = []
        for pid, proc in ProcessTable().refresh().items():
            if proc.cmdline and proc.cmdline[0].startswith(titles):
                out.append(pid)
        return out

    def _wait_steps_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._our_steps() and time.monotonic() < deadline:
            time.sleep(0.2)

    def _kill_leftover_steps(self) -> None:
        # A slurmstepd of one of our jobs outliving slurmd: ours to end, with its payload.
        table = ProcessTable()
        table.refresh()
        for pid in self._our_steps():
            for victim in [*table.descendants(pid), pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)


def _cluster(proctrack: str) -> Iterator[SlurmHarness]:
    need_root()
    need_program("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
    try:
        import pwd

        pwd.getpwnam("munge")
    except KeyError:
        need(False, "needs the munge user (apt-get install munge)")
    if proctrack == "cgroup":
        need(
            os.path.isdir("/sys/fs/cgroup/freezer")
            and os.access("/sys/fs/cgroup/freezer", os.W_OK),
            "needs a writable cgroup v1 freezer hierarchy (proctrack/cgroup)",
        )
    harness = SlurmHarness(proctrack)
    try:
        harness.start()
        yield harness
    finally:
        harness.close()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmHarness]:
    """A running sandboxed single-node Slurm (proctrack/linuxproc) for the whole session."""
    yield from _cluster("linuxproc")


@pytest.fixture(scope="session")
def slurm_cgroup_cluster() -> Iterator[SlurmHarness]:
    """As :func:`slurm_cluster`, with proctrack/cgroup, task/cgroup and
    ``PrologFlags=Contain`` (cgroup v1: ``/slurm/uid_N/job_N/step_S`` in the freezer and
    memory hierarchies)."""
    yield from _cluster("cgroup")
