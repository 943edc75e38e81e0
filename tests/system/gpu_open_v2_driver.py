"""The cgroup v2 half of tests/system/test_gpu_open_v2.py, run by it inside a private
mount namespace (``unshare -m --propagation private``): the test's own cgroup2 mount.

    python -m tests.system.gpu_open_v2_driver BOX enforce|audit|override

It mounts cgroup2 on ``BOX/cg2`` (seen by nobody else), makes one child cgroup of its own
there (``rw-test-gpuv2.PID``), starts its openers (``train_rogue.py`` and the others, in
``BOX``) and moves them into that child, runs the real daemon (``paths.cgroup_root`` the
mount) against them, and prints one JSON document of what each open gave at each step.
Whatever happens it kills and reaps its openers, removes every cgroup it or its daemon
made and unmounts. The only cgroups touched are that child and the denials' children
of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rogue_watchdog.actions import devprog
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.gpudeny import DENY_PREFIX, devices_cgroup
from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.cli.scan import gpu_open_lines
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status

# Serves numbered requests (a file whose text says what to do) until its parent is gone.
OPENER = """
import errno, os, sys, time
box, name, parent = sys.argv[1], sys.argv[2], os.getppid()
n = 0
while os.getppid() == parent:
    req = os.path.join(box, f"{name}.go{n}")
    if os.path.exists(req):
        op, _, path = open(req).read().partition(" ")
        try:
            if op == "mknod":
                os.mknod(path, 0o600 | 0o020000, os.makedev(195, 0))
                os.unlink(path)
                res = "made"
            else:
                os.close(os.open(path, os.O_RDWR))
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
    """A process of the driver that opens (or mknods) a path when asked."""

    def __init__(self, box: Path, name: str, into: Path) -> None:
        script = box / f"{name}.py"
        script.write_text(OPENER)
        self.box, self.name, self.n = box, name, 0
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(box), name], stdin=subprocess.DEVNULL
        )
        for _ in range(200):
            live = read_live(self.proc.pid)
            if live is not None and str(script) in live.cmdline:
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"{name} did not start")
        (into / "cgroup.procs").write_text(str(self.proc.pid))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, op: str, path: str) -> str:
        n, self.n = self.n, self.n + 1
        req = self.box / f"{self.name}.go{n}"
        req.with_suffix(".tmp").write_text(f"{op} {path}")
        req.with_suffix(".tmp").rename(req)  # whole: never read half-written
        res = self.box / f"{self.name}.res{n}"
        for _ in range(500):
            if res.exists():
                return res.read_text()
            time.sleep(0.02)
        raise AssertionError(f"{self.name} did not answer")

    def gpu(self) -> str:
        """The errno name of one ``open(2)`` of the stand-in (``ENXIO``: allowed)."""
        return self.ask("open", str(self.box / "nvidia0"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def cgroup_of(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return devices_cgroup(lines, "cgroup-v2") or "?"


def config_text(box: Path, mode: str, sanctioned: str = "") -> str:
    return (
        "nvml: {enabled: false}\n"
        "sanctioned:\n"
        f"  - {{name: pipeline, cmdline: '*{box}/train_pipeline.py*', origin: {{any: true}}}}\n"
        + sanctioned
        + "ignore:\n"
        f"  - {{name: bench, cmdline: '*{box}/train_ignored.py*'}}\n"
        f"daemon: {{state_dir: '{box}/state', socket: '{box}/s.sock'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{box}/alerts.log'}}]}}\n"
        f"paths: {{cgroup_root: '{box}/cg2'}}\n"
        "enforcement:\n"
        "  mode: observe\n"
        f"  gpu_devices: ['{box}/nvidia[0-9]*']\n"
        "  rules:\n"
        # The rule names the sanctioned and the ignored script too: the guard decides.
        f"    - {{name: mine, cmdline: '*{box}/*', gpu_open: {mode}}}\n"
    )


def make(box: Path, mode: str, keep: bool = False) -> tuple[Daemon, Path]:
    config = box / "config.yaml"
    if not keep:
        config.write_text(config_text(box, mode))
    cfg = parse_config(config.read_text(), str(config))
    d = Daemon(cfg, str(config))
    enf = Enforcer(cfg, d.db)
    d.sources.append(enf)
    d.enforcers.append(enf)
    return d, config


def actions(d: Daemon, kind: str) -> list[Any]:
    return [a for a in d.db.actions() if a.kind == kind]


def scenario(
    box: Path, mode: str, test_cg: Path, out: dict[str, Any], openers: list[Opener]
) -> None:
    rel = "/" + test_cg.relative_to(box / "cg2").as_posix()
    names = ["rogue", "pipeline", "ignored"]
    if mode == "enforce":
        names += ["rogue_ends", "rogue_later_ok"]
    if mode == "override":
        # A program of the cgroup above attached without BPF_F_ALLOW_MULTI (as an old
        # container runtime would): a denial's child would override it, so none is made.
        allow = devprog._load(
            devprog._insn(devprog._MOV, dst=0, imm=1) + devprog._insn(devprog._EXIT),
            "rw_test_allow",
        )
        fd = os.open(test_cg, os.O_RDONLY | os.O_DIRECTORY)
        attr = devprog._attr((0, "I", fd), (4, "I", allow), (8, "I", 6), (12, "I", 1))
        devprog._bpf(devprog._PROG_ATTACH, attr)
        os.close(fd)
        os.close(allow)
        out["above"] = devprog.query(str(test_cg))
        mode = "enforce"
        names = ["rogue"]
    for name in names:
        openers.append(Opener(box, f"train_{name}", test_cg))
    o = {op.name.removeprefix("train_"): op for op in openers}
    name_of = {op.pid: n for n, op in o.items()}
    out["before"] = {n: op.gpu() for n, op in o.items()}
    d, config = make(box, mode)
    out["check_config"] = gpu_open_lines(d.config)[-1]
    d.tick(time.time())
    jobs = {j.root_pid: j.verdict for j in d.last.result.jobs}  # type: ignore[union-attr]
    out["verdicts"] = {n: jobs.get(op.pid) for n, op in o.items()}
    out["after"] = {n: op.gpu() for n, op in o.items()}
    out["rogue_dev_null"] = o["rogue"].ask("open", "/dev/null")
    out["rogue_mknod"] = o["rogue"].ask("mknod", str(box / "made0"))
    if "pipeline" in o:
        out["pipeline_mknod"] = o["pipeline"].ask("mknod", str(box / "made1"))
    out["cgroups"] = {n: cgroup_of(op.pid).removeprefix(rel) for n, op in o.items()}
    doc = build_status(d)["gpu_open"]
    out["status"] = {k: doc[k] for k in ("controller", "state", "rules")}
    denies = actions(d, "gpu-deny")
    out["denies"] = [
        {
            "outcome": a.outcome, "dry_run": a.dry_run,
            "procs": [(name_of.get(p["pid"], p["pid"]), p["result"]) for p in a.details["procs"]],
            "undo": a.undo, "programs": a.details.get("programs"),
            "steps": [(s.op, s.status) for s in d.db.action_steps(a.id)],
            "attached": {cg: devprog.query(cg) for cg in (a.details.get("cgroups") or [])},
            "effective_has_it": {
                cg: a.details["programs"][cg] in devprog.query(cg, effective=True)
                for cg in (a.details.get("cgroups") or [])
            },
            "cgroups": [c.removeprefix(str(test_cg)) for c in a.details.get("cgroups") or []],
            "id": a.id,
        }
        for a in denies
    ]  # fmt: skip
    out["session"] = d.db.session[:12]
    out["errors"] = [a.details.get("error") for a in denies]
    out["left_after_tick"] = sorted(p.name for p in test_cg.rglob(f"{DENY_PREFIX}*"))
    if mode != "enforce" or "above" in out:
        d.db.close()
        return
    by_pid = {a.details["root"][0]: a for a in denies}
    # Undo (the CLI, as a person runs it) of the rogue's denial.
    undo_id = by_pid[o["rogue"].pid].id
    run = subprocess.run(
        [sys.executable, "-m", "rogue_watchdog", "undo", str(undo_id), "--config", str(config)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    out["undo_rc"] = run.returncode
    out["after_undo"] = {n: op.gpu() for n, op in o.items()}
    out["rogue_cgroup_after_undo"] = cgroup_of(o["rogue"].pid).removeprefix(rel)
    out["undo_steps"] = {
        a.kind: steps_of(d, a.id)
        for a in d.db.actions() if a.kind not in ("gpu-deny", "gpu-lift")
    }  # fmt: skip
    # The job ends: the next tick lifts its denial.
    o["rogue_ends"].stop()
    # The daemon restarts (a new process would see the same: the programs live in the
    # kernel, their ids in the state database) with a config that sanctions the other:
    # its first tick lifts both, each by the program id the old daemon recorded.
    config.write_text(
        config_text(
            box, mode,
            f"  - {{name: now-ok, cmdline: '*{box}/train_rogue_later_ok.py*', "
            "origin: {any: true}}\n",
        )
    )  # fmt: skip
    d.db.close()
    d, config = make(box, mode, keep=True)
    out["restarted_session"] = d.db.session[:12]
    d.tick(time.time())
    out["lifts"] = sorted(
        [name_of[lifted_root(d, a)], a.outcome, a.details["why"], a.details["moved_back"]]
        for a in actions(d, "gpu-lift")
    )
    out["lift_steps"] = [steps_of(d, a.id) for a in actions(d, "gpu-lift")]
    out["after_lifts"] = {n: op.gpu() for n, op in o.items() if n != "rogue_ends"}
    out["left"] = sorted(p.name for p in test_cg.rglob(f"{DENY_PREFIX}*"))
    d.db.close()


def steps_of(d: Daemon, action_id: int) -> list[Any]:
    """Each step's op; a detach's with its result (whether the id was found attached)."""
    steps = d.db.action_steps(action_id)
    return [[s.op, s.result] if s.op == "bpf-detach" else s.op for s in steps]


def lifted_root(d: Daemon, lift: Any) -> int:
    rec = d.db.action(lift.details["lifted"])
    assert rec is not None
    return int(rec.details["root"][0])


def main() -> int:
    box, mode = Path(sys.argv[1]), sys.argv[2]
    mnt = box / "cg2"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mnt)], check=True)
    test_cg = mnt / f"rw-test-gpuv2.{os.getpid()}"
    test_cg.mkdir()
    home = cgroup_of(os.getpid())
    out: dict[str, Any] = {}
    openers: list[Opener] = []
    try:
        scenario(box, mode, test_cg, out, openers)
    except Exception:
        out["exception"] = traceback.format_exc()
    finally:
        for op in openers:
            op.stop()
        # Whatever is left: the denials' children (empty now), then the test's child.
        for cg in sorted(test_cg.rglob(f"{DENY_PREFIX}*"), key=lambda p: -len(p.parts)):
            for _ in range(100):
                with contextlib.suppress(FileNotFoundError):
                    try:
                        cg.rmdir()
                    except OSError:
                        time.sleep(0.02)
                        continue
                break
        for _ in range(100):
            try:
                test_cg.rmdir()
                break
            except OSError:
                time.sleep(0.02)
        out["test_cgroup_removed"] = not test_cg.exists()
        out["driver_cgroup_unchanged"] = cgroup_of(os.getpid()) == home
        subprocess.run(["umount", str(mnt)], check=False)
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
