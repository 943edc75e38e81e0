"""The busy shared GPU box of issue 35, on real components, for a test and a benchmark.

One :class:`BusyBox` builds the box, runs it for a while under two real daemons and
hands back an :class:`Outcome`: every alert the daemons sent, each one attributed to the
part of the box it is about.

The box (two throwaway users, ALICE and BOB, each with a home under the sandbox):

* ALICE's tmux session ``lab``: ``python3 ~/.local/bin/jupyter-lab`` (listens on
  127.0.0.1) starts a notebook kernel, ``python3 -m ipykernel_launcher -f
  ~/.local/share/jupyter/runtime/kernel-1.json`` (a stand-in module in her user
  site-packages: it maps ``libcudart.so.12``, listens on five 127.0.0.1 ports as a kernel
  does and holds 4 GiB in NVML);
* ALICE's tmux session ``probe``: ``while true; do python3 ~/bin/cuda_probe.py; sleep 5;
  done``, a 0.3 s probe that maps ``libcudart.so.12``;
* ALICE's tmux session ``edit``: ``vim`` and ``less`` on ``~/proj/train.py``, ``tail -f``
  on its log, a window named ``train`` running ``watch grep``, a ``py_compile`` loop:
  things that only *mention* training;
* BOB's tmux session ``serve``: ``python3 -m vllm.entrypoints.openai.api_server --host
  127.0.0.1 --port P`` (stand-in package in his user site-packages; 30 GiB in NVML);
* BOB's tmux session ``sneak``: at the prompt, ``nohup python3 ~/train_sneaky.py &``:
  rogue 1 (8 GiB);
* a graphics process, ``SANDBOX/opt/X11/bin/Xorg :1 -nolisten tcp vt7`` (a compiled
  stand-in, outside ``/usr/*/Xorg``), run by root, a graphics process in NVML;
* a private cron (``cron -f`` in its own mount namespace, where the sandbox's ``cron.d``,
  an empty crontab and an empty spool are bound over the host's: the host's crontabs are
  never read, written or run): ``cron.d/pipeline`` line 3, the sanctioned pipeline
  (``max_instances: 1``), a 75 s run every minute, so runs overlap for about 15 s
  (10 GiB each); ``cron.d/te-ghost`` line 3, BOB's forgotten line running the same
  ``train_sneaky.py`` for 20 s every minute: rogue 2 (6 GiB).

The fake NVML library (tests/fakenvml) lists the GPU users, each from 2 s after it
started (a CUDA context takes a moment), on one 80 GiB GPU whose used memory is what the
listed processes hold. A thread keeps that list current.

The daemons are this checkout's ``rogue-watchdog run``, each with config/example.yaml as
shipped plus only what the box needs: the NVML library, a state directory and socket in
the sandbox, the sandbox's ``cron.d`` as ``paths.cron_d``, a log sink and a webhook sink
(an HTTP receiver in this process). The *paging* daemon also sanctions the pipeline (its
cron file and line, root, ``max_instances: 1``); the *learning* daemon has no rule of its
own and ``daemon.learn_until: 1h``, and its history is what ``allowlist suggest`` reads.

Every stand-in script writes its role into ``SANDBOX/reg/PID`` first thing, so an alert
names its part of the box by the root PID it carries. ``train_sneaky.py`` calls itself
``ghost`` when an ancestor is cron, ``rogue`` otherwise. Alerts about processes of
neither the box nor its users (other tests on a shared host) are counted apart as
``foreign`` and never judged.

Ownership and cleanup: the users are created here (``useradd``) and every process they
own is ours; so is every process in the private cron's mount namespace and every process
this object started. :meth:`BusyBox.close` kills exactly those, removes the users and the
sandbox. Nothing else on the host is signalled or changed (the host's /etc/cron.d,
/etc/crontab and spool are untouched; /run is replaced only inside cron's namespace).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.fakenvml.build import CONFIG_NAME, config_text, write_config
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.httpreceiver import Receiver

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"
GIB = 1 << 30
USER_PATH = "/usr/local/bin:/usr/bin:/bin"
NVML_DELAY_S = 2.0  # NVML lists a process this long after it started (CUDA init)
PIPELINE_RUN_S = 75  # every minute: overlaps the next run by about 15 s
GHOST_RUN_S = 20
PROBE_EVERY_S = 5
CRON_LINE = 3  # the entry's line in both cron.d files below

#: Role -> (NVML kind, bytes held) for the box's GPU users.
GPU_ROLES: dict[str, tuple[str, int]] = {
    "kernel": ("compute", 4 * GIB),
    "vllm": ("compute", 30 * GIB),
    "xorg": ("graphics", 256 << 20),
    "pipeline": ("compute", 10 * GIB),
    "ghost": ("compute", 6 * GIB),
    "rogue": ("compute", 8 * GIB),
}
#: The incidents a person must act on: the two rogues; the pipeline's excess runs.
ROGUES = ("rogue", "ghost")
#: Parts that run for the whole window (a stop of one means the box was disturbed).
LONG_LIVED = ("jupyter", "kernel", "vllm", "xorg", "rogue")
PAGE_EVENTS = ("open", "remind")  # a resolve tells, it does not ask anyone to act
HIGH = ("high", "critical")

_REGISTER = """import ctypes, os, signal, socket, sys, threading, time
REG = {reg!r}
CUDART = {cudart!r}
NVML_CONF = {conf!r}
STOPS = {{signal.SIGTERM, signal.SIGINT, signal.SIGHUP}}


