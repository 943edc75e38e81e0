"""A rogue cannot open a GPU (issue 36, item 2), with the kernel's real cgroup v1
``devices`` controller.

The GPU is a stand-in node made in the test's own folder (``mknod DIR/nvidia0 c 195 0``,
195 the NVIDIA major): on this GPU-less machine its ``open(2)`` gives ENXIO when the
device cgroup allows it and EPERM when it denies it. Every process is this test's own,
and ``enforcement.gpu_open`` is ``enforce`` (or ``audit``) only through a rule naming this
test's folder: other jobs on the host are never touched. The only cgroups made are the
denials' own children of the devices hierarchy (``rogue-watchdog-gpu-deny.SESSION.ID``),
each removed in teardown after its processes are moved back.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.gpudeny import DENY_PREFIX, find_controller
from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from tests.conftest import REPO, Spawned, need, need_root

pytestmark = pytest.mark.system

DEVICES = Path("/sys/fs/cgroup/devices")

# Opens the node each time a numbered request file appears; writes the errno's name.
OPENER = """
import errno, os, sys, time
node, box, name = sys.argv[1], sys.argv[2], sys.argv[3]
n = 0
while True:
    req = os.path.join(box, f"{name}.go{n}")
    if os.path.exists(req):
        try:
            os.close(os.open(node, os.O_RDWR))
            res = "opened"
        except OSError as exc:
            res = errno.errorcode.get(exc.errno, str(exc.errno))
        with open(os.path.join(box, f"{name}.res{n}.tmp"), "w") as fh:
            fh.write(res)
        os.rename(os.path.join(box, f"{name}.res{n}.tmp"), os.path.join(box, f"{name}.res{n}"))
        n += 1
    time.sleep(0.02)
