"""Manual check on a host with a real NVIDIA GPU (not part of CI: CI has no GPU):
a rogue CUDA process fails to initialise, the sanctioned one is unaffected
(``enforcement.gpu_open``, issue 36 item 2).

Two processes of this check wait for a signal file, then call ``cuInit(0)`` from the
driver library (``libcuda.so.1`` through ctypes: no framework needed) and report its
result: ``train_rogue.py`` (judged rogue) and ``train_pipeline.py`` (sanctioned). One
daemon tick (a Daemon with the Enforcer, NVML off, the default ``gpu_devices``,
``gpu_open: enforce`` through a rule naming only this check's folder) runs in between.
Expected: the rogue's ``cuInit`` fails (not 0), the pipeline's returns 0
(``CUDA_SUCCESS``). Then the denial is undone (its ``cgroup_lift`` op) and a new run of
the rogue's script, started in the cgroup the rogue was in, initialises again.
Every process is killed and every denial cgroup removed at the end.

Prints one line per check; exit 0 all passed, 1 a check failed, 3 the host cannot
enforce (the reason printed: cgroup v2 only, no libcuda, not root).

Usage (as root): python bench/gpu_open_real_check.py
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
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
from rogue_watchdog.actions.gpudeny import device_rules, find_controller, lift  # noqa: E402
from rogue_watchdog.config import parse_config  # noqa: E402
from rogue_watchdog.daemon.loop import Daemon  # noqa: E402

CUINIT = """
import ctypes, os, sys, time
go, out = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.02)
try:
    rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
except OSError as exc:
    rc = f"no libcuda: {exc}"
open(out, "w").write(str(rc))
time.sleep(120)
"""


def run(box: Path, name: str, go: str) -> subprocess.Popen[bytes]:
    script = box / f"{name}.py"
    script.write_text(CUINIT)
    return subprocess.Popen(
        [sys.executable, str(script), str(box / go), str(box / f"{name}.{go}.out")],
        start_new_session=True,
    )


def result(box: Path, name: str, go: str) -> str:
    out = box / f"{name}.{go}.out"
    for _ in range(1500):
        if out.exists() and out.read_text():
            return out.read_text()
        time.sleep(0.02)
    return "no answer in 30 s"


def main() -> int:
    if os.geteuid() != 0:
        print("not root: cannot make device cgroups")
        return 3
    ctl = find_controller("/sys/fs/cgroup")
    if not ctl.usable:
        print(f"this host: {ctl.why}")
        return 3
    if ctypes.util.find_library("cuda") is None:
        print("no libcuda on this host")
        return 3
    rules = device_rules(("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm"))
    print(f"device rules: {rules}")
    box = Path(tempfile.mkdtemp(prefix="gpu-open-real-"))
    text = (
        "nvml: {enabled: false}\n"
        f"sanctioned: [{{name: pipeline, cmdline: '*{box}/train_pipeline.py*', "
        "origin: {any: true}}]\n"
        f"daemon: {{state_dir: '{box}/state', socket: '{box}/s.sock'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{box}/alerts.log'}}]}}\n"
        f"enforcement: {{rules: [{{name: check, cmdline: '*{box}/*', gpu_open: enforce}}]}}\n"
    )
    cfg = parse_config(text, str(box / "config.yaml"))
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db)
    d.sources.append(enf)
    d.enforcers.append(enf)
    procs = [run(box, "train_rogue", "go1"), run(box, "train_pipeline", "go1")]
    checks: dict[str, bool] = {}
    made: list[str] = []
    try:
        time.sleep(1.0)
        d.tick(time.time())
        denials = [a for a in d.db.actions() if a.kind == "gpu-deny"]
        made = [str(c) for a in denials for c in a.details.get("cgroups") or []]
        print(f"denials: {[(a.id, a.outcome, a.details.get('procs')) for a in denials]}")
        (box / "go1").write_text("")
        rogue, pipeline = result(box, "train_rogue", "go1"), result(box, "train_pipeline", "go1")
        print(f"rogue cuInit: {rogue}; sanctioned cuInit: {pipeline}")
        checks["rogue fails to initialise CUDA"] = rogue not in ("0", "no answer in 30 s")
        checks["sanctioned initialises CUDA"] = pipeline == "0"
        for cg in made:
            lift(cg, Effects())
        procs.append(run(box, "train_rogue", "go2"))  # a fresh run, the denial lifted
        (box / "go2").write_text("")
        again = result(box, "train_rogue", "go2")
        print(f"after the lift, a new rogue run's cuInit: {again}")
        checks["after undo the GPU opens again"] = again == "0"
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for cg in made:
            with contextlib.suppress(OSError):
                lift(cg, Effects())
        d.db.close()
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if checks and all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
