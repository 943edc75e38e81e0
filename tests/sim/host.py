"""A simulated GPU host for the lifecycle simulator: a procfs tree written as files, real
crontab files, the fake ``libnvidia-ml.so.1`` (through the real pynvml path), and a
side-effects double that applies signals to the simulated processes.

Every simulated process carries its ground truth (:attr:`SimProc.label`): which job it
is part of, or that it is a bystander, a shared shell or the system. The invariants of
:mod:`tests.sim.machine` compare what rogue-watchdog decides with that truth. Nothing
here reaches a real process: PIDs start at 4,000,000 (above any real ``pid_max`` here),
the procfs is a directory of files, and no signal or file change leaves the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.command import CommandResult
from tests.fakenvml.build import write_config

CLK = os.sysconf("SC_CLK_TCK")
BOOT = 1_800_000_000.0  # the simulated host's boot time (btime)
FIRST_PID = 4_000_000
GIB = 1 << 30
PY = "/usr/bin/python3"
PIPELINE_SCRIPT = "/srv/pipeline/train.py"
GPUS = ("GPU-sim-0", "GPU-sim-1")


@dataclass
class SimProc:
    """One simulated process.

    Attributes:
        label: Ground truth ``(role, key)``: role ``job`` (a job's own process),
            ``wrapper`` (exists only for that job), ``cron-child`` (cron's per-run
            child; atd's too), ``shared`` (a shell that also runs something else),
            ``bystander``,
            ``service`` (a unit's own process doing other work, such as a hub that
            launches trainers), ``system``; key names the job (``pipeline#3``), empty
            for the rest.
        cgroup: Its cgroup path (a unit's processes share ``/system.slice/U``).
        devices: Its v1 ``devices`` cgroup path (a GPU denial moves it into a child);
            a child is born in its parent's.
        gpu: ``(index, memory in bytes or None)`` NVML lists it with.
        stubborn: Ignores SIGTERM (only SIGKILL ends it).
        fd0: Where its standard input points (``/proc/PID/fd/0``): an at job's shell
            reads its job file there.
    """

    pid: int
    ppid: int
    argv: tuple[str, ...]
    exe: str
    start: int
    label: tuple[str, str]
    uid: int = 0
    pgid: int = 0
    sid: int = 0
    state: str = "S"
    env: dict[str, str] | None = None
    gpu: tuple[int, int | None] | None = None
    stubborn: bool = False
    cgroup: str = "/"
    devices: str = "/"
    fd0: str | None = None


@dataclass
class SimContainer:
    """A Docker container whose main process is a trainer, under its restart policy.

    Attributes:
        cid: The 64-hex container id (its cgroup is ``/docker/<cid>``).
        policy: ``always``, ``unless-stopped``, ``on-failure`` or ``no``
            (``docker update --restart`` changes it).
        stopped: Stopped by ``docker stop``: no policy starts it again (docker-run(1)).
        main: The PID of its main process while it runs.
        shim: The PID of its ``containerd-shim-runc-v2`` while it runs.
    """

    cid: str
    name: str
    policy: str
    stopped: bool = False
    main: int | None = None
    shim: int | None = None
    policies: set[str] = field(default_factory=set)  # every policy it had


AT_COMMANDS = "at -f /home/u/train_at.sh now + 5 minutes\npython3 /home/u/train_at.py"
AT_HEADER = (
    "#!/bin/sh\n# atrun uid=1000 gid=1000\n# mail u 0\numask 22\n"
    "cd /home/u || {\n\t echo 'Execution directory inaccessible' >&2\n\t exit 1\n}\n"
)


SUP_CONF = (
    "[supervisord]\nnodaemon=true\n\n[program:trainer]\n"
    "command=/usr/bin/python3 /srv/sup/train_sup.py\nautostart=true\nautorestart=true\n"
)


def read_sup(conf: Path) -> dict[str, str]:
    """``autostart``/``autorestart`` of ``[program:trainer]`` in ``conf`` (supervisord's
    defaults where unset: true, unexpected)."""
    out = {"autostart": "true", "autorestart": "unexpected"}
    section = ""
    for line in conf.read_text().splitlines():
        text = line.split(";")[0].strip()
        if text.startswith("["):
            section = text
        elif section == "[program:trainer]" and "=" in text:
            key, _, value = text.partition("=")
            if key.strip() in out:
                out[key.strip()] = value.strip().lower()
    return out


def unrecorded(state_db: Path, op: str, match: Any, what: str) -> str | None:
    """None when the newest row of ``action_steps`` in ``state_db`` is the write-ahead
    record of the side effect about to be made (an ``intent`` of ``op`` that ``match``
    accepts); else what was found instead."""
    conn = sqlite3.connect(state_db, timeout=10)
    try:
        row = conn.execute(
            "SELECT op, status, detail_json FROM action_steps ORDER BY id DESC LIMIT 1"
        ).fetchone()
    except sqlite3.Error:
        row = None
    finally:
        conn.close()
    if row is None or row[0] != op or row[1] != "intent" or not match(json.loads(row[2])):
        return f"{what}: newest step {row!r}"
    return None


def names_signal(pid: int, start_ticks: int | None, name: str) -> Any:
    """A matcher for :func:`unrecorded`: a ``signal`` step's detail naming ``name`` to
    ``(pid, start_ticks)``."""
    return lambda d: (
        d.get("signal") == name and [pid, start_ticks] in [p[:2] for p in d.get("procs") or []]
    )


@dataclass
class SimEffects(RecordingEffects):
    """Records every side effect; a SIGTERM or SIGKILL ends the simulated process (a
    stubborn one ignores SIGTERM); files outside the sandbox are never written.

    With :attr:`state_db` set, every side effect checks first that the newest row of
    ``action_steps`` in that database is the write-ahead record of this very effect (an
    ``intent`` naming it): what is not, is listed in :attr:`unrecorded` (the
    simulator's invariant "every side effect has a record"). A SIGCONT is exempt while
    :attr:`storage_ok` is False: continuing what the daemon stopped is never withheld
    for want of a record.
    """

    host: Any = None
    # (pid, signal, label, was sanctioned, start ticks) of every signal since the check
    signalled: list[tuple[int, int, tuple[str, str], bool, int]] = field(default_factory=list)
    state_db: Path | None = None
    storage_ok: bool = True
    unrecorded: list[str] = field(default_factory=list)
    # (pid, start ticks, signal) -> times sent, over the whole run
    per_identity: dict[tuple[int, int, int], int] = field(default_factory=dict)
    # (pid, label, was sanctioned, start ticks) of every move into a GPU denial since
    # the check; denials lifted (their cgroup removed) are counted only
    denied: list[tuple[int, tuple[str, str], bool, int]] = field(default_factory=list)
    lifted: int = 0

    def _recorded(self, op: str, match: Any, what: str) -> None:
        if self.state_db is None:
            return
        missing = unrecorded(self.state_db, op, match, what)
        if missing is not None:
            self.unrecorded.append(missing)

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        name = signal.Signals(sig).name
        if sig != signal.SIGCONT or self.storage_ok:
            self._recorded("signal", names_signal(pid, start_ticks, name), f"{name} to PID {pid}")
        super().send_signal(pid, sig, start_ticks)
        proc = self.host.procs.get(pid)
        if proc is None or (start_ticks is not None and proc.start != start_ticks):
            raise ProcessLookupError(pid)
        key = (pid, proc.start, sig)
        self.per_identity[key] = self.per_identity.get(key, 0) + 1
        was = self.host.was_sanctioned(pid, proc.start)
        self.signalled.append((pid, sig, proc.label, was, proc.start))
        if sig == signal.SIGKILL or (sig == signal.SIGTERM and not proc.stubborn):
            self.host.exit(pid, status=sig)

    def write_file_atomic(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        self._recorded("write", lambda d: d.get("path") == path, f"write {path}")
        super().write_file_atomic(path, data, uid, gid, mode)
        self.host.assert_in_sandbox(path)
        Path(path).write_bytes(data)

    def copy_backup(self, src: str, dst: str) -> None:
        self._recorded("backup", lambda d: d.get("to") == dst, f"backup {dst}")
        super().copy_backup(src, dst)
        self.host.assert_in_sandbox(dst)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)

    def rename(self, src: str, dst: str) -> None:
        self._recorded("rename", lambda d: d.get("to") == dst, f"rename {src}")
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self._recorded("remove", lambda d: d.get("path") == path, f"remove {path}")
        super().remove(path)

    def touch(self, path: str) -> None:
        self._recorded("touch", lambda d: d.get("path") == path, f"touch {path}")
        super().touch(path)

    def _hierarchy(self) -> Path:
        return Path(self.host.root) / "cgroup" / "devices"

    def _relative(self, cgroup: str) -> str:
        """The cgroup path a directory of the simulated hierarchy stands for."""
        self.host.assert_in_sandbox(cgroup)
        rel = os.path.relpath(cgroup, self._hierarchy())
        assert not rel.startswith(".."), f"{cgroup} is outside the devices hierarchy"
        return "/" if rel == "." else "/" + rel

    def make_cgroup(self, path: str) -> None:
        self._recorded("cgroup-mkdir", lambda d: d.get("path") == path, f"mkdir {path}")
        super().make_cgroup(path)
        self._relative(path)
        os.makedirs(path)

    def write_control(self, path: str, text: str) -> None:
        self._recorded("cgroup-write", lambda d: d.get("path") == path, f"write {path}")
        super().write_control(path, text)
        self.host.assert_in_sandbox(path)

    def move_to_cgroup(self, pid: int, start_ticks: int | None, cgroup: str) -> None:
        into = os.path.basename(cgroup).startswith("rogue-watchdog-gpu-deny.")
        if into or self.storage_ok:  # a lift is never withheld for want of a record
            self._recorded(
                "cgroup-move",
                lambda d: d.get("pid") == pid and d.get("cgroup") == cgroup,
                f"move PID {pid} to {cgroup}",
            )
        super().move_to_cgroup(pid, start_ticks, cgroup)
        proc = self.host.procs.get(pid)
        if proc is None or (start_ticks is not None and proc.start != start_ticks):
            raise ProcessLookupError(pid)
        proc.devices = self._relative(cgroup)
        self.host.write(proc)
        if into:
            was = self.host.was_sanctioned(pid, proc.start)
            self.denied.append((pid, proc.label, was, proc.start))

    def remove_cgroup(self, path: str) -> None:
        if self.storage_ok:
            self._recorded("cgroup-rmdir", lambda d: d.get("path") == path, f"rmdir {path}")
        self.lifted += 1
        super().remove_cgroup(path)
        rel = self._relative(path)
        assert not self.cgroup_pids(path), f"rmdir of {rel} with processes in it"
        os.rmdir(path)

    def cgroup_pids(self, path: str) -> list[int]:
        rel = self._relative(path)
        if not os.path.isdir(path):
            raise FileNotFoundError(path)
        return sorted(p.pid for p in self.host.procs.values() if p.devices == rel)

    def run(self, argv: Sequence[str], input_bytes: bytes | None = None) -> CommandResult:
        self._recorded("run", lambda d: d.get("argv") == list(argv), f"run {list(argv)}")
        self.calls.append(("run", tuple(argv), input_bytes))
        if argv and argv[0] in ("docker", "atrm", "supervisorctl"):
            return self.host.command(argv)
        return CommandResult(0, "", "")

    def query(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(("query", tuple(argv)))
        if argv and argv[0] in ("docker", "supervisorctl"):
            return self.host.command(argv)
        return CommandResult(1, "", "no systemd here")


class SimHost:
    """The simulated host.

    Args:
        root: Sandbox directory (procfs under ``proc``, crontabs under ``etc``).
        nvml_conf: The fake NVML library's configuration file.
    """

    def __init__(self, root: Path, nvml_conf: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        # The proc connector (tests/sim/events.py: SimKernel.attach); None sends nothing.
        self.kernel: Any = None
        self.ended: dict[int, tuple[str, str]] = {}  # the last label of each PID that exited
        self.etc = root / "etc"
        self.cron_d = self.etc / "cron.d"
        self.spool = root / "spool"
        for d in (self.proc, self.cron_d, self.spool, root / "units"):
            d.mkdir(parents=True, exist_ok=True)
        # A cgroup v1 devices hierarchy: GPU denials are made in it (SimEffects).
        (root / "cgroup" / "devices").mkdir(parents=True)
        (root / "cgroup" / "devices" / "devices.deny").write_text("")
        (self.etc / "crontab").write_text("")
        self.nvml_conf = nvml_conf
        self.now = BOOT + 86400.0 + 30.0
        self.procs: dict[int, SimProc] = {}
        self.next_pid = FIRST_PID
        self.runs = 0
        self.nvml_mode = "ok"
        self.sanctioned_ever: set[tuple[int, int]] = set()
        self.unit_mains: set[int] = set()
        self.loops: dict[int, str] = {}  # a shell loop's PID -> its job key
        self.containers: dict[str, SimContainer] = {}
        self.engine_up = True  # dockerd answers
        self.atspool = root / "atjobs"
        self.atspool.mkdir()
        self.at_next = 1
        self.at_shells: dict[int, tuple[int, Path]] = {}  # shell -> (atd child, = file)
        self.container_mains: dict[int, str] = {}  # every container main PID -> its id
        self.at_jobs: set[int] = set()  # every at job's trainer PID
        self.engine_restarts = 0  # containers a restart policy started again
        self.sup_conf = root / "supervisord.conf"
        self.sup_conf.write_text(SUP_CONF)
        self.supervisord: SimProc | None = None
        self.sup_main: int | None = None  # the program's running process
        self.sup_stopped = False  # `supervisorctl stop`
        self.sup_settings = read_sup(self.sup_conf)  # as supervisord last loaded them
        self.sup_mains: set[int] = set()  # every run of the program
        self.sup_restarts = 0
        # PID → wait(2) status of each exit since the daemon last asked (the kernel's
        # exit events: Daemon.exit_statuses), and every identity a signal ended.
        self.exits: dict[int, int] = {}
        self.killed: set[tuple[int, int]] = set()
        (self.proc / "stat").write_text(f"cpu 0 0 0 0\nbtime {int(BOOT)}\n")
        self.init = self._add(1, 0, ("/sbin/init",), "/sbin/init", ("system", ""))
        self.cron = self._add(900, 1, ("/usr/sbin/cron", "-f"), "/usr/sbin/cron", ("system", ""))
        self.atd = self._add(901, 1, ("/usr/sbin/atd", "-f"), "/usr/sbin/atd", ("system", ""))
        self.pipeline = self.cron_d / "pipeline"
        self.legacy = self.cron_d / "legacy"
        self.pipeline_line = f"* * * * * root {PY} {PIPELINE_SCRIPT}"
        self.pipeline.write_text(f'MAILTO=""\n{self.pipeline_line}\n')
        self.legacy.write_text(f'MAILTO=""\n\n\n0 2 * * 0 root {PY} {PIPELINE_SCRIPT}\n')
        for f in (self.pipeline, self.legacy):
            f.chmod(0o644)
        self.write_nvml()

    # -- sandbox ------------------------------------------------------------------------

    def assert_in_sandbox(self, path: str) -> None:
        real = os.path.realpath(path)
        assert real.startswith(str(self.root.resolve()) + os.sep), f"{path} is outside"

    def was_sanctioned(self, pid: int, start: int) -> bool:
        return (pid, start) in self.sanctioned_ever

    # -- processes ----------------------------------------------------------------------

    def ticks(self) -> int:
        return int((self.now - BOOT) * CLK)

    def _add(
        self, pid: int, ppid: int, argv: tuple[str, ...], exe: str, label: tuple[str, str],
        **kw: Any,
    ) -> SimProc:  # fmt: skip
        proc = SimProc(pid, ppid, argv, exe, self.ticks(), label, **kw)
        proc.pgid = proc.pgid or pid
        proc.sid = proc.sid or pid
        self.procs[pid] = proc
        self.write(proc)
        return proc

    def spawn(
        self, ppid: int, argv: tuple[str, ...], exe: str, label: tuple[str, str], **kw: Any
    ) -> SimProc:
        """A new process (fork + exec): a fresh PID, start time now."""
        self.next_pid += 1
        parent = self.procs.get(ppid)
        kw.setdefault("pgid", parent.pgid if parent and ppid > 1 else 0)
        kw.setdefault("sid", parent.sid if parent and ppid > 1 else 0)
        kw.setdefault("uid", parent.uid if parent else 0)
        kw.setdefault("cgroup", parent.cgroup if parent and ppid > 1 else "/")
        kw.setdefault("devices", parent.devices if parent and ppid > 1 else "/")
        if parent is not None and parent.env is not None:
            kw.setdefault("env", dict(parent.env))
        return self._add(self.next_pid, ppid, argv, exe, label, **kw)

    def write(self, p: SimProc) -> None:
        d = self.proc / str(p.pid)
        d.mkdir(exist_ok=True)
        comm = os.path.basename(p.argv[0])[:15] if p.argv else "x"
        (d / "stat").write_text(
            f"{p.pid} ({comm}) {p.state} {p.ppid} {p.pgid} {p.sid} 0 -1 4194560 0 0 0 0 "
            f"0 0 0 0 20 0 1 0 {p.start} 0 0\n"
        )
        (d / "cmdline").write_bytes(
            b"" if p.state == "Z" else b"".join(a.encode() + b"\0" for a in p.argv)
        )
        (d / "status").write_text(
            f"Name:\t{comm}\nUid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}\nNSpid:\t{p.pid}\n"
        )
        (d / "cgroup").write_text(f"5:devices:{p.devices}\n0::{p.cgroup}\n")
        if p.env is not None:
            (d / "environ").write_bytes(
                b"".join(f"{k}={v}".encode() + b"\0" for k, v in p.env.items())
            )
        exe = d / "exe"
        if exe.is_symlink():
            exe.unlink()
        if p.state != "Z":
            os.symlink(p.exe, exe)
        if p.fd0 is not None and p.state != "Z" and not (d / "fd").exists():
            (d / "fd").mkdir()
            os.symlink(p.fd0, d / "fd" / "0")
        if self.kernel is not None and p.state != "Z":
            # After the files: the exec event's reader finds the new program.
            self.kernel.wrote(p.pid, p.ppid, p.argv, p.exe, p.uid, p.sid)

    def drain_exits(self) -> dict[int, int]:
        """The exit statuses since the last call (what the proc connector hands on)."""
        out, self.exits = self.exits, {}
        return out

    def exit(self, pid: int, status: int = 0) -> None:
        """The process exits (``status``: its wait(2) status, 0 by itself, the signal
        that ended it); its parent reaps it at once; children go to PID 1."""
        proc = self.procs.pop(pid, None)
        if proc is None:
            return
        self.ended[pid] = proc.label
        if proc.state != "Z":  # a zombie's exit was its own, when it became one
            self.exits[pid] = status
            if self.kernel is not None:
                self.kernel.exited(pid, status)
            if status & 0x7F:
                self.killed.add((pid, proc.start))
        shutil.rmtree(self.proc / str(pid), ignore_errors=True)
        if pid in self.unit_mains:
            # A unit's main process ended: systemd stops the rest of its cgroup
            # (KillMode=control-group, the default).
            for other in [p.pid for p in self.procs.values() if p.cgroup == proc.cgroup]:
                self.exit(other)
        for child in self.procs.values():
            if child.ppid == pid:
                child.ppid = 1
                self.write(child)
        self._unshare(proc.ppid)
        self._container_ended(pid, status)
        self._at_ended(pid, proc.ppid, status)
        self._program_ended(pid)
        self.write_nvml()

    def _unshare(self, pid: int) -> None:
        """What a shared shell shared with is gone (exited, or a zombie it has not
        reaped): it now exists only for its job."""
        parent = self.procs.get(pid)
        if (
            parent is not None
            and parent.label[0] == "shared"
            and not any(c.label[0] == "bystander" and c.state != "Z" for c in self.children(pid))
        ):
            parent.label = ("wrapper", parent.label[1])

    def zombie(self, pid: int) -> None:
        """The process exits and its parent does not reap it (systemd, the parent of a
        unit's main process, always does)."""
        if (
            pid in self.unit_mains
            or pid == self.sup_main
            or any(c.main == pid for c in self.containers.values())
        ):
            self.exit(pid)  # systemd, a container's shim, supervisord: they reap at once
            return
        proc = self.procs[pid]
        proc.state = "Z"
        self.exits[pid] = 0
        self.write(proc)
        if self.kernel is not None:
            self.kernel.exited(pid, 0)
        # A hub or a shared shell holding an unreaped trainer keeps its label: a zombie's
        # GPU memory counts for its parent's job only when that parent is training or
        # an exclusive wrapper of it (docs/architecture.md, Jobs), so it never becomes a
        # job that holds what else it runs.
        self._unshare(proc.ppid)
        for child in self.procs.values():
            if child.ppid == pid:
                child.ppid = 1
                self.write(child)

    def children(self, pid: int) -> list[SimProc]:
        return [p for p in self.procs.values() if p.ppid == pid]

    # -- what happens on a host ----------------------------------------------------------

    def next_minute(self) -> None:
        """Advance to one second past the next minute (when cron forks its jobs)."""
        self.now = (int(self.now) // 60 + 1) * 60 + 1.0

    def cron_run(self, command: str, argv: tuple[str, ...], key: str, **kw: Any) -> SimProc:
        """cron → CRON → /bin/sh -c COMMAND → the job (dash keeps the shell as parent)."""
        child = self.spawn(
            self.cron.pid, ("/usr/sbin/CRON", "-f"), "/usr/sbin/cron", ("cron-child", key)
        )
        # A group and session of its own (pgid = sid = 0 makes _add give it its PID).
        shell = self.spawn(child.pid, ("/bin/sh", "-c", command), "/usr/bin/dash",
                           ("wrapper", key), pgid=0, sid=0)  # fmt: skip
        return self.spawn(shell.pid, argv, argv[0], ("job", key), **kw)

    def unit_run(self, unit: str, top: tuple[str, ...], label: tuple[str, str]) -> SimProc:
        """systemd (PID 1) starts ``unit``'s own process ``top`` in the unit's cgroup
        (``Restart=always``: its unit file is written once)."""
        path = self.root / "units" / unit
        if not path.exists():
            path.write_text(f"[Service]\nExecStart={' '.join(top)}\nRestart=always\n")
        exe = "/usr/bin/bash" if top[0].endswith("bash") else top[0]
        main = self.spawn(1, top, exe, label, cgroup=f"/system.slice/{unit}")
        self.unit_mains.add(main.pid)
        return main

    def unit_procs(self, unit: str) -> list[SimProc]:
        """The live processes of ``unit`` (not zombies)."""
        cg = f"/system.slice/{unit}"
        return [p for p in self.procs.values() if p.cgroup == cg and p.state != "Z"]

    # -- Docker -------------------------------------------------------------------------

    def container_start(self, c: SimContainer) -> SimProc:
        """The engine starts ``c``: a shim (containerd's, in the ``moby`` namespace) and
        the container's main process, the trainer, in cgroup ``/docker/<cid>``."""
        self.runs += 1
        shim = self.spawn(
            1, ("/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", c.cid,
                "-address", "/run/containerd/containerd.sock"),
            "/usr/bin/containerd-shim-runc-v2", ("system", ""),
        )  # fmt: skip
        main = self.spawn(shim.pid, (PY, "/srv/ctr/train_ctr.py"), PY, ("job", f"ctr#{self.runs}"),
                          cgroup=f"/docker/{c.cid}", pgid=0, sid=0, gpu=(0, GIB))  # fmt: skip
        c.main, c.shim, c.stopped = main.pid, shim.pid, False
        c.policies.add(c.policy)
        self.container_mains[main.pid] = c.cid
        return main

    def _container_ended(self, pid: int, status: int) -> None:
        """A container's main process ended: its shim exits, and the restart policy
        starts it again at once unless ``docker stop`` stopped it (docker-run(1))."""
        c = next((c for c in self.containers.values() if c.main == pid), None)
        if c is None:
            return
        shim, c.main, c.shim = c.shim, None, None
        if shim is not None:
            self.exit(shim)
        again = c.policy in ("always", "unless-stopped") or (
            c.policy == "on-failure" and status != 0
        )
        if again and not c.stopped:
            self.engine_restarts += 1
            self.container_start(c)

    def command(self, argv: Sequence[str]) -> CommandResult:
        """``docker inspect|update|stop|start``, ``atrm`` and ``supervisorctl`` as the
        engine, atd and supervisord answer them (never a real command)."""
        if argv[0] == "supervisorctl":
            return self._supervisorctl(argv[3:] if list(argv[1:2]) == ["-c"] else argv[1:])
        if argv[0] == "atrm":
            gone = [f for f in self.atspool.iterdir() if f.name[1:6] == f"{int(argv[1]):05x}"
                    and not f.name.startswith("=")]  # fmt: skip
            for f in gone:
                f.unlink()
            return CommandResult(0, "", "") if gone else CommandResult(
                1, "", f"Cannot find jobid {argv[1]}\n"
            )  # fmt: skip
        if not self.engine_up:
            return CommandResult(
                1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
            )
        c = self.containers.get(argv[-1])
        if c is None:
            return CommandResult(1, "", f"Error: No such container: {argv[-1]}\n")
        verb = argv[1]
        if verb == "inspect":
            fmt = argv[3]
            if fmt.startswith("[{{json .Config.Image}}"):  # the scan's
                out = json.dumps(["sim/train:1", "sha256:" + "ab" * 32, "/" + c.name, c.policy])
            else:  # disable-source's: id, policy name, retries, running
                policy = c.policy
                out = f'"{c.cid}" "{policy}" 0 {json.dumps(c.main is not None)}'
            return CommandResult(0, out + "\n", "")
        if verb == "update":
            c.policy = argv[2].removeprefix("--restart=")
        elif verb == "stop":
            c.stopped = True
            if c.main is not None:
                self.exit(c.main, status=signal.SIGTERM)
        elif verb == "start" and c.main is None:
            self.container_start(c)
        return CommandResult(0, c.cid + "\n", "")

    def run_cmd(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """The scan's command runner: ``docker`` as the engine answers, ``systemctl`` as
        a host without systemd as PID 1 does (never a real command)."""
        if argv and argv[0] == "docker":
            return self.command(argv)
        if argv and argv[0] == "systemctl":
            return CommandResult(
                1, "", "System has not been booted with systemd as init system (PID 1). "
                "Can't operate.\nFailed to connect to bus: Host is down\n",
            )  # fmt: skip
        return CommandResult.not_runnable(argv[0] if argv else "?")

    # -- supervisord ------------------------------------------------------------------------

    def program_start(self) -> SimProc:
        """supervisord (started once, kept) starts ``[program:trainer]``: the trainer in a
        process group of its own, named in its environment."""
        if self.supervisord is None or self.supervisord.pid not in self.procs:
            self.supervisord = self.spawn(
                1, (PY, "/usr/bin/supervisord", "-n", "-c", str(self.sup_conf)), PY,
                ("system", ""),
            )  # fmt: skip
        self.runs += 1
        env = {"SUPERVISOR_ENABLED": "1", "SUPERVISOR_PROCESS_NAME": "trainer",
               "SUPERVISOR_GROUP_NAME": "trainer"}  # fmt: skip
        main = self.spawn(self.supervisord.pid, (PY, "/srv/sup/train_sup.py"), PY,
                          ("job", f"sup#{self.runs}"), pgid=0, env=env, gpu=(1, GIB))  # fmt: skip
        self.sup_main, self.sup_stopped = main.pid, False
        self.sup_mains.add(main.pid)
        return main

    def _program_ended(self, pid: int) -> None:
        """The program's process ended: autorestart=true starts it again at once, as does
        the default (unexpected) after a signal; not after `supervisorctl stop`."""
        if pid != self.sup_main:
            return
        self.sup_main = None
        again = self.sup_settings["autorestart"] in ("true", "unexpected")
        if again and not self.sup_stopped:
            self.sup_restarts += 1
            self.program_start()

    def _supervisorctl(self, args: Sequence[str]) -> CommandResult:
        verb, rest = args[0], list(args[1:])
        if verb == "status":
            main = self.sup_main
            state = f"RUNNING   pid {main}, uptime 0:00:05" if main else "STOPPED"
            return CommandResult(0 if self.sup_main else 3, f"trainer    {state}\n", "")
        if verb == "stop" and rest == ["trainer"]:
            self.sup_stopped = True
            if self.sup_main is not None:
                self.exit(self.sup_main, status=signal.SIGTERM)
            return CommandResult(0, "trainer: stopped\n", "")
        if verb == "start" and rest == ["trainer"]:
            if self.sup_main is None:
                self.program_start()
            return CommandResult(0, "trainer: started\n", "")
        if verb == "reread":
            return CommandResult(0, "trainer: changed\n", "")
        if verb == "update":
            # A changed group is removed (its process stopped) and added again, started
            # when autostart says so.
            new = read_sup(self.sup_conf)
            if new != self.sup_settings:
                self.sup_settings = new
                if self.sup_main is not None:
                    self.sup_stopped = True
                    self.exit(self.sup_main, status=signal.SIGTERM)
                if new["autostart"] == "true" and self.supervisord is not None:
                    self.program_start()
            return CommandResult(0, "trainer: updated process group\n", "")
        return CommandResult(1, "", f"*** Unknown syntax: {' '.join(args)}\n")

    # -- at -------------------------------------------------------------------------------

    def at_queue(self, when_s: float) -> Path:
        """at(1) queues :data:`AT_COMMANDS` (it re-queues itself) at ``when_s``."""
        name = f"a{self.at_next:05x}{int(when_s) // 60:08x}"
        self.at_next += 1
        path = self.atspool / name
        path.write_text(AT_HEADER + AT_COMMANDS + "\n")
        return path

    def at_pending(self) -> list[Path]:
        """The queued jobs, soonest first."""
        return sorted(
            (f for f in self.atspool.iterdir() if not f.name.startswith("=")),
            key=lambda f: (f.name[6:], f.name),
        )

    def at_run(self, path: Path) -> SimProc:
        """atd runs the job: renames its file ``=...``, forks a child that runs ``/bin/sh``
        reading the file on fd 0; the commands queue the next run, then train."""
        running = path.with_name("=" + path.name[1:])
        path.rename(running)
        self.runs += 1
        key = f"at#{self.runs}"
        child = self.spawn(self.atd.pid, ("/usr/sbin/atd", "-f"), "/usr/sbin/atd",
                           ("cron-child", key))  # fmt: skip
        shell = self.spawn(child.pid, ("/bin/sh",), "/usr/bin/dash", ("wrapper", key),
                           uid=1000, pgid=0, sid=0, fd0=f"{path} (deleted)")  # fmt: skip
        self.at_shells[shell.pid] = (child.pid, running)
        self.at_queue(self.now + 300)
        job = self.spawn(shell.pid, (PY, "/home/u/train_at.py"), PY, ("job", key), gpu=(1, GIB))
        self.at_jobs.add(job.pid)
        return job

    def _at_ended(self, pid: int, ppid: int, status: int) -> None:
        """The job's last command ended: its shell exits, atd's child removes the job
        file and exits."""
        if ppid in self.at_shells and not any(c.state != "Z" for c in self.children(ppid)):
            self.exit(ppid, status=0)
        if pid in self.at_shells:
            child, running = self.at_shells.pop(pid)
            running.unlink(missing_ok=True)
            self.exit(child)

    # -- NVML ------------------------------------------------------------------------------

    def write_nvml(self) -> None:
        devices: list[dict[str, Any]] = []
        for i, uuid in enumerate(GPUS):
            if self.nvml_mode == "vanish1" and i == 1:
                continue
            dev: dict[str, Any] = {"name": "NVIDIA H200", "uuid": uuid, "total": 140 * GIB,
                                   "used": 0}  # fmt: skip
            procs = []
            for p in self.procs.values():
                if p.gpu is not None and p.gpu[0] == i:
                    mem = p.gpu[1]
                    procs.append({"pid": p.pid, "mem": "NA" if mem is None else mem})
                    dev["used"] += mem or 0
            dev["processes"] = procs
            if self.nvml_mode == "no-permission" and i == 0:
                dev["proc_error"] = 4  # NVML_ERROR_NO_PERMISSION
            devices.append(dev)
        spec: dict[str, Any] = {"devices": devices}
        if self.nvml_mode == "count-lost":
            spec["count_error"] = 15  # NVML_ERROR_GPU_IS_LOST
        write_config(self.nvml_conf, spec)