"""


class Opener:
    """A process of this test that opens the stand-in node when asked."""

    def __init__(self, spawned: Spawned, box: Path, script: str, name: str) -> None:
        path = box / script
        path.write_text(OPENER)
        self.box, self.name, self.n = box, name, 0
        self.proc = spawned.start([sys.executable, str(path), str(box / "nvidia0"), str(box), name])
        for _ in range(200):
            live = read_live(self.proc.pid)
            if live is not None and str(path) in live.cmdline:
                return
            time.sleep(0.02)
        raise AssertionError(f"{script} did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def open(self) -> str:
        """The errno name of one ``open(2)`` of the node (``ENXIO``: allowed)."""
        n, self.n = self.n, self.n + 1
        (self.box / f"{self.name}.go{n}").write_text("")
        res = self.box / f"{self.name}.res{n}"
        for _ in range(500):
            if res.exists():
                return res.read_text()
            time.sleep(0.02)
        raise AssertionError(f"{self.name} did not answer")


def devices_cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _h, controllers, path = line.split(":", 2)
        if "devices" in controllers.split(","):
            return path
    raise AssertionError(f"PID {pid}: no devices line")


def ours(session: str) -> list[Path]:
    """This test's denial cgroups (its daemon's session in the name)."""
    return sorted(DEVICES.rglob(f"{DENY_PREFIX}.{session[:12]}.*"))


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Path]:
    need_root()
    need(find_controller("/sys/fs/cgroup").usable, "needs the cgroup v1 devices hierarchy")
    os.mknod(tmp_path / "nvidia0", 0o600 | 0o020000, os.makedev(195, 0))
    yield tmp_path


def make(box: Path, mode: str) -> tuple[Daemon, Path]:
    text = (
        "nvml: {enabled: false}\n"
        "sanctioned:\n"
        f"  - {{name: pipeline, cmdline: '*{box}/train_pipeline.py*', origin: {{any: true}}}}\n"
        "ignore:\n"
        f"  - {{name: bench, cmdline: '*{box}/train_ignored.py*'}}\n"
        f"daemon: {{state_dir: '{box}/state', socket: '{box}/s.sock'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{box}/alerts.log'}}]}}\n"
        "enforcement:\n"
        "  mode: observe\n"
        f"  gpu_devices: ['{box}/nvidia[0-9]*']\n"
        "  rules:\n"
        # The rule names the sanctioned and the ignored script too: the guard decides.
        f"    - {{name: mine, cmdline: '*{box}/*', gpu_open: {mode}}}\n"
    )
    config = box / "config.yaml"
    config.write_text(text)
    cfg = parse_config(text, str(config))
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db)
    d.sources.append(enf)
    d.enforcers.append(enf)
    return d, config


@contextlib.contextmanager
def cleaned(d: Daemon) -> Iterator[None]:
    """Whatever the test leaves: every denial cgroup of this daemon emptied (its
    processes back to the cgroup above) and removed."""
    session = d.db.session
    try:
        yield
    finally:
        for cg in reversed(ours(session)):
            with contextlib.suppress(OSError):
                for pid in (cg / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (cg.parent / "cgroup.procs").write_text(pid)
                cg.rmdir()
        d.db.close()
        assert ours(session) == []


def test_enforce_denies_the_rogue_only_and_undo_lifts_it(box: Path, spawned: Spawned) -> None:
    d, config = make(box, "enforce")
    with cleaned(d):
        rogue = Opener(spawned, box, "train_rogue.py", "rogue")
        pipeline = Opener(spawned, box, "train_pipeline.py", "pipeline")
        ignored = Opener(spawned, box, "train_ignored.py", "ignored")
        home = devices_cgroup_of(rogue.pid)
        # Before: every open reaches the driver (none here): ENXIO.
        assert [rogue.open(), pipeline.open(), ignored.open()] == ["ENXIO"] * 3
        d.tick(time.time())
        verdicts = {j.root_pid: j.verdict for j in d.last.result.jobs}  # type: ignore[union-attr]
        assert (verdicts[rogue.pid], verdicts[pipeline.pid], verdicts[ignored.pid]) == (
            "rogue", "sanctioned", "ignored",
        )  # fmt: skip
        assert [rogue.open(), pipeline.open(), ignored.open()] == ["EPERM", "ENXIO", "ENXIO"]
        (deny,) = [a for a in d.db.actions() if a.kind == "gpu-deny"]
        cg = ours(d.db.session)
        assert cg == [DEVICES / home.strip("/") / f"{DENY_PREFIX}.{d.db.session[:12]}.{deny.id}"]
        assert (deny.outcome, deny.dry_run, deny.undo) == (
            "ok", False, [{"op": "cgroup_lift", "cgroup": str(cg[0])}],
        )  # fmt: skip
        assert [(p["pid"], p["result"]) for p in deny.details["procs"]] == [(rogue.pid, "denied")]
        assert deny.details["rules"] == ["c 195:0 rwm"]
        assert devices_cgroup_of(rogue.pid) == str(Path(home) / cg[0].name)
        assert devices_cgroup_of(pipeline.pid) == home == devices_cgroup_of(ignored.pid)
        # Written before it was made: the row, then each step.
        assert [(s.op, s.status) for s in d.db.action_steps(deny.id)] == [
            ("cgroup-mkdir", "done"), ("cgroup-write", "done"), ("cgroup-move", "done"),
        ]  # fmt: skip
        # Shown in status.
        doc = build_status(d)
        assert doc["gpu_open"]["denied"] == [
            {"action": deny.id, "job": deny.details["job"], "pids": [rogue.pid],
             "cgroups": [str(cg[0])]}
        ]  # fmt: skip
        text = render_status(doc, 200, False)
        assert "GPU open: off by default; enforcing by rule 'mine'" in text
        assert f"undo with: rogue-watchdog undo {deny.id}" in text
        # Undo (the CLI, as a person runs it): the rogue opens again as before.
        out = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", "undo", str(deny.id), "--config", str(config)],
            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
            check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert rogue.open() == "ENXIO"
        assert devices_cgroup_of(rogue.pid) == home
        assert ours(d.db.session) == []
        undone = d.db.action(deny.id)
        assert undone is not None and undone.undone_at is not None
        # Undone stays undone: the next tick does not deny the same job again.
        d.tick(time.time())
        assert rogue.open() == "ENXIO"
        assert [a.id for a in d.db.actions() if a.kind == "gpu-deny"] == [deny.id]


def test_audit_denies_nothing_and_records_each_would_be_denial(box: Path, spawned: Spawned) -> None:
    d, _config = make(box, "audit")
    with cleaned(d):
        rogue = Opener(spawned, box, "train_rogue.py", "rogue")
        pipeline = Opener(spawned, box, "train_pipeline.py", "pipeline")
        d.tick(time.time())
        assert [rogue.open(), pipeline.open()] == ["ENXIO", "ENXIO"]
        assert ours(d.db.session) == []
        (audit,) = [a for a in d.db.actions() if a.kind == "gpu-deny"]
        assert (audit.outcome, audit.dry_run, audit.undo) == ("audit", True, None)
        assert [(p["pid"], p["result"]) for p in audit.details["procs"]] == [
            (rogue.pid, "would-deny")
        ]
        assert build_status(d)["gpu_open"]["rules"] == [
            {"rule": "mine", "gpu_open": "audit", "state": "auditing"}
        ]


def test_a_denial_is_lifted_when_the_job_ends(box: Path, spawned: Spawned) -> None:
    d, _config = make(box, "enforce")
    with cleaned(d):
        rogue = Opener(spawned, box, "train_rogue.py", "rogue")
        d.tick(time.time())
        assert rogue.open() == "EPERM"
        (deny,) = [a for a in d.db.actions() if a.kind == "gpu-deny"]
        assert len(ours(d.db.session)) == 1
        rogue.proc.kill()
        rogue.proc.wait()
        d.tick(time.time())
        assert ours(d.db.session) == []
        (lifted,) = [a for a in d.db.actions() if a.kind == "gpu-lift"]
        assert (lifted.outcome, lifted.details["lifted"], lifted.details["why"]) == (
            "ok", deny.id, "the job ended: nothing is left in its cgroup",
        )  # fmt: skip
        after = d.db.action(deny.id)
        assert after is not None and after.undone_at is not None


def test_a_denial_is_lifted_when_a_rule_sanctions_the_job(box: Path, spawned: Spawned) -> None:
    d, config = make(box, "enforce")
    with cleaned(d):
        rogue = Opener(spawned, box, "train_rogue.py", "rogue")
        d.tick(time.time())
        assert rogue.open() == "EPERM"
        (deny,) = [a for a in d.db.actions() if a.kind == "gpu-deny"]
        # An operator sanctions it (a reload): the next tick lifts the denial.
        text = config.read_text().replace(
            "sanctioned:\n",
            f"sanctioned:\n  - {{name: now-ok, cmdline: '*{box}/train_rogue.py*', "
            "origin: {any: true}}\n",
        )
        config.write_text(text)
        d.config_path = str(config)
        assert d.reload()
        d.tick(time.time())
        assert rogue.open() == "ENXIO"
        assert ours(d.db.session) == []
        (lifted,) = [a for a in d.db.actions() if a.kind == "gpu-lift"]
        assert lifted.details["lifted"] == deny.id
        assert lifted.details["why"] == (
            f"the guard now refuses it: PID {rogue.pid} belongs to a sanctioned job"
        )
        assert lifted.details["moved_back"] == [rogue.pid]
