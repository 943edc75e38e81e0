"""Manual check on a host with a real NVIDIA GPU (not part of CI: CI has no GPU):
a rogue CUDA process fails to initialise, the sanctioned one is unaffected, and the
lift gives the GPU back (``enforcement.gpu_open``, issue 36 item 2), on cgroup v1
(``devices``) or cgroup v2 (a ``BPF_CGROUP_DEVICE`` program).

Two processes of this check wait for a signal file, then call ``cuInit(0)`` from the
driver library (``libcuda.so.1`` through ctypes: no framework needed) and report its
result: ``train_rogue.py`` (judged rogue) and ``train_pipeline.py`` (sanctioned). One
daemon tick (a Daemon with the Enforcer, NVML off, the default ``gpu_devices``,
``gpu_open: enforce`` through a rule naming only this check's folder) runs in between.
Expected: the rogue's ``cuInit`` fails (not 0), the pipeline's returns 0
(``CUDA_SUCCESS``). A child the rogue forks after the denial fails too (it is born in
the denial's cgroup). Then the denial is lifted (its ``cgroup_lift`` undo op: on v2 the
recorded program detached first) and the rogue forks a fresh child (``cuInit`` cannot
be retried in a process whose first call failed), which initialises: the rogue is back
in its own cgroup. Every process is killed and every cgroup this check made removed.

``--v2`` checks cgroup v2 on any host, also a v1 or hybrid one: the check runs itself
again in a private mount namespace (``unshare -m``), mounts cgroup2 on a folder of its
own, makes one child cgroup of its own there (removed at the end) and starts its
processes in it; nothing else of the host's cgroups is touched. Without it, the host's
own controller under ``--cgroup-root`` (default ``/sys/fs/cgroup``) is used: v1
``devices`` when the host has it, else v2.

Prints one line per check; exit 0 all passed, 1 a check failed, 3 the host cannot
enforce (the reason printed: no controller, no BPF, no libcuda, not root).

Usage (as root): python bench/gpu_open_real_check.py [--v2] [--cgroup-root DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rogue_watchdog.actions.effects import Effects  # noqa: E402
from rogue_watchdog.actions.enforcer import Enforcer  # noqa: E402
from rogue_watchdog.actions.gpudeny import (  # noqa: E402
    denial_cgroups,
    denial_programs,
    device_rules,
    find_controller,
    lift,
)
from rogue_watchdog.config import parse_config  # noqa: E402
from rogue_watchdog.daemon.loop import Daemon  # noqa: E402

DEVICES = ("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm")
# go1: cuInit here, and in a child forked now; go2: cuInit in a child forked now.
CUINIT = """
import ctypes, os, subprocess, sys, time
box, name = sys.argv[1], sys.argv[2]
def cuinit():
    try:
        return str(ctypes.CDLL("libcuda.so.1").cuInit(0))
    except OSError as exc:
        return f"no libcuda: {exc}"
CHILD = "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))"
def child():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()[-200:]
for go, work in (("go1", lambda: cuinit() + " child " + child()), ("go2", child)):
    while not os.path.exists(os.path.join(box, go)):
        time.sleep(0.02)
    res = work()
    with open(os.path.join(box, f"{name}.{go}.out"), "w") as fh:
        fh.write(res)