def register(role):
    with open(os.path.join(REG, str(os.getpid())), "w") as fh:
        fh.write(role)
    # Who stops a part of the box, and with what: the box is on a shared host.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    threading.Thread(target=_stopped, daemon=True).start()


def _stopped():
    got = signal.sigwaitinfo(STOPS)
    try:
        with open(f"/proc/{{got.si_pid}}/cmdline", "rb") as fh:
            sender = fh.read().replace(b"\\0", b" ").decode("utf-8", "replace")[:300]
    except OSError:
        sender = "?"
    with open(os.path.join(REG, f"{{os.getpid()}}.signal"), "w") as fh:
        fh.write(f"{{got.si_signo}} {{got.si_pid}} {{got.si_uid}} {{sender}}")
    os._exit(128 + got.si_signo)


def release():
    # A CUDA context is torn down before its process exits: NVML stops listing a job
    # that ends by itself first (the box's NVML never lists a zombie), then the job
    # writes its last words and exits.
    me = f"\\tpid={{os.getpid()}}\\t"
    open(os.path.join(REG, f"{{os.getpid()}}.exit"), "w").close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(NVML_CONF) as fh:
            if me not in fh.read():
                break
        time.sleep(0.05)
    time.sleep(0.5)


def under_cron():
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{{pid}}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            return False
        if stat[stat.index(b"(") + 1 : stat.rindex(b")")] == b"cron":
            return True
        pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return False


def listen(port=0):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s
"""

_JUPYTER = """
register("jupyter")
server = listen()
runtime = os.path.expanduser("~/.local/share/jupyter/runtime")
os.makedirs(runtime, exist_ok=True)
conn = os.path.join(runtime, "kernel-1.json")
with open(conn, "w") as fh:
    fh.write('{"transport": "tcp", "ip": "127.0.0.1"}')
import subprocess
kernel = subprocess.Popen([sys.executable, "-m", "ipykernel_launcher", "-f", conn])
kernel.wait()
"""

_KERNEL = """
register("kernel")
ctypes.CDLL(CUDART)
ports = [listen() for _ in range(5)]  # shell, iopub, stdin, control, heartbeat
while True:
    time.sleep(3600)
"""

_VLLM = """
register("vllm")
ctypes.CDLL(CUDART)
port = int(sys.argv[sys.argv.index("--port") + 1])
server = listen(port)
while True:
    time.sleep(3600)
"""

_PROBE = """
register("probe")
ctypes.CDLL(CUDART)
time.sleep(0.3)
"""

_TRAINER = """
{register}
ctypes.CDLL(CUDART)
time.sleep(float(os.environ.get("TRAIN_S", "3600")))
release()
"""

_TRAIN_PY = """# alice's model: read, edited and checked, never run in this box
import torch


def train(epochs: int = 10) -> None:
    for epoch in range(epochs):
        print(f"epoch {epoch} loss 0.1")
