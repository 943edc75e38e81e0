"""The lifecycle simulator's Slurm node: jobs, their end, an unreachable controller, the
Epilog, and the job-end sweep (``health-check``) with the daemon's per-tick keeper.

:class:`SlurmSimHost` is a node written as files: a procfs tree (``stat``, ``cmdline``,
``status``, ``cgroup``, ``environ``, ``exe``, ``fd``) for the real
:class:`~rogue_watchdog.sources.procfs.ProcessTable`, a stand-in GPU device file, and a Slurm
CLI double (:meth:`SlurmSimHost.run`: ``squeue --json``, ``scontrol show job``,
``sinfo``, ``scontrol update``) answering from the model, or timing out, missing, or
answering with errors as an unreachable controller does. Jobs run under proctrack
``linuxproc`` (Slurm ends a job's process tree) or ``cgroup`` (Slurm ends what is in its
freezer cgroup). A job's worker can leave the tree (``setsid`` and its parent exits) and,
under cgroup, the freezer; it can ignore SIGTERM, start a copy of itself on SIGTERM (in a
new session, with its environment or an empty one), or be protected
(``enforcement.protect``). The daemon's record of what runs below slurmstepd is kept as
``Daemon._record_slurm_members`` keeps it.

:class:`SlurmMachine` drives the real :func:`~rogue_watchdog.actions.slurmsweep.sweep` and
:class:`~rogue_watchdog.actions.slurmrecord.SweepDrainKeeper` over it with hypothesis and checks,
after every step:

- S1 no signal to a process of a job not confirmed ended: every signal the product sends
  reaches a process of job N (ground truth) while Slurm, asked in that run, answered
  that N ended;
- S2 no resume while a recorded survivor lives: when the product resumes the node, no
  process it ever recorded in its drain record, nor any copy of one, is alive; and a
  sweep of one job never resumes while the record names another;
- S3 "not checked" is never 0: a sweep of job N run while Slurm cannot be asked, with a
  proven process of N outside slurmstepd, does not exit 0;
- S4 a dry run and the real run that follows agree: the same processes planned, and the
  same exit code unless a signal did not do what it should (a survivor, a copy);
- S5 every signal has its write-ahead record: at the moment of each signal the newest
  step in the state database is the ``intent`` naming it (the sweep's ``slurm-sweep``
  action); while the database refuses writes, no SIGTERM or SIGKILL is sent at all.

Nothing here reaches a real process: PIDs start at 4,100,000 and signals go to the model.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.slurmrecord import SweepDrainKeeper, record_path
from rogue_watchdog.actions.slurmsweep import SweepJournal, SweepReport, sweep
from rogue_watchdog.command import CommandResult
from rogue_watchdog.config import Config, parse_config
from rogue_watchdog.sources.procfs import ProcessTable
from rogue_watchdog.state import StateDB
from tests.sim.host import names_signal, unrecorded

FIRST_PID = 4_100_000
NODE = "simnode"
PY = "/usr/bin/python3"
STEPD = "/usr/sbin/slurmstepd"
ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")
USERS = (1001, 1002)


@dataclass
class SProc:
    """One simulated process and its ground truth.

    Attributes:
        label: ``("job", N)`` a process of job N (its worker, a copy of it);
            ``("stepd", N)``; ``("system", 0)``; ``("bystander", 0)`` anything else
            (a claim in its environment, another user's orphan).
        copy_of: The identity of the process it is a copy of, if it is one.
        respawn: On SIGTERM: start a copy (``env`` keeping the environment, ``empty``
            without one) and exit; None: exit (or ignore it when ``stubborn``).
    """

    pid: int
    ppid: int
    argv: tuple[str, ...]
    exe: str
    start: int
    label: tuple[str, int]
    uid: int = 0
    sid: int = 0
    env: dict[str, str] | None = None
    cgroup: tuple[str, ...] = ("0::/",)
    gpu: bool = False
    stubborn: bool = False
    respawn: str | None = None
    copy_of: tuple[int, int] | None = None

    @property
    def ident(self) -> tuple[int, int]:
        return (self.pid, self.start)


@dataclass
class SJob:
    """One Slurm job: id, owner, state, its slurmstepd, whether Slurm forgot it."""

    job_id: int
    uid: int
    state: str = "RUNNING"
    stepd: int | None = None
    main: int | None = None
    worker: int | None = None
    forgotten: bool = False


class SimForks:
    """The fork watch double: who forked whom since it was opened (complete or not)."""

    def __init__(self, host: SlurmSimHost, complete: bool) -> None:
        self.host = host
        self.first = len(host.forks)
        self._complete = complete
        self.reason = None if complete else "the kernel dropped process events (simulated)"

    @property
    def complete(self) -> bool:
        return self._complete

    def poll(self) -> None:
        pass

    def forked_by(self, roots: Iterable[int]) -> dict[int, int]:
        active, out = set(roots), {}
        events = self.host.forks[self.first :]
        if not self._complete:
            events = events[: len(events) // 2]  # what arrived before the loss
        for parent, child in events:
            if parent in active:
                active.add(child)
                out[child] = parent
        return out

    def close(self) -> None:
        pass


@dataclass
class SimSlurmEffects(RecordingEffects):
    """Signals applied to the model; every one checked against S1 and S5."""

    host: Any = None
    violations: list[str] = field(default_factory=list)
    seen: list[tuple[int, int]] = field(default_factory=list)  # every signal, kept
    state_db: Path | None = None
    storage_ok: bool = True

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        name = signal.Signals(sig).name
        if not self.storage_ok and sig in (signal.SIGTERM, signal.SIGKILL):
            self.violations.append(f"S5: {name} to PID {pid} while nothing can be recorded")
        elif self.state_db is not None and (sig != signal.SIGCONT or self.storage_ok):
            missing = unrecorded(
                self.state_db, "signal", names_signal(pid, start_ticks, name),
                f"{name} to PID {pid}",
            )  # fmt: skip
            if missing is not None:
                self.violations.append(f"S5: unrecorded: {missing}")
        super().send_signal(pid, sig, start_ticks)
        self.seen.append((pid, sig))
        host: SlurmSimHost = self.host
        proc = host.procs.get(pid)
        if proc is None or (start_ticks is not None and proc.start != start_ticks):
            raise ProcessLookupError(pid)
        kind, job = proc.label
        if sig != signal.SIGCONT and (kind != "job" or job not in host.confirmed):
            self.violations.append(
                f"S1: signal {sig} to PID {pid} {proc.label} (confirmed ended in this run: "
                f"{sorted(host.confirmed)})"
            )
        if sig == signal.SIGCONT:
            host.frozen.discard(pid)
            if pid in host.pending_term:
                host.pending_term.discard(pid)
                host.term(pid)
        elif sig == signal.SIGSTOP:
            host.frozen.add(pid)
        elif sig == signal.SIGKILL:
            host.exit(pid)
        elif sig == signal.SIGTERM:
            if pid in host.frozen:
                host.pending_term.add(pid)  # handled when continued
            else:
                host.term(pid)


class SlurmSimHost:
    """The simulated node (see the module docstring).

    Args:
        root: Sandbox directory.
        plugin: ``linuxproc`` or ``cgroup``.
    """

    def __init__(self, root: Path, plugin: str) -> None:
        self.root = root
        self.plugin = plugin
        self.proc = root / "proc"
        self.dev = root / "dev"
        for d in (self.proc, self.dev, root / "state"):
            d.mkdir(parents=True, exist_ok=True)
        (self.dev / "nvidia0").write_text("")
        (self.proc / "stat").write_text("cpu 0 0 0 0\nbtime 1800000000\n")
        self.procs: dict[int, SProc] = {}
        self.jobs: dict[int, SJob] = {}
        self.next_pid = FIRST_PID
        self.ticks = 1000
        self.next_job = 100
        self.controller = "up"
        self.drained = False
        self.reason: str | None = None
        self.recorded: dict[tuple[int, int], tuple[int, int | None]] = {}
        self.forks: list[tuple[int, int]] = []
        self.frozen: set[int] = set()
        self.pending_term: set[int] = set()
        # Per product run: jobs Slurm answered ended for; whether a resume is allowed.
        self.confirmed: set[int] = set()
        self.resume_forbidden: str | None = None
        self.ever_recorded: set[tuple[int, int]] = set()
        self.violations: list[str] = []
        self.resumes = 0
        self.epilog_job: int | None = None
        self.ever_proven: set[tuple[int, int]] = set()
        self.copies_known: dict[tuple[int, int], tuple[int, int]] = {}
        self.add(1, 0, ("/sbin/init",), "/sbin/init", ("system", 0))
        self.slurmd = self.add(
            self._pid(), 1, ("/usr/sbin/slurmd", "-D"), "/usr/sbin/slurmd", ("system", 0)
        )

    # -- processes ----------------------------------------------------------------------

    def _pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def add(self, pid: int, ppid: int, argv: tuple[str, ...], exe: str,
            label: tuple[str, int], **kw: Any) -> SProc:  # fmt: skip
        self.ticks += 1
        proc = SProc(pid, ppid, argv, exe, self.ticks, label, **kw)
        proc.sid = proc.sid or pid
        self.procs[pid] = proc
        self.write(proc)
        return proc

    def spawn(self, parent: SProc, argv: tuple[str, ...], label: tuple[str, int],
              **kw: Any) -> SProc:  # fmt: skip
        kw.setdefault("uid", parent.uid)
        kw.setdefault("sid", parent.sid)
        kw.setdefault("env", dict(parent.env) if parent.env is not None else None)
        kw.setdefault("cgroup", parent.cgroup)
        child = self.add(self._pid(), parent.pid, argv, argv[0], label, **kw)
        self.forks.append((parent.pid, child.pid))
        return child

    def write(self, p: SProc) -> None:
        d = self.proc / str(p.pid)
        d.mkdir(exist_ok=True)
        comm = os.path.basename(p.argv[0])[:15]
        (d / "stat").write_text(
            f"{p.pid} ({comm}) S {p.ppid} {p.sid} {p.sid} 0 -1 4194560 0 0 0 0 "
            f"0 0 0 0 20 0 1 0 {p.start} 0 0\n"
        )
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in p.argv))
        (d / "status").write_text(
            f"Name:\t{comm}\nUid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}\nNSpid:\t{p.pid}\n"
        )
        (d / "cgroup").write_text("".join(ln + "\n" for ln in p.cgroup))
        if p.env is not None:
            (d / "environ").write_bytes(
                b"".join(f"{k}={v}".encode() + b"\0" for k, v in p.env.items())
            )
        elif (d / "environ").exists():
            (d / "environ").unlink()
        for link, target in (("exe", p.exe),):
            if (d / link).is_symlink():
                (d / link).unlink()
            os.symlink(target, d / link)
        fd = d / "fd"
        fd.mkdir(exist_ok=True)
        if p.gpu and not (fd / "3").is_symlink():
            os.symlink(self.dev / "nvidia0", fd / "3")

    def exit(self, pid: int) -> None:
        proc = self.procs.pop(pid, None)
        if proc is None:
            return
        self.frozen.discard(pid)
        self.pending_term.discard(pid)
        shutil.rmtree(self.proc / str(pid), ignore_errors=True)
        for child in self.procs.values():
            if child.ppid == pid:
                child.ppid = 1
                self.write(child)

    def term(self, pid: int) -> None:
        """SIGTERM reaches the process (not stopped)."""
        proc = self.procs[pid]
        if proc.respawn is not None:
            self.copy(proc)
            self.exit(pid)
        elif not proc.stubborn:
            self.exit(pid)

    def copy(self, proc: SProc) -> SProc:
        """``proc`` starts a copy of itself in a new session (and its environment, or an
        empty one); the copy inherits its cgroup."""
        env = dict(proc.env or {}) if proc.respawn == "env" else {}
        argv = (*proc.argv[:2], "copy")
        c = self.spawn(proc, argv, proc.label, sid=0, env=env, gpu=proc.gpu,
                       respawn=proc.respawn, copy_of=proc.ident)  # fmt: skip
        self.copies_known[c.ident] = proc.ident
        return c

    def descendants(self, pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            cur = todo.pop()
            kids = [p.pid for p in self.procs.values() if p.ppid == cur]
            out += kids
            todo += kids
        return out

    def copy_origin(self, proc: SProc) -> set[tuple[int, int]]:
        """``proc`` and every process it is (transitively) a copy of."""
        out = {proc.ident}
        cur = proc.copy_of
        seen = 0
        while cur is not None and seen < 1000:
            out.add(cur)
            cur = self.copies_known.get(cur)
            seen += 1
        return out

    # -- Slurm --------------------------------------------------------------------------

    def cgroup_lines(self, job: SJob, stepd: bool = False) -> tuple[str, ...]:
        if self.plugin != "cgroup":
            return ("0::/",)
        base = f"/slurm_{NODE}/uid_{job.uid}/job_{job.job_id}"
        if stepd:
            return (f"6:freezer:{base}", f"4:memory:{base}/step_batch", "0::/")
        return (f"6:freezer:{base}/step_batch", f"4:memory:{base}/step_batch/task_0", "0::/")

    def submit(self, uid: int, *, gpu: bool, stubborn: bool, respawn: str | None,
               protected: bool) -> SJob:  # fmt: skip
        self.next_job += 1
        job = SJob(self.next_job, uid)
        self.jobs[job.job_id] = job
        stepd = self.add(self._pid(), 1, (f"slurmstepd: [{job.job_id}.batch]",), STEPD,
                         ("stepd", job.job_id), cgroup=self.cgroup_lines(job, True))  # fmt: skip
        env = {"SLURM_JOB_ID": str(job.job_id), "SLURM_JOB_UID": str(uid)}
        main = self.spawn(stepd, (PY, "/home/u/train.py"), ("job", job.job_id), uid=uid,
                          env=env, cgroup=self.cgroup_lines(job))  # fmt: skip
        name = "/home/u/worker_protected.py" if protected else "/home/u/worker.py"
        worker = self.spawn(main, (PY, name), ("job", job.job_id), gpu=gpu,
                            stubborn=stubborn, respawn=respawn)  # fmt: skip
        job.stepd, job.main, job.worker = stepd.pid, main.pid, worker.pid
        return job

    def escape(self, job: SJob) -> None:
        """The worker leaves the job's session and tree (its parent exits); under cgroup
        it leaves the freezer cgroup too (as a root-run job could)."""
        worker = self.procs.get(job.worker or 0)
        if worker is None:
            return
        worker.sid = worker.pid
        if self.plugin == "cgroup":
            worker.cgroup = tuple(
                "6:freezer:/" if ln.startswith("6:freezer:") else ln for ln in worker.cgroup
            )
        self.write(worker)
        if job.main in self.procs:
            self.exit(job.main)

    def end(self, job: SJob, state: str) -> None:
        """Slurm ends the job: what it tracks dies, slurmstepd exits."""
        if job.stepd is None:
            return
        if self.plugin == "cgroup":
            mark = f"/job_{job.job_id}/"
            doomed = [
                p.pid
                for p in self.procs.values()
                if any(ln.startswith("6:freezer:") and mark in ln + "/" for ln in p.cgroup)
                and p.label[0] != "stepd"
            ]
        else:
            doomed = self.descendants(job.stepd)
        for pid in doomed:
            self.exit(pid)
        self.exit(job.stepd)
        job.stepd = None
        job.state = state

    def record_members(self) -> None:
        """The daemon's record of processes below a slurmstepd (still alive)."""
        alive = {p.ident for p in self.procs.values()}
        self.recorded = {k: v for k, v in self.recorded.items() if k in alive}
        for job in self.jobs.values():
            if job.stepd is None:
                continue
            for pid in self.descendants(job.stepd):
                p = self.procs[pid]
                self.recorded[p.ident] = (job.job_id, p.uid)

    # -- the Slurm CLI ------------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        argv = tuple(argv)
        mode = self.controller
        if mode == "timeout":
            return CommandResult.timed_out(argv[0], timeout_s)
        if mode == "missing":
            return CommandResult.not_runnable(argv[0])
        down = "Unable to contact slurm controller (connect failure)"
        if argv[:2] == ("squeue", "--json"):
            if mode == "errors":
                doc = {"errors": [{"description": "Failed while looking for jobs"}], "jobs": []}
                return CommandResult(0, json.dumps(doc), "")
            jobs = [
                {"job_id": j.job_id, "job_state": j.state, "user_name": str(j.uid), "name": "x"}
                for j in self.jobs.values()
                if not j.forgotten
            ]
            self._confirm(int(argv[3]))
            return CommandResult(0, json.dumps({"errors": [], "jobs": jobs}), "")
        if mode == "errors":
            return CommandResult(1, "", f"slurm_load_jobs error: {down}\n")
        if argv[:3] == ("scontrol", "show", "job"):
            job = self.jobs.get(int(argv[3]))
            self._confirm(int(argv[3]))
            if job is None or job.forgotten:
                return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
            return CommandResult(
                0, f"JobId={job.job_id} JobName=x UserId={job.uid}({job.uid}) "
                f"JobState={job.state}\n", "",
            )  # fmt: skip
        if argv[0] == "sinfo":
            return CommandResult(
                0, f"{'drained' if self.drained else 'idle'}|{self.reason or 'none'}\n", ""
            )
        if argv[:2] == ("scontrol", "update"):
            if "state=drain" in argv:
                self.drained, self.reason = True, argv[-1].removeprefix("reason=")
                return CommandResult(0, "", "")
            if not self.drained:
                return CommandResult(1, "", "slurm_update error: Invalid node state specified\n")
            self._resumed()
            self.drained, self.reason = False, None
            return CommandResult(0, "", "")
        return CommandResult.not_runnable(argv[0])

    def _confirm(self, job_id: int) -> None:
        job = self.jobs.get(job_id)
        completing = job is not None and job.state == "COMPLETING" and self.epilog_job == job_id
        if job is None or job.forgotten or job.state in ENDED or completing:
            self.confirmed.add(job_id)

    def _resumed(self) -> None:
        """S2 at the moment the product resumes the node."""
        self.resumes += 1
        if self.resume_forbidden:
            self.violations.append(f"S2: {self.resume_forbidden}")
        for p in self.procs.values():
            if self.copy_origin(p) & self.ever_recorded:
                self.violations.append(
                    f"S2: resumed while PID {p.pid} {p.label} lives (recorded, or a copy of "
                    "a recorded process)"
                )

    def read_record(self) -> dict[str, Any]:
        try:
            with open(record_path(str(self.root / "state")), encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def note_record(self) -> None:
        """What the product recorded so far (S2: every kind but ``unchecked``, which
        Slurm's answer about its job settles; S3: the proven kinds)."""
        for entry in (self.read_record().get("jobs") or {}).values():
            for rp in entry.get("procs", []):
                ident = (rp["pid"], rp["start_ticks"])
                if rp["kind"] not in ("unchecked", "unchecked_claim"):
                    self.ever_recorded.add(ident)
                if rp["kind"] in ("survived", "foreign", "unchecked"):
                    self.ever_proven.add(ident)


class SlurmMachine(RuleBasedStateMachine):
    """See the module docstring."""

    workdir: ClassVar[Path] = Path(tempfile.gettempdir())
    counts: ClassVar[dict[str, int]] = {
        "machines": 0, "ticks": 0, "jobs": 0, "signals": 0, "sweeps": 0, "resumes": 0,
    }  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="slurm-sim-", dir=self.workdir))
        self.plugin = "linuxproc"
        self.host = self._host("linuxproc")
        self.events = "complete"
        self.counts["machines"] += 1

    def _host(self, plugin: str) -> SlurmSimHost:
        if getattr(self, "db", None) is not None:
            self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        host = SlurmSimHost(self.dir, plugin)
        (host.root / "state").mkdir(parents=True, exist_ok=True)
        self.db = StateDB(str(host.root / "state"))
        self.effects = SimSlurmEffects(host=host, state_db=self.db.path)
        return host

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def config(self) -> Config:
        h = self.host
        return parse_config(
            "nvml: {enabled: false}\n"
            f"paths: {{proc_root: '{h.proc}'}}\n"
            f"training: {{device_glob: '{h.dev}/nvidia[0-9]*'}}\n"
            f"daemon: {{state_dir: '{h.root}/state', "
            f"events: {'off' if self.events == 'off' else 'auto'}}}\n"
            f"slurm: {{node_name: {NODE}, sweep_grace_s: 0.001, command_timeout_s: 1}}\n"
            "enforcement: {protect: ['*worker_protected*']}\n",
            str(self.dir / "config.yaml"),
        )

    # -- steps --------------------------------------------------------------------------

    @precondition(lambda self: not self.host.jobs)
    @rule(plugin=st.sampled_from(["linuxproc", "cgroup"]))
    def choose_plugin(self, plugin: str) -> None:
        self.plugin = plugin
        self.host = self._host(plugin)

    @precondition(lambda self: len(self.host.jobs) < 6)
    @rule(
        uid=st.sampled_from(USERS), gpu=st.booleans(),
        kind=st.sampled_from(["plain", "stubborn", "respawn-env", "respawn-empty", "protected"]),
        escapes=st.sampled_from([True, True, False]),
    )  # fmt: skip
    def submit(self, uid: int, gpu: bool, kind: str, escapes: bool) -> None:
        """A job starts; its worker may leave it at once (the daemon ticked while the
        worker still ran below slurmstepd: it is recorded)."""
        respawn = kind.split("-")[1] if kind.startswith("respawn") else None
        job = self.host.submit(uid, gpu=gpu, stubborn=kind == "stubborn", respawn=respawn,
                               protected=kind == "protected")  # fmt: skip
        if escapes:
            self.host.record_members()
            self.host.escape(job)
        self.counts["jobs"] += 1

    def _jobs(self, running: bool | None = None) -> list[int]:
        return sorted(
            j.job_id
            for j in self.host.jobs.values()
            if running is None or (j.stepd is not None) == running
        )

    @precondition(lambda self: self._jobs(True))
    @rule(data=st.data())
    def daemon_records(self, data: st.DataObject) -> None:
        """A daemon tick while jobs run: the member record, and the drain keeper."""
        self.host.record_members()
        self._keeper()

    @precondition(lambda self: self._jobs(True))
    @rule(data=st.data())
    def worker_escapes(self, data: st.DataObject) -> None:
        job = self.host.jobs[data.draw(st.sampled_from(self._jobs(True)))]
        self.host.escape(job)

    @precondition(lambda self: self._jobs(True))
    @rule(data=st.data(), state=st.sampled_from(["COMPLETED", "CANCELLED"]),
          epilog=st.booleans())  # fmt: skip
    def job_ends(self, data: st.DataObject, state: str, epilog: bool) -> None:
        """Slurm ends a job; its Epilog may run while it is COMPLETING."""
        job = self.host.jobs[data.draw(st.sampled_from(self._jobs(True)))]
        self.host.end(job, "COMPLETING" if epilog else state)
        if epilog:
            self._sweep(job.job_id, epilog=True, dry_first=data.draw(st.booleans()))
            job.state = state

    @rule(mode=st.sampled_from(["up", "up", "up", "up", "timeout", "missing", "errors"]))
    def controller(self, mode: str) -> None:
        self.host.controller = mode

    @rule(events=st.sampled_from(["complete", "complete", "lost", "off"]))
    def fork_events(self, events: str) -> None:
        """Kernel process events: complete, some dropped, or off."""
        self.events = events

    @rule(
        data=st.data(), epilog=st.booleans(), dry_first=st.booleans(),
        how=st.sampled_from(["leftover", "leftover", "ended", "running", "nonexistent", "all"]),
    )  # fmt: skip
    def health_check(self, data: st.DataObject, how: str, epilog: bool, dry_first: bool) -> None:
        """``health-check`` by hand or from HealthCheckProgram: a job (one with something
        left, an ended one, a running one, one that never existed), or every job."""
        if how == "all":
            self._sweep(None, epilog=False, dry_first=dry_first)
            return
        pool = {
            "leftover": sorted({self.host.procs[p].label[1] for p in self._leftovers()}),
            "ended": self._jobs(False),
            "running": self._jobs(True),
        }.get(how, [])
        job = data.draw(st.sampled_from(pool)) if pool else 99
        self._sweep(job, epilog=epilog, dry_first=dry_first)

    @precondition(lambda self: self._leftovers())
    @rule(data=st.data())
    def leftover_respawns(self, data: st.DataObject) -> None:
        """A leftover starts a copy of itself and exits, between sweeps."""
        proc = self.host.procs[data.draw(st.sampled_from(self._leftovers()))]
        proc.respawn = proc.respawn or data.draw(st.sampled_from(["env", "empty"]))
        self.host.copy(proc)
        self.host.exit(proc.pid)

    @precondition(lambda self: self._leftovers())
    @rule(data=st.data())
    def leftover_forks(self, data: st.DataObject) -> None:
        """A leftover forks a child (which stays its child)."""
        proc = self.host.procs[data.draw(st.sampled_from(self._leftovers()))]
        self.host.spawn(proc, (*proc.argv[:2], "child"), proc.label)

    @rule(uid=st.sampled_from([0, *USERS]), data=st.data(), gpu=st.booleans())
    def claim(self, uid: int, data: st.DataObject, gpu: bool) -> None:
        """Someone's process carries SLURM_JOB_ID of a job (or of none): a claim."""
        job = data.draw(st.sampled_from([*self._jobs(), 99]))
        env = {"SLURM_JOB_ID": str(job)}
        self.host.add(self.host._pid(), 1, ("/bin/sleep", "600"), "/bin/sleep",
                      ("bystander", 0), uid=uid, env=env, gpu=gpu)  # fmt: skip

    @rule(uid=st.sampled_from(USERS))
    def bystander_orphan(self, uid: int) -> None:
        """A user's own process, adopted by PID 1 (nohup after logout)."""
        self.host.add(self.host._pid(), 1, (PY, "/home/u/notebook.py"), PY, ("bystander", 0),
                      uid=uid)  # fmt: skip

    @precondition(lambda self: len(self.host.procs) > 2)
    @rule(data=st.data())
    def something_exits(self, data: st.DataObject) -> None:
        pids = sorted(p for p, proc in self.host.procs.items() if proc.label[0] != "system"
                      and proc.label[0] != "stepd")  # fmt: skip
        if pids:
            self.host.exit(data.draw(st.sampled_from(pids)))

    def _recorded_alive(self) -> list[int]:
        idents = self.host.ever_recorded | self.host.ever_proven
        return sorted(p.pid for p in self.host.procs.values() if p.ident in idents)

    @precondition(lambda self: self._recorded_alive())
    @rule(data=st.data())
    def admin_kills(self, data: st.DataObject) -> None:
        """An admin ends a process the drain is for."""
        self.host.exit(data.draw(st.sampled_from(self._recorded_alive())))

    @rule(action=st.sampled_from(["drain", "resume", "none", "none", "none"]))
    def admin(self, action: str) -> None:
        """An admin drains the node for a reason of their own, or resumes it (rarely)."""
        h = self.host
        if action == "drain":
            h.drained, h.reason = True, "admin: bad DIMM"
        elif h.drained:
            h.drained, h.reason = False, None

    @precondition(lambda self: self._jobs(False))
    @rule(data=st.data())
    def slurm_forgets(self, data: st.DataObject) -> None:
        """MinJobAge passed: Slurm no longer knows an ended job."""
        self.host.jobs[data.draw(st.sampled_from(self._jobs(False)))].forgotten = True

    @rule()
    def daemon_tick(self) -> None:
        self.host.record_members()
        self._keeper()

    # -- running the product ------------------------------------------------------------

    def _leftovers(self) -> list[int]:
        return sorted(
            p.pid
            for p in self.host.procs.values()
            if p.label[0] == "job" and self.host.jobs[p.label[1]].stepd is None
        )

    def _keeper(self) -> None:
        h = self.host
        h.confirmed = set()
        h.resume_forbidden = None
        table = ProcessTable(str(h.proc))
        table.refresh()
        SweepDrainKeeper(lambda: self.config().slurm, lambda: str(h.root / "state"), h.run,
                         retry_s=0.0)(table)  # fmt: skip
        self._after()
        self.counts["ticks"] += 1

    def _sweep(self, job: int | None, *, epilog: bool, dry_first: bool) -> None:
        h = self.host
        config = self.config()
        if epilog and job is None:
            return
        rec = h.read_record()
        others = [int(j) for j, e in (rec.get("jobs") or {}).items()
                  if e.get("procs") and int(j) != job]  # fmt: skip
        before_mode = h.controller
        proven = self._proven(job) if job is not None else []
        dry: SweepReport | None = None
        if dry_first:
            h.confirmed = set()
            h.epilog_job = job if epilog else None
            h.resume_forbidden = "a dry run resumed the node"
            dry = self._run(config, job, epilog, dry_run=True)
        h.confirmed = set()
        h.epilog_job = job if epilog else None
        h.resume_forbidden = (
            f"a sweep of job {job} resumed while the record names job {others}"
            if job is not None and others
            else None
        )
        real = self._run(config, job, epilog, dry_run=False)
        self.counts["sweeps"] += 1
        if before_mode != "up" and proven and real.exit_code == 0:
            h.violations.append(
                f"S3: sweep of job {job} exited 0 with Slurm {before_mode} and proven PIDs "
                f"{proven} outside slurmstepd"
            )
        if dry is not None:
            self._agree(dry, real)
        self._after()

    def _run(self, config: Config, job: int | None, epilog: bool, dry_run: bool) -> SweepReport:
        h = self.host
        recorded = dict(h.recorded)
        return sweep(
            config, job_id=job, dry_run=dry_run, run=h.run, effects=self.effects,
            epilog=epilog, epilog_uid=h.jobs[job].uid if job in h.jobs else None,
            recorded=recorded, forks=self._forks, journal=SweepJournal(self.db, "sim"),
        )  # fmt: skip

    @rule(ok=st.booleans())
    def storage(self, ok: bool) -> None:
        """The state database refuses writes (full, unwritable) or takes them again."""
        self.effects.storage_ok = ok
        self.db.conn.execute(f"PRAGMA query_only={0 if ok else 1}")
        if not ok:
            self.counts["storage_faults"] = self.counts.get("storage_faults", 0) + 1

    def _forks(self, _config: Config) -> SimForks | None:
        return None if self.events == "off" else SimForks(self.host, self.events == "complete")

    def _proven(self, job: int) -> list[int]:
        """Live processes of ``job`` outside slurmstepd the product can prove (the
        daemon's record, the job cgroup, its own drain record)."""
        h = self.host
        out = []
        for p in h.procs.values():
            if p.label != ("job", job) or self._below_stepd(p):
                continue
            cg = any(f"/job_{job}/" in ln for ln in p.cgroup)
            if p.ident in h.recorded or cg or p.ident in h.ever_proven:
                out.append(p.pid)
        return sorted(out)

    def _below_stepd(self, p: SProc) -> bool:
        cur, hops = self.host.procs.get(p.ppid), 0
        while cur is not None and hops < 100:
            if cur.label[0] == "stepd":
                return True
            cur, hops = self.host.procs.get(cur.ppid), hops + 1
        return False

    @staticmethod
    def _planned(report: SweepReport) -> set[int]:
        out = set()
        for outcomes in report.outcomes.values():
            first = outcomes[0]
            out |= {p.pid for p in first.procs if p.result == "would-signal" or p.signals}
            # A wave whose record could not be written was planned, and not made.
            out |= {p.pid for p in first.procs if "could not be recorded" in p.reason}
        return out

    def _agree(self, dry: SweepReport, real: SweepReport) -> None:
        """S4: the same plan; the same exit code unless a signal did not do its work."""
        h = self.host
        if self._planned(dry) != self._planned(real):
            h.violations.append(f"S4: planned {self._planned(dry)} dry, {self._planned(real)} real")
        odd = real.copies or real.uncertain or set(real.survivors) - set(dry.survivors)
        if not odd and dry.exit_code != real.exit_code:
            h.violations.append(f"S4: exit {dry.exit_code} dry, {real.exit_code} real")

    def _after(self) -> None:
        h = self.host
        h.note_record()
        for p in h.procs.values():
            if p.copy_of is not None:
                h.copies_known[p.ident] = p.copy_of
        self.counts["signals"] += len(self.effects.signals())
        self.counts["resumes"] = self.counts.get("resumes", 0) + h.resumes
        h.resumes = 0
        self.effects.calls.clear()
        h.frozen.clear()
        h.pending_term.clear()

    # -- the invariants -----------------------------------------------------------------

    @invariant()
    def never_wrong_in_the_dangerous_direction(self) -> None:
        problems = [*self.effects.violations, *self.host.violations]
        self.effects.violations.clear()
        self.host.violations.clear()
        assert not problems, "; ".join(problems)

    @invariant()
    def never_touches_real_processes(self) -> None:
        for pid, _sig in self.effects.signals():
            assert pid >= FIRST_PID, f"a real PID {pid} was signalled"