time.sleep(120)
"""


def run(box: Path, name: str, into: Path | None) -> subprocess.Popen[bytes]:
    script = box / f"{name}.py"
    script.write_text(CUINIT)
    proc = subprocess.Popen([sys.executable, str(script), str(box), name], start_new_session=True)
    if into is not None:
        (into / "cgroup.procs").write_text(str(proc.pid))
    return proc


def result(box: Path, name: str, go: str) -> str:
    out = box / f"{name}.{go}.out"
    for _ in range(1500):
        if out.exists() and out.read_text():
            return out.read_text()
        time.sleep(0.02)
    return "no answer in 30 s"


def own_v2(devices: list[str]) -> int:
    """Become this check again inside a private mount namespace, with ``--inside``
    (exec, not a child: a parent check would be an ancestor of the daemon, and the
    guard never denies a job holding the daemon's ancestors)."""
    argv = ["unshare", "-m", "--propagation", "private", sys.executable, __file__, "--inside"]
    os.execvp("unshare", [*argv, "--devices", *devices])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--v2", action="store_true", help="check cgroup v2 on a mount of its own")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    ap.add_argument(
        "--devices", nargs="+", default=list(DEVICES), help="gpu_devices globs (%(default)s)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("not root: cannot make device cgroups")
        return 3
    try:
        ctypes.CDLL("libcuda.so.1")  # as the checked processes load it
    except OSError as exc:
        print(f"no libcuda on this host: {exc}")
        return 3
    if args.v2:
        return own_v2(args.devices)
    box = Path(tempfile.mkdtemp(prefix="gpu-open-real-"))
    mine: Path | None = None
    root = args.cgroup_root
    if args.inside:
        mnt = box / "cg2"
        mnt.mkdir()
        subprocess.run(["mount", "-t", "cgroup2", "none", str(mnt)], check=True)
        mine = mnt / f"rw-gpu-open-real.{os.getpid()}"
        mine.mkdir()
        root = str(mnt)
    try:
        return check(box, root, mine, args.devices)
    finally:
        if mine is not None:
            for _ in range(100):
                try:
                    mine.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
            print(f"own cgroup removed: {not mine.exists()}")
            subprocess.run(["umount", str(box / "cg2")], check=False)
        if not os.path.ismount(box / "cg2"):  # never descend into a cgroup mount
            shutil.rmtree(box, ignore_errors=True)


def check(box: Path, cgroup_root: str, mine: Path | None, devices: list[str]) -> int:
    ctl = find_controller(cgroup_root)
    print(f"controller: {ctl.kind} under {ctl.hierarchy}")
    if not ctl.usable:
        print(f"this host: {ctl.why}")
        return 3
    rules = device_rules(devices)
    print(f"device rules: {rules}")
    text = (
        "nvml: {enabled: false}\n"
        f"sanctioned: [{{name: pipeline, cmdline: '*{box}/train_pipeline.py*', "
        "origin: {any: true}}]\n"
        f"daemon: {{state_dir: '{box}/state', socket: '{box}/s.sock'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{box}/alerts.log'}}]}}\n"
        f"paths: {{cgroup_root: '{cgroup_root}'}}\n"
        f"enforcement: {{gpu_devices: {list(devices)!r}, "
        f"rules: [{{name: check, cmdline: '*{box}/*', gpu_open: enforce}}]}}\n"
    )
    cfg = parse_config(text, str(box / "config.yaml"))
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db)
    d.sources.append(enf)
    d.enforcers.append(enf)
    procs = [run(box, "train_rogue", mine), run(box, "train_pipeline", mine)]
    checks: dict[str, bool] = {}
    denials = []
    try:
        time.sleep(1.0)
        d.tick(time.time())
        denials = [a for a in d.db.actions() if a.kind == "gpu-deny"]
        for a in denials:
            print(f"denial {a.id}: {a.outcome} {a.details.get('procs')} {a.undo}")
        (box / "go1").write_text("")
        rogue, pipeline = result(box, "train_rogue", "go1"), result(box, "train_pipeline", "go1")
        print(f"rogue cuInit, then its child's: {rogue}; sanctioned's: {pipeline}")
        own, _, kid = rogue.partition(" child ")
        checks["rogue fails to initialise CUDA"] = own not in ("0", "") and "no answer" not in own
        checks["a child the rogue forks fails too"] = kid not in ("0", "")
        checks["sanctioned initialises CUDA, and its child"] = pipeline == "0 child 0"
        for a in denials:
            programs = denial_programs(a)
            for cg in denial_cgroups(a):
                lift(cg, Effects(), programs=programs.get(cg, []))
        (box / "go2").write_text("")
        again = result(box, "train_rogue", "go2")
        print(f"after the lift, a child the rogue forks: cuInit {again}")
        checks["after the lift the rogue's new child opens the GPU"] = again == "0"
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for a in denials:
            programs = denial_programs(a)
            for cg in denial_cgroups(a):
                with contextlib.suppress(OSError):
                    lift(cg, Effects(), programs=programs.get(cg, []))
        d.db.close()
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if checks and all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