"""

_XORG_C = "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n"

_PRIVATE_CRON = """set -e
mount --bind "$1" /etc/cron.d
mount --bind "$2" /etc/crontab
mount --bind "$3" /var/spool/cron/crontabs
mount -t tmpfs -o mode=0755 tmpfs /run
exec cron -f
"""


@dataclass(frozen=True)
class Page:
    """One alert a daemon sent to its webhook (a batch is unpacked into its alerts)."""

    daemon: str
    event: str
    kind: str
    severity: str
    root_pid: int | None
    finding_id: int
    message: str
    user: str | None
    role: str

    @property
    def high(self) -> bool:
        """Severity ``high`` or ``critical``."""
        return self.severity in HIGH

    @property
    def is_page(self) -> bool:
        """An ``open`` or ``remind`` (a ``resolve`` asks nobody to act)."""
        return self.event in PAGE_EVENTS

    @property
    def incident(self) -> str:
        """What a person would act on: one rogue (all its runs), one excess run, or one
        part of the box (each of its findings counted as the same incident)."""
        if self.role == "pipeline" and self.kind == "excess-instances":
            return f"excess:{self.root_pid}"
        return self.role

    @property
    def true(self) -> bool:
        """A page a person must act on: a rogue, or an excess run of the pipeline."""
        return self.role in ROGUES or self.incident.startswith("excess:")


@dataclass
class Outcome:
    """What one run of the box produced."""

    sandbox: Path
    window_s: float
    users: dict[str, str]  # "alice"/"bob" -> the real user name
    roles: dict[int, str]  # PID -> role, every stand-in process seen
    posts: dict[str, int]  # daemon -> webhook requests received
    pages: dict[str, list[Page]]  # daemon -> alerts, in arrival order
    findings: list[dict[str, Any]]  # the paging daemon's findings table
    cron_files: dict[str, Path]  # "pipeline"/"ghost" -> the cron.d file
    signals: list[str] = field(default_factory=list)  # "role PID got SIG from PID (uid U)"
    lost: list[str] = field(default_factory=list)  # long-lived parts not running at the end
    suggest_rc: int = -1
    suggest: str = ""
    daemon_logs: dict[str, str] = field(default_factory=dict)

    def dump(self, path: Path) -> None:
        """Write everything seen as JSON (for a look after a failed run)."""
        doc = {
            "sandbox": str(self.sandbox), "window_s": self.window_s, "users": self.users,
            "roles": self.roles, "posts": self.posts, "signals": self.signals,
            "lost": self.lost, "suggest_rc": self.suggest_rc, "suggest": self.suggest,
            "pages": {d: [vars(p) for p in ps] for d, ps in self.pages.items()},
            "findings": self.findings, "daemon_logs": self.daemon_logs,
        }  # fmt: skip
        path.write_text(json.dumps(doc, indent=1, default=str))

    def proposed(self) -> list[dict[str, Any]]:
        """The rules ``allowlist suggest`` proposed for the box (its sandbox's paths or its
        users; the learning daemon saw the whole host)."""
        doc = yaml.safe_load(self.suggest) if self.suggest_rc == 0 else None
        rules = (doc or {}).get("sanctioned") or []
        return [
            r
            for r in rules
            if str(self.sandbox) in json.dumps(r) or r.get("user") in self.users.values()
        ]

    def pids(self, role: str) -> list[int]:
        """Every PID that ran as ``role`` (``kernel``, ``ghost``...), sorted."""
        return sorted(p for p, r in self.roles.items() if r == role)

    def mine(self, daemon: str) -> list[Page]:
        """The daemon's alerts about this box (foreign ones left out)."""
        return [p for p in self.pages[daemon] if p.role != "foreign"]

    def stats(self, daemon: str) -> dict[str, Any]:
        """Counts of the daemon's pages over the window, and the same per hour: all, high
        (``high``/``critical``) and other, true (the rogues, the excess runs) and false;
        repeats (pages for an incident already paged); per kind and per part of the box
        by severity; webhook posts; foreign alerts (not counted)."""
        pages = [p for p in self.mine(daemon) if p.is_page]
        seen: set[str] = set()
        repeats: list[Page] = []
        for p in pages:
            if p.incident in seen:
                repeats.append(p)
            seen.add(p.incident)

        def count(ps: Iterable[Page]) -> dict[str, int]:
            ps = list(ps)
            return {
                "all": len(ps),
                "high": sum(p.high for p in ps),
                "other": sum(not p.high for p in ps),
                "true": sum(p.true for p in ps),
                "false": sum(not p.true for p in ps),
                "true_high": sum(p.true and p.high for p in ps),
                "false_high": sum(not p.true and p.high for p in ps),
            }

        totals = count(pages)
        per_hour = {k: round(v * 3600.0 / self.window_s, 1) for k, v in totals.items()}
        by_kind: dict[str, Counter[str]] = {}
        by_role: dict[str, Counter[str]] = {}
        for p in pages:
            by_kind.setdefault(p.kind, Counter())[p.severity] += 1
            by_role.setdefault(p.role, Counter())[f"{p.kind} {p.severity}"] += 1
        return {
            "window_s": round(self.window_s, 1),
            "webhook_posts": self.posts[daemon],
            "alerts": len(self.mine(daemon)),
            "pages": totals,
            "pages_per_hour": per_hour,
            "repeats": count(repeats),
            "incidents_paged": sorted(seen),
            "by_kind": {k: dict(sorted(c.items())) for k, c in sorted(by_kind.items())},
            "by_role": {k: dict(sorted(c.items())) for k, c in sorted(by_role.items())},
            "foreign_alerts": sum(p.role == "foreign" for p in self.pages[daemon]),
        }


