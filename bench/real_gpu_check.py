"""Manual check on a host with a real NVIDIA GPU (not part of CI: CI has no GPU).

Starts a real CUDA process (PyTorch) as a given user that allocates a known amount of
GPU memory, runs ``python -m rogue_watchdog scan --json`` as root, and compares what the scan
reports for that process (PID, user, GPU memory) with the process itself and with
``nvidia-smi --query-compute-apps``. Prints one line per check and exits 1 on a mismatch.

Usage (as root): python bench/real_gpu_check.py [--user nobody] [--gib 2]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CUDA_JOB = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]) * 1024**3, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(120)
"""


def job_mem(jobs: list[dict[str, object]]) -> object:
    return jobs[0]["gpu_memory_bytes"] if jobs else None


def daemon_checks(
    work: Path, env: dict[str, str], pid: int, user: str, scan_mem: object
) -> dict[str, bool]:
    """Run the daemon for a few ticks and ask it for ``status --json``."""
    sock = work / "status.sock"
    cfg = work / "daemon.yaml"
    cfg.write_text(
        f"daemon: {{interval_s: 1, state_dir: '{work}/state', socket: '{sock}'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{work}/alerts.log'}}]}}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(4)
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", "status", "--json", "--socket", str(sock)],
            capture_output=True,
            text=True,
            env=env,
        )
        print(f"daemon status exit {done.returncode}")
        doc = json.loads(done.stdout)
        jobs = [j for j in doc["jobs"] if pid in j["pids"]]
        if jobs:
            print(
                "daemon job:",
                {k: jobs[0].get(k) for k in ("root_pid", "user", "gpu_memory_bytes", "verdict")},
            )
        alerts = (work / "alerts.log").read_text() if (work / "alerts.log").exists() else ""
        return {
            "daemon: status exit 1 (open findings)": done.returncode == 1,
            "daemon: NVML available": bool(doc.get("nvml") and doc["nvml"]["available"]),
            "daemon: job root PID, user, memory": bool(jobs)
            and jobs[0]["root_pid"] == pid
            and jobs[0]["user"] == user
            and jobs[0]["gpu_memory_bytes"] == scan_mem,
            "daemon: rogue-job alert in the log sink": f'"root_pid": {pid}' in alerts
            and '"kind": "rogue-job"' in alerts,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        print(f"daemon exit {proc.returncode}; stderr tail: {proc.stderr.read()[-300:]!r}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--user", default="nobody")
    ap.add_argument("--gib", type=int, default=2)
    args = ap.parse_args()
    uid = pwd.getpwnam(args.user).pw_uid
    work = Path(tempfile.mkdtemp(prefix="rw-gpu-"))
    os.chmod(work, 0o755)
    script = work / "cuda_holder.py"  # not a launcher name: must be found through NVML
    script.write_text(CUDA_JOB)
    script.chmod(0o644)
    holder = subprocess.Popen(
        ["runuser", "-u", args.user, "--", sys.executable, str(script), str(args.gib)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    ok = True
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().strip()
        print(f"cuda holder says: {line!r}")
        time.sleep(1)
        # runuser forks the python process: find the child whose uid is the user's.
        kids = subprocess.run(
            ["pgrep", "-u", str(uid), "-f", str(script)], capture_output=True, text=True
        ).stdout.split()
        pid = int(kids[0])
        smi = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
        ).stdout
        print("nvidia-smi compute apps:", smi.strip().replace("\n", "; "))
        smi_mib = {int(a): int(b) for a, b in (r.split(",") for r in smi.strip().splitlines() if r)}
        cfg = work / "cfg.yaml"
        cfg.write_text("sanctioned: []\n")
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", "scan", "--json", "--config", str(cfg)],
            capture_output=True,
            text=True,
            env=env,
        )
        print(
            f"scan exit {done.returncode} in {time.monotonic() - t0:.2f}s;",
            f"stderr: {done.stderr[-500:]!r}",
        )
        doc = json.loads(done.stdout)
        print("nvml:", doc["nvml"])
        print("gpus:", [(g["index"], g["name"], g["memory_total_bytes"]) for g in doc["gpus"]])
        print("findings:", [(f["kind"], f["message"][:160]) for f in doc["findings"]])
        jobs = [j for j in doc["jobs"] if pid in j["pids"]]
        checks = {
            "nvml available": doc["nvml"]["available"] is True,
            "one job holds the CUDA PID": len(jobs) == 1,
        }
        if jobs:
            job = jobs[0]
            print(
                "job:",
                {
                    k: job[k]
                    for k in (
                        "root_pid",
                        "pids",
                        "user",
                        "gpu_memory_bytes",
                        "gpu_uuids",
                        "evidence",
                        "verdict",
                    )
                },
            )
            print("origin:", job["origin"]["kind"], job["origin"].get("remediation"))
            mem = job["gpu_memory_bytes"]
            checks["root PID is the CUDA process"] = job["root_pid"] == pid
            checks[f"user is {args.user}"] = job["user"] == args.user
            checks["evidence includes nvml"] = "nvml" in job["evidence"]
            checks["memory >= allocation"] = mem is not None and mem >= args.gib * 1024**3
            if pid in smi_mib:
                checks["memory equals nvidia-smi (MiB)"] = (
                    mem is not None and mem // (1024**2) == smi_mib[pid]
                )
        checks.update(daemon_checks(work, env, pid, args.user, job_mem(jobs)))
        for name, passed in checks.items():
            print(f"{'PASS' if passed else 'FAIL'}  {name}")
            ok &= passed
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
