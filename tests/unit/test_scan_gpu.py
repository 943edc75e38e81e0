"""The whole scan against the fake libnvidia-ml.so.1, loaded through the real pynvml path.

These tests give GPU memory to real processes the test started and run
``python -m watchdog scan --json`` as a user would.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import Spawned, need_program, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path

GIB = 1024**3


def scan(tmp_path: Path, lib_dir: Path) -> tuple[int, dict[str, Any]]:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib_dir)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
    )
    done = run_cli("scan", "--json", "--config", str(cfg))
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def free_pids(n: int) -> list[int]:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    out = []
    for pid in range(pid_max - 1, 300, -1):
        if not Path(f"/proc/{pid}").exists():
            out.append(pid)
            if len(out) == n:
                return out
    raise AssertionError("no free PIDs")


def worker(spawned: Spawned, tmp_path: Path, name: str = "worker.py") -> int:
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(120)\n")
    return spawned.start([sys.executable, str(script)]).pid


def test_gpu_memory_of_a_real_process_makes_a_job(spawned: Spawned, tmp_path: Path) -> None:
    need_program("gcc")
    pid = worker(spawned, tmp_path)
    lib = fake_nvml(
        tmp_path,
        {
            "driver": "550.54.15",
            "devices": [
                {
                    "name": "NVIDIA H200",
                    "uuid": "GPU-aaaa",
                    "total": 140 * GIB,
                    "used": 5 * GIB,
                    "processes": [{"pid": pid, "mem": 4 * GIB}],
                },
                {
                    "name": "NVIDIA H200",
                    "uuid": "GPU-bbbb",
                    "total": 140 * GIB,
                    "used": 1 * GIB,
                    "processes": [{"pid": pid, "mem": 1 * GIB, "kind": "graphics"}],
                },
            ],
        },
    )
    code, doc = scan(tmp_path, lib)
    assert code == 1
    assert doc["nvml"] == {"available": True, "driver_version": "550.54.15", "error": None}
    assert [g["uuid"] for g in doc["gpus"]] == ["GPU-aaaa", "GPU-bbbb"]
    assert doc["gpus"][0]["memory_total_bytes"] == 140 * GIB
    jobs = [j for j in doc["jobs"] if j["root_pid"] == pid]
    assert len(jobs) == 1
    job = jobs[0]
    assert job["gpu_memory_bytes"] == 5 * GIB
    assert job["gpu_uuids"] == ["GPU-aaaa", "GPU-bbbb"]
    assert job["evidence"] == ["nvml"]
    assert job["verdict"] == "rogue"
    assert job["user"] == "root"


def test_invisible_pid_and_unknown_memory(spawned: Spawned, tmp_path: Path) -> None:
    need_program("gcc")
    pid = worker(spawned, tmp_path)
    ghost = free_pids(1)[0]
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                {
                    "uuid": "GPU-aaaa",
                    "total": 80 * GIB,
                    "processes": [{"pid": pid, "mem": None}, {"pid": ghost, "mem": 2 * GIB}],
                }
            ]
        },
    )
    _, doc = scan(tmp_path, lib)
    job = next(j for j in doc["jobs"] if j["root_pid"] == pid)
    assert job["gpu_memory_bytes"] is None  # unknown is null, never 0
    invisible = [f for f in doc["findings"] if f["kind"] == "gpu-pid-invisible"]
    assert [f["details"]["pid"] for f in invisible] == [ghost]
    assert invisible[0]["message"] == (
        f"GPU memory held by a PID not visible here: PID {ghost} holds 2.0 GiB on GPU 0 "
        "(GPU-aaaa); it is never signalled"
    )
    assert not [j for j in doc["jobs"] if ghost in j["pids"]]
    assert not [f for f in doc["findings"] if f["kind"] == "pid-namespace"]


def test_most_pids_invisible_means_a_pid_namespace(spawned: Spawned, tmp_path: Path) -> None:
    need_program("gcc")
    pid = worker(spawned, tmp_path)
    ghosts = free_pids(3)
    procs = [{"pid": p, "mem": GIB} for p in (pid, *ghosts)]
    lib = fake_nvml(
        tmp_path, {"devices": [{"uuid": "GPU-aaaa", "total": 80 * GIB, "processes": procs}]}
    )
    _, doc = scan(tmp_path, lib)
    ns = [f for f in doc["findings"] if f["kind"] == "pid-namespace"]
    assert len(ns) == 1
    assert ns[0]["details"]["pids"] == sorted(ghosts)
    assert ns[0]["message"].startswith("3 of 4 GPU PIDs are not visible in /proc")
    assert not [f for f in doc["findings"] if f["kind"] == "gpu-pid-invisible"]


def test_zombie_memory_is_attributed_to_its_parent(spawned: Spawned, tmp_path: Path) -> None:
    need_program("gcc")
    script = tmp_path / "reaper_never.py"
    kid_file = tmp_path / "kid"
    script.write_text(
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(0)\n"
        f"open({str(kid_file)!r}, 'w').write(str(pid))\n"
        "time.sleep(120)\n"
    )
    parent = spawned.start([sys.executable, str(script)]).pid
    deadline = time.time() + 5
    while not (kid_file.exists() and kid_file.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    zombie = int(kid_file.read_text())
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                {
                    "uuid": "GPU-aaaa",
                    "total": 80 * GIB,
                    "processes": [{"pid": zombie, "mem": 3 * GIB}],
                }
            ]
        },
    )
    _, doc = scan(tmp_path, lib)
    job = next(j for j in doc["jobs"] if j["root_pid"] == parent)
    assert job["pids"] == [parent, zombie]
    assert job["gpu_memory_bytes"] == 3 * GIB
    z = [f for f in doc["findings"] if f["kind"] == "zombie-gpu-memory"]
    assert len(z) == 1 and z[0]["root_pid"] == parent
    assert z[0]["message"].startswith(
        f"zombie PID {zombie} holds 3.0 GiB on GPU 0; its parent PID {parent}"
    )


def test_binding_mismatch_pids_never_become_jobs(tmp_path: Path) -> None:
    need_program("gcc")
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                {
                    "uuid": "GPU-aaaa",
                    "total": 80 * GIB,
                    "processes": [{"pid": 0, "mem": GIB}, {"pid": 4294967295, "mem": GIB}],
                }
            ]
        },
    )
    _, doc = scan(tmp_path, lib)
    kinds = [f["kind"] for f in doc["findings"]]
    assert kinds.count("binding-mismatch") == 2
    assert not [j for j in doc["jobs"] if {0, 4294967295} & set(j["pids"])]


def test_nvml_unavailable_still_scans_os_sources(spawned: Spawned, tmp_path: Path) -> None:
    need_program("gcc")
    pid = worker(spawned, tmp_path, name="train_no_gpu_yet.py")
    lib = fake_nvml(tmp_path, {}, variant="missing")
    code, doc = scan(tmp_path, lib)
    assert doc["nvml"]["available"] is False
    assert doc["nvml"]["error"].startswith("NVML library not found: ")
    nv = [f for f in doc["findings"] if f["kind"] == "nvml-unavailable"]
    assert len(nv) == 1 and nv[0]["severity"] == "info"
    job = next(j for j in doc["jobs"] if j["root_pid"] == pid)
    assert job["evidence"] == ["launcher"] and job["verdict"] == "rogue"
    assert code == 1