def _stat_fields(pid: int) -> list[bytes]:
    """``/proc/PID/stat`` from field 3 (state) on; empty when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return []
    return raw[raw.rfind(b")") + 2 :].split()


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _age_s(pid: int) -> float | None:
    fields = _stat_fields(pid)
    if len(fields) < 20 or fields[0] == b"Z":
        return None
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _mkdirs(path: Path) -> None:
    """Create ``path`` and its missing parents, each mode 0755 whatever the umask (the
    users run what is inside)."""
    if not path.exists():
        _mkdirs(path.parent)
        path.mkdir()
        path.chmod(0o755)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _query(db: Path, sql: str) -> list[dict[str, Any]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql).fetchall()]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


class BusyBox:
    """The box: build it with :meth:`setup`, run it with :meth:`run`, always :meth:`close`.

    Args:
        tag: A short hex tag for user and file names (random by default).
    """

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or secrets.token_hex(3)
        self.sandbox = Path(tempfile.mkdtemp(prefix="rwtest-busybox-"))
        self.sandbox.chmod(0o755)
        self.reg = self.sandbox / "reg"
        self.users = {"alice": f"alice{self.tag}", "bob": f"bob{self.tag}"}
        self.homes = {k: self.sandbox / "home" / v for k, v in self.users.items()}
        self.uids: dict[str, int] = {}
        self.cron_d = self.sandbox / "cron.d"
        self.cron_files = {"pipeline": self.cron_d / "pipeline", "ghost": self.cron_d / "te-ghost"}
        self.pipeline = self.sandbox / "srv" / "pipeline" / "train.py"
        self.cudart = self.sandbox / "cuda" / "lib64" / "libcudart.so.12"
        self.xorg = self.sandbox / "opt" / "X11" / "bin" / "Xorg"
        self.receiver: Receiver | None = None
        self.nvml_dir: Path | None = None
        self.configs: dict[str, Path] = {}
        self.started: list[subprocess.Popen[bytes]] = []
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.cron: subprocess.Popen[bytes] | None = None
        self.cron_mnt_ns: str | None = None
        self.roles: dict[int, str] = {}
        self.released: set[int] = set()  # PIDs whose CUDA context is gone (ending)
        self.tmux_socks: dict[str, Path] = {}
        self.sessions: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._nvml_thread: threading.Thread | None = None
        self._made_users: list[str] = []
        self.vllm_port = 0

    # -- building ---------------------------------------------------------------------

    def setup(self) -> None:
        """Users, files, the fake NVML library, the webhook receiver and both configs."""
        self.reg.mkdir(mode=0o755)
        self.reg.chmod(0o1777)  # every user's stand-ins register here
        (self.sandbox / "home").mkdir(mode=0o755)
        for key, name in self.users.items():
            subprocess.run(
                ["useradd", "-m", "-d", str(self.homes[key]), "-s", "/bin/bash", name],
                check=True, capture_output=True,
            )  # fmt: skip
            self._made_users.append(name)
            self.uids[key] = self.homes[key].stat().st_uid
        _mkdirs(self.cudart.parent)
        shutil.copyfile("/usr/lib/x86_64-linux-gnu/libz.so.1", self.cudart)
        self.cudart.chmod(0o755)
        self.nvml_dir = fake_nvml(self.sandbox, self._nvml_spec({}))
        for p in self.nvml_dir.iterdir():
            p.chmod(0o755 if p.suffix != ".conf" else 0o644)
        self.nvml_dir.chmod(0o755)
        conf = str(self.nvml_dir / CONFIG_NAME)
        preamble = _REGISTER.format(reg=str(self.reg), cudart=str(self.cudart), conf=conf)
        site = "lib/python3.11/site-packages"
        bob = self.homes["bob"]
        self._user_file("alice", ".local/bin/jupyter-lab", preamble + _JUPYTER, 0o755)
        self._user_file("alice", f".local/{site}/ipykernel_launcher.py", preamble + _KERNEL)
        self._user_file("alice", "bin/cuda_probe.py", preamble + _PROBE)
        self._user_file("alice", "proj/train.py", _TRAIN_PY)
        self._user_file("alice", "proj/logs/train.log", "step 1 loss 2.31\nstep 2 loss 2.12\n")
        pkg = f".local/{site}/vllm"
        for sub in ("", "/entrypoints", "/entrypoints/openai"):
            self._user_file("bob", f"{pkg}{sub}/__init__.py", "")
        self._user_file("bob", f"{pkg}/entrypoints/openai/api_server.py", preamble + _VLLM)
        self._user_file("bob", "models/llama-3-8b-instruct/config.json", "{}\n")
        # One script, two origins: BOB's nohup (rogue 1) and his forgotten cron line (2).
        sneaky = _TRAINER.format(register="register('ghost' if under_cron() else 'rogue')")
        self._user_file("bob", "train_sneaky.py", preamble + sneaky)
        _mkdirs(self.pipeline.parent)
        self.pipeline.write_text(preamble + _TRAINER.format(register="register('pipeline')"))
        self.pipeline.chmod(0o644)
        # The graphics process: a compiled stand-in named Xorg, outside /usr/*/Xorg.
        _mkdirs(self.xorg.parent)
        src = self.sandbox / "xorg.c"
        src.write_text(_XORG_C)
        subprocess.run(["gcc", "-O2", "-o", str(self.xorg), str(src)], check=True)
        # The private cron's files: the pipeline and the ghost; an empty crontab and spool.
        self.cron_d.mkdir(mode=0o755)
        self._cron_file(
            "pipeline", [f"TRAIN_S={PIPELINE_RUN_S}", f"* * * * * root {PYTHON} {self.pipeline}"]
        )
        ghost = f"* * * * * {self.users['bob']} {PYTHON} {bob}/train_sneaky.py"
        self._cron_file("ghost", [f"TRAIN_S={GHOST_RUN_S}", ghost])
        crontab = self.sandbox / "crontab"
        crontab.write_text("# the private cron's /etc/crontab: empty\n")
        crontab.chmod(0o644)
        (self.sandbox / "spool").mkdir(mode=0o700)
        self.receiver = Receiver()
        url = self.sandbox / "webhook.url"
        url.write_text(self.receiver.url("/paging") + "\n")
        url.chmod(0o600)
        learn_url = self.sandbox / "webhook-learning.url"
        learn_url.write_text(self.receiver.url("/learning") + "\n")
        learn_url.chmod(0o600)
        self.configs["paging"] = self._config("paging", url, sanction=True)
        self.configs["learning"] = self._config("learning", learn_url, sanction=False)
        self.vllm_port = _free_port()

    def _user_file(self, who: str, rel: str, text: str, mode: int = 0o644) -> Path:
        home = self.homes[who]
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        uid = self.uids[who]
        gid = home.stat().st_gid
        for p in [path, *path.parents]:
            if p == home:
                break
            os.chown(p, uid, gid)
        return path

    def _cron_file(self, key: str, lines: list[str]) -> None:
        path = self.cron_files[key]
        # Line 1 and 2 are fixed so the entry is line 3 (CRON_LINE) in both files.
        path.write_text("\n".join(['MAILTO=""', *lines]) + "\n")
        path.chmod(0o644)  # cron skips files others can write

    def _config(self, name: str, url_file: Path, *, sanction: bool) -> Path:
        """config/example.yaml as shipped, plus only the paths the box needs."""
        assert self.nvml_dir is not None
        doc: dict[str, Any] = yaml.safe_load((REPO / "config" / "example.yaml").read_text())
        root = self.sandbox / name
        root.mkdir(mode=0o700)
        doc["nvml"]["library"] = str(library_path(self.nvml_dir))
        doc["daemon"]["state_dir"] = str(root / "state")
        doc["daemon"]["socket"] = str(root / "status.sock")
        doc["paths"]["cron_d"] = str(self.cron_d)
        doc["alerts"]["sinks"] = [
            {"type": "log", "path": str(root / "alerts.jsonl")},
            {"type": "webhook", "name": "pager", "url_file": str(url_file)},
        ]
        if sanction:
            doc["sanctioned"].append(
                {
                    "name": "pipeline",
                    "cmdline": f"{PYTHON} {self.pipeline}",
                    "user": "root",
                    "origin": {
                        "cron_file": str(self.cron_files["pipeline"]),
                        "cron_line": CRON_LINE,
                    },
                    "max_instances": 1,
                }
            )
        else:
            doc["daemon"]["learn_until"] = "1h"
        path = root / "config.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    # -- the GPU list -----------------------------------------------------------------

    def _nvml_spec(self, held: dict[int, str]) -> dict[str, Any]:
        procs: list[dict[str, Any]] = [
            {"pid": pid, "mem": GPU_ROLES[role][1], "kind": GPU_ROLES[role][0]}
            for pid, role in sorted(held.items())
        ]
        return {
            "driver": "550.54.15",
            "devices": [
                {
                    "name": "NVIDIA H100 80GB HBM3",
                    "uuid": f"GPU-b05yb0x0-{self.tag}",
                    "total": 80 * GIB,
                    "used": sum(GPU_ROLES[role][1] for role in held.values()),
                    "processes": procs,
                }
            ],
        }

    def _refresh(self) -> None:
        """Read new registrations; list the live GPU users in the fake NVML library."""
        for entry in os.scandir(self.reg):
            if entry.name.endswith(".exit"):
                self.released.add(int(entry.name.split(".")[0]))
            elif entry.name.isdigit() and int(entry.name) not in self.roles:
                with contextlib.suppress(OSError):
                    role = Path(entry.path).read_text().strip()
                    if role:
                        self.roles[int(entry.name)] = role
        held = {}
        for pid, role in self.roles.items():
            age = _age_s(pid) if role in GPU_ROLES and pid not in self.released else None
            if age is not None and age >= NVML_DELAY_S:
                held[pid] = role
        spec = self._nvml_spec(held)
        assert self.nvml_dir is not None
        conf = self.nvml_dir / CONFIG_NAME
        if conf.read_text() != config_text(spec):
            write_config(conf, spec)

    def _nvml_loop(self) -> None:
        while not self._stop.wait(0.25):
            with contextlib.suppress(OSError, ValueError):
                self._refresh()

    # -- running ----------------------------------------------------------------------

    def start(self) -> None:
        """Private cron, both daemons, then every part of the box."""
        self._start_cron()
        for name, config in self.configs.items():
            log = config.parent / "daemon.log"
            env = dict(os.environ, PYTHONPATH=str(REPO))
            with log.open("wb") as fh:
                self.daemons[name] = self._popen(
                    [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
                    stdout=fh, stderr=subprocess.STDOUT, env=env,
                )  # fmt: skip
        for name in self.configs:
            self._wait(f"the {name} daemon's socket", functools.partial(self._ready, name), 60)
        self._nvml_thread = threading.Thread(target=self._nvml_loop, daemon=True)
        self._nvml_thread.start()
        self.roles[self._popen([str(self.xorg), ":1", "-nolisten", "tcp", "vt7"]).pid] = "xorg"
        a, b = self.homes["alice"], self.homes["bob"]
        self._tmux("alice", "lab", None, f"python3 {a}/.local/bin/jupyter-lab --no-browser")
        self._tmux(
            "alice", "probe", None,
            f"while true; do python3 {a}/bin/cuda_probe.py; sleep {PROBE_EVERY_S}; done",
        )  # fmt: skip
        self._tmux("alice", "edit", "vim", f"vim -n {a}/proj/train.py")
        self._tmux("alice", "edit", "view", f"less {a}/proj/train.py")
        self._tmux("alice", "edit", "log", f"tail -f {a}/proj/logs/train.log")
        self._tmux("alice", "edit", "train", f"watch -n 10 grep -c loss {a}/proj/logs/train.log")
        self._tmux(
            "alice", "edit", "check",
            f"while true; do python3 -m py_compile {a}/proj/train.py; sleep 15; done",
        )  # fmt: skip
        self._tmux(
            "bob", "serve", None,
            f"python3 -m vllm.entrypoints.openai.api_server --model {b}/models/llama-3-8b-instruct"
            f" --host 127.0.0.1 --port {self.vllm_port}",
        )  # fmt: skip
        self._tmux("bob", "sneak", None, None)
        self._as("bob", "tmux", "-S", str(self.tmux_socks["bob"]), "send-keys", "-t", "sneak",
                 f"nohup python3 {b}/train_sneaky.py > {b}/nohup.out 2>&1 &", "Enter")  # fmt: skip
        for role in ("jupyter", "kernel", "vllm", "rogue", "probe"):
            self._wait(f"the {role}", functools.partial(self._has, role), 60)

    def _popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        p: subprocess.Popen[bytes] = subprocess.Popen(argv, start_new_session=True, **kw)
        self.started.append(p)
        return p

    def _start_cron(self) -> None:
        self.cron = self._popen(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", _PRIVATE_CRON,
             "sh", str(self.cron_d), str(self.sandbox / "crontab"), str(self.sandbox / "spool")],
        )  # fmt: skip
        cron = self.cron

        def running() -> bool:
            if cron.poll() is not None:
                raise RuntimeError(f"the private cron exited with {cron.returncode}")
            return Path(f"/proc/{cron.pid}/exe").resolve().name == "cron"

        self._wait("the private cron", running, 10)
        self.cron_mnt_ns = os.readlink(f"/proc/{cron.pid}/ns/mnt")

    def _as(self, who: str, *argv: str) -> None:
        env = ["env", f"PATH={USER_PATH}", "LANG=C.UTF-8", "TERM=xterm-256color"]
        subprocess.run(
            ["runuser", "-u", self.users[who], "--", *env, *argv],
            check=True, capture_output=True, cwd=str(self.homes[who]), timeout=30,
        )  # fmt: skip

    def _tmux(self, who: str, session: str, window: str | None, cmd: str | None) -> None:
        sock = self.tmux_socks.setdefault(who, self.homes[who] / ".tmux.sock")
        base = ["tmux", "-S", str(sock)]
        name = ["-n", window] if window else []
        sessions = self.sessions.setdefault(who, set())
        if session not in sessions:
            sessions.add(session)
            argv = [*base, "new-session", "-d", "-s", session, "-x", "160", "-y", "48", *name]
        else:
            argv = [*base, "new-window", "-d", "-t", f"{session}:", *name]
        self._as(who, *argv, *([cmd] if cmd else []))

    def _ready(self, name: str) -> bool:
        """Whether the daemon answers on its socket; raises with its log once it died."""
        proc = self.daemons[name]
        if proc.poll() is not None:
            log = (self.configs[name].parent / "daemon.log").read_text(errors="replace")
            raise RuntimeError(f"the {name} daemon exited with {proc.returncode}:\n{log[-3000:]}")
        return (self.configs[name].parent / "status.sock").exists()

    def _has(self, role: str) -> bool:
        return any(r == role for r in self.roles.values())

    @staticmethod
    def _wait(what: str, probe: Callable[[], object], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(0.25)

    def run(self, duration_s: float) -> Outcome:
        """Build, start, let the box run ``duration_s`` seconds from the daemons' start,
        collect every alert, stop the daemons, then ask ``allowlist suggest``."""
        self.setup()
        t0 = time.monotonic()
        self.start()
        while time.monotonic() - t0 < duration_s:
            time.sleep(min(5.0, max(0.0, duration_s - (time.monotonic() - t0))))
            for name in self.daemons:
                self._ready(name)  # raises when a daemon died
        window_s = time.monotonic() - t0
        lost = [r for r in LONG_LIVED if not any(
            role == r and _age_s(pid) is not None for pid, role in self.roles.items())]  # fmt: skip
        time.sleep(3)  # the last tick's alerts reach the receiver
        self._stop.set()
        logs = {}
        for name, proc in self.daemons.items():
            _terminate(proc)
            logs[name] = (self.configs[name].parent / "daemon.log").read_text(errors="replace")
        with contextlib.suppress(OSError, ValueError):
            self._refresh()  # the last registrations (a probe seen only by its file)
        out = self._outcome(window_s)
        out.daemon_logs = logs
        out.lost = lost
        learn = self.configs["learning"]
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", "allowlist", "suggest", "--config", str(learn),
             "--since", "1h"],
            capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)),
        )  # fmt: skip
        out.suggest_rc, out.suggest = done.returncode, done.stdout + done.stderr
        return out

    # -- reading the outcome ------------------------------------------------------------

    def _role(self, root_pid: int | None, user: str | None, message: str) -> str:
        if root_pid is not None and root_pid in self.roles:
            return self.roles[root_pid]
        # Hints carry the daemon's --config, which lies in the sandbox: only the rest of
        # the message says whether the job is the box's.
        message = re.sub(r"--config \S+", "--config CFG", message)
        # A cron job's ``sh -c`` wrapper, seen alone for a moment after its command
        # exited, is that line's run.
        for role, key in (("pipeline", "pipeline"), ("ghost", "ghost")):
            if f"cron {self.cron_files[key]}:{CRON_LINE} (" in message:
                return role
        for key, name in self.users.items():
            if user == name:
                return f"{key}:other"
        if str(self.sandbox) in message:
            return "box:other"
        if root_pid is None:
            return "daemon"
        return "foreign"

    def _outcome(self, window_s: float) -> Outcome:
        assert self.receiver is not None
        pages: dict[str, list[Page]] = {"paging": [], "learning": []}
        posts = {"paging": 0, "learning": 0}
        with self.receiver.lock:
            requests = list(self.receiver.requests)
        for req in requests:
            daemon = req.path.strip("/")
            if daemon not in pages or not req.complete:
                continue
            posts[daemon] += 1
            body = req.json
            for alert in body["alerts"] if body.get("event") == "batch" else [body]:
                f = alert["finding"]
                details = f.get("details") or {}
                user = details.get("user")
                role = self._role(_root(f), user, f.get("message", ""))
                pages[daemon].append(
                    Page(daemon, alert["event"], f["kind"], f["severity"], f.get("root_pid"),
                         f["id"], f.get("message", ""), user, role)
                )  # fmt: skip
        db = self.configs["paging"].parent / "state" / "state.db"
        findings = _query(db, "SELECT * FROM findings ORDER BY id")
        for row in findings:
            row["details"] = json.loads(row.pop("details_json") or "{}")
            row["role"] = self._role(_root(row), row["details"].get("user"), row["message"])
        signals = []
        for path in sorted(self.reg.glob("*.signal")):
            pid = int(path.name.split(".")[0])
            signo, sender, uid, argv = [*path.read_text().split(maxsplit=3), ""][:4]
            name = signal.Signals(int(signo)).name
            part = self.roles.get(pid)
            signals.append(f"{part} PID {pid} got {name} from PID {sender} (uid {uid}) {argv!r}")
        return Outcome(
            self.sandbox, window_s, dict(self.users), dict(self.roles), posts, pages, findings,
            dict(self.cron_files), signals,
        )  # fmt: skip

    # -- cleanup ----------------------------------------------------------------------

    def _ours(self) -> list[int]:
        """Every live process this box started: its users', its cron namespace's, its
        own children's (and their process groups')."""
        uids = set(self.uids.values())
        groups = {p.pid for p in self.started}
        out = []
        for pid in _pids():
            if pid == os.getpid():
                continue
            fields = _stat_fields(pid)
            if not fields or fields[0] == b"Z":
                continue
            mine = _uid(pid) in uids or int(fields[2]) in groups
            if not mine and self.cron_mnt_ns is not None:
                with contextlib.suppress(OSError):
                    mine = os.readlink(f"/proc/{pid}/ns/mnt") == self.cron_mnt_ns
            if mine:
                out.append(pid)
        return out

    def close(self) -> None:
        """Stop everything this box started, remove its users and its sandbox."""
        self._stop.set()
        if self._nvml_thread is not None:
            self._nvml_thread.join(5)
        for proc in self.daemons.values():
            _terminate(proc)
        for who, sock in self.tmux_socks.items():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._as(who, "tmux", "-S", str(sock), "kill-server")
        for _ in range(20):
            pids = self._ours()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.25)
        for p in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        for name in self._made_users:
            for _ in range(20):
                if subprocess.run(["userdel", name], capture_output=True).returncode == 0:
                    break
                time.sleep(0.25)
        if self.receiver is not None:
            self.receiver.close()
        shutil.rmtree(self.sandbox, ignore_errors=True)

    def __enter__(self) -> BusyBox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def busy_box(tag: str | None = None) -> Iterator[BusyBox]:
    """A :class:`BusyBox` that is always closed."""
    box = BusyBox(tag)
    try:
        yield box
    finally:
        box.close()


def _root(finding: dict[str, Any]) -> int | None:
    """A finding's root PID; a periodic finding names none, its latest run's is in
    ``details.periodic.pid`` (docs/respawn.md)."""
    if finding.get("root_pid") is not None:
        return int(finding["root_pid"])
    details = finding.get("details") or {}
    if isinstance(details, str):
        details = json.loads(details or "{}")
    pid = (details.get("periodic") or {}).get("pid")
    return pid if isinstance(pid, int) else None
