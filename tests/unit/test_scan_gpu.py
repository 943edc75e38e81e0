"""The whole scan against the fake libnvidia-ml.so.1, loaded through the real pynvml path.

These tests give GPU memory to real processes the test started and run
``python -m rogue_watchdog scan --json`` as a user would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rogue_watchdog.config import Config
from rogue_watchdog.hosttext import command_text
from rogue_watchdog.model import GpuInfo, GpuProcess
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.nvml import NvmlSnapshot
from tests.conftest import REPO, Spawned, need_program, poll, run_cli
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


def _unreaped_child(spawned: Spawned, tmp_path: Path, name: str) -> tuple[int, int]:
    """A python program ``name`` that forks a child which exits at once and is never
    reaped: ``(parent PID, zombie PID)``."""
    script = tmp_path / name
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
    return parent, int(kid_file.read_text())


def _zombie_lib(tmp_path: Path, zombie: int) -> Path:
    procs = [{"pid": zombie, "mem": 3 * GIB}]
    return fake_nvml(
        tmp_path, {"devices": [{"uuid": "GPU-aaaa", "total": 80 * GIB, "processes": procs}]}
    )


def test_zombie_memory_of_a_trainer_counts_for_its_job(spawned: Spawned, tmp_path: Path) -> None:
    """The parent is training itself (a launcher's command): its job holds the memory."""
    need_program("gcc")
    parent, zombie = _unreaped_child(spawned, tmp_path, "train_reaper.py")
    _, doc = scan(tmp_path, _zombie_lib(tmp_path, zombie))
    job = next(j for j in doc["jobs"] if j["root_pid"] == parent)
    assert job["pids"] == [parent, zombie]
    assert job["gpu_memory_bytes"] == 3 * GIB
    z = [f for f in doc["findings"] if f["kind"] == "zombie-gpu-memory"]
    assert len(z) == 1 and z[0]["root_pid"] == parent
    assert z[0]["message"].startswith(
        f"zombie PID {zombie} holds 3.0 GiB on GPU 0; its parent PID {parent}"
    )


def test_zombie_memory_makes_no_job_of_a_program_that_is_no_trainer(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Issue 31 (sim seed 3131): the parent is no training process and no wrapper of one
    (a hub that launches trainers does other work): a zombie it has not reaped makes it
    no job; the finding says who holds the memory and that nothing is signalled."""
    need_program("gcc")
    parent, zombie = _unreaped_child(spawned, tmp_path, "hub_reaper.py")
    _, doc = scan(tmp_path, _zombie_lib(tmp_path, zombie))
    assert not [j for j in doc["jobs"] if {parent, zombie} & set(j["pids"])]
    [z] = [f for f in doc["findings"] if f["kind"] == "zombie-gpu-memory"]
    assert z["root_pid"] is None and z["details"]["holder_pid"] is None
    assert z["message"] == (
        f"zombie PID {zombie} holds 3.0 GiB on GPU 0; it has exited, not reaped by its "
        f"parent PID {parent} `{Path(sys.executable).name} …/hub_reaper.py`: the memory "
        f"is freed when PID {parent} reaps it (wait(2)) or exits. PID {parent} is no job for "
        "it: it is no training process and no wrapper of one (it may do other work); "
        "nothing is signalled for it (signalling the zombie does nothing)"
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


def test_own_pid_namespace_never_matches_nvml_pids_by_number(tmp_path: Path) -> None:
    """Inside `unshare --pid --fork --mount-proc`, NVML reports host PID 15672 and an
    unrelated `sleep 600` in the namespace happens to have PID 15672: no job, no kill
    advice, one high finding saying attribution is impossible here and how to run it."""
    need_program("gcc", "unshare")
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                {
                    "uuid": "GPU-aaaa",
                    "total": 80 * GIB,
                    "used": 4 * GIB,
                    "processes": [{"pid": 15672, "mem": 4 * GIB}],
                }
            ]
        },
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
    )
    sleeper = tmp_path / "sleeper.pid"
    script = (
        "echo 15671 > /proc/sys/kernel/ns_last_pid; sleep 600 & "
        f'echo $! > {sleeper}; exec "$0" -m rogue_watchdog scan --json --config "$1"'
    )
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script,
         sys.executable, str(cfg)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert sleeper.read_text().strip() == "15672"  # the collision is real
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["jobs"] == []
    assert "kill -" not in done.stdout and "sleep 600" not in done.stdout
    ns = [f for f in doc["findings"] if f["kind"] == "pid-namespace"]
    own = os.readlink("/proc/self/ns/pid")
    assert len(ns) == 1 and ns[0]["severity"] == "high"
    assert ns[0]["details"]["nvml_pids"] == [15672]
    assert ns[0]["details"]["proc_pid_namespace"] != own  # the namespace unshare made
    assert ns[0]["message"] == (
        "GPU attribution is impossible here: rogue-watchdog sees the processes of PID "
        f"namespace {ns[0]['details']['proc_pid_namespace']}, not the host's "
        "(pid:[4026531836]), and NVML reports host PIDs, so the 1 GPU process(es) NVML "
        "lists, holding 4.0 GiB, are not matched to any process here and no job or kill "
        "advice is built from them; run rogue-watchdog in the host PID namespace (on the "
        "host, or docker run --pid=host, Kubernetes hostPID: true)"
    )


class _ExitsAfterListing:
    """A GPU source whose process exits right after NVML listed it (the exit race)."""

    def __init__(self, victim: subprocess.Popen[bytes]) -> None:
        self.victim = victim

    def snapshot(self, pid_max: int) -> NvmlSnapshot:
        listing = [GpuProcess(self.victim.pid, "GPU-aaaa", 0, 2 * GIB, "compute")]
        self.victim.kill()
        self.victim.wait()  # reaped: /proc/PID is gone before the scan looks again
        gpu = GpuInfo(0, "GPU-aaaa", "NVIDIA H200", 80 * GIB, 2 * GIB)
        return NvmlSnapshot(available=True, gpus=[gpu], processes=listing)


def test_process_gone_right_after_the_listing_is_transient(
    spawned: Spawned, tmp_path: Path
) -> None:
    victim = spawned.start([sys.executable, "-c", "import time; time.sleep(60)"])
    scanner = Scanner(Config(), gpu_source=_ExitsAfterListing(victim))
    result = scanner.scan()
    assert [j for j in result.jobs if victim.pid in j.pids] == []
    assert [f for f in result.findings if f.root_pid == victim.pid] == []
    mention = re.compile(rf"PID {victim.pid}\b")
    assert [f.kind for f in result.findings if mention.search(f.message)] == []


def test_zombie_of_a_namespace_init_is_no_job_and_says_what_frees_it(
    spawned: Spawned, tmp_path: Path
) -> None:
    """A container-style PID 1 (the init of its own PID namespace) that never reaps: its
    zombie child holds GPU memory. Neither becomes a job; nothing gets kill advice."""
    need_program("gcc", "unshare")
    kid_file = tmp_path / "kid"
    init = (
        "import os, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(0)\n"
        "time.sleep(120)\n"  # PID 1 of the namespace, never reaps
    )
    ns_init = spawned.start(["unshare", "--pid", "--fork", sys.executable, "-c", init])

    # Host view: unshare -> python (NSpid HOST 1) -> zombie (NSpid HOST 2).
    def zombie() -> int | None:
        for line in Path(f"/proc/{ns_init.pid}/task/{ns_init.pid}/children").read_text().split():
            for kid in Path(f"/proc/{line}/task/{line}/children").read_text().split():
                if Path(f"/proc/{kid}/stat").read_text().split(") ")[1][0] == "Z":
                    kid_file.write_text(line)
                    return int(kid)
        return None

    z = poll("the zombie below the namespace init", zombie, 10, 0.05)
    parent = int(kid_file.read_text())
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                {
                    "uuid": "GPU-aaaa",
                    "total": 80 * GIB,
                    "used": 3 * GIB,
                    "processes": [{"pid": z, "mem": 3 * GIB}],
                }
            ]
        },
    )
    _, doc = scan(tmp_path, lib)
    assert [j for j in doc["jobs"] if {z, parent} & set(j["pids"])] == []
    [f] = [f for f in doc["findings"] if f["kind"] == "zombie-gpu-memory"]
    assert f["root_pid"] is None
    assert f["details"] == {
        "pid": z, "parent_pid": parent, "gpu_uuid": "GPU-aaaa",
        "used_memory_bytes": 3 * GIB, "holder_pid": None,
    }  # fmt: skip
    args = command_text([sys.executable, "-c", init], 80)
    assert f["message"] == (
        f"zombie PID {z} holds 3.0 GiB on GPU 0; it has exited and its parent PID {parent} "
        f"`{args}` is the init of its PID namespace or a subreaper, which reaps exited "
        f"processes: the memory is freed when PID {parent} reaps it. If it stays, PID "
        f"{parent} does not reap (a container whose PID 1 is not an init: run it with --init "
        "or tini) or the driver kept the memory after the exit (look for Xid errors in the "
        "kernel log). No job holds it and no process is signalled"
    )
    # (other jobs on the host may carry kill advice of their own)
    mention = re.compile(rf"PID ({z}|{parent})\b")
    about = [f for f in doc["findings"] if mention.search(f["message"])]
    assert about == [f] and "kill -" not in json.dumps(about)


def test_used_memory_no_listed_process_explains_is_reported(
    spawned: Spawned, tmp_path: Path
) -> None:
    need_program("gcc")
    pid = worker(spawned, tmp_path)
    gpu = {"name": "NVIDIA H200", "total": 140 * GIB}
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                # 7.5 GiB used, 2 GiB listed: 5.5 GiB unexplained, above the 1 GiB slack
                {**gpu, "uuid": "GPU-aaaa", "used": 15 * GIB // 2,
                 "processes": [{"pid": pid, "mem": 2 * GIB}]},
                # 600 MiB the driver keeps: within the slack, no finding
                {**gpu, "uuid": "GPU-bbbb", "used": 600 << 20},
            ]
        },
    )  # fmt: skip
    _, doc = scan(tmp_path, lib)
    found = [f for f in doc["findings"] if f["kind"] == "gpu-memory-unexplained"]
    assert [f["details"] for f in found] == [
        {
            "fingerprint": "GPU-aaaa", "gpu_index": 0, "gpu_uuid": "GPU-aaaa",
            "used_bytes": 15 * GIB // 2, "listed_bytes": 2 * GIB,
            "unexplained_bytes": 11 * GIB // 2, "slack_bytes": GIB,
        }
    ]  # fmt: skip
    assert found[0]["severity"] == "warning"
    assert found[0]["message"] == (
        "GPU 0 (GPU-aaaa) has 7.5 GiB in use but the processes NVML lists hold 2.0 GiB: "
        "5.5 GiB (5905580032 bytes) is held by no listed process (a process NVML does not "
        "list to us, e.g. in another container, a leaked context, or memory the driver kept "
        "after a fault); more than the 1.0 GiB allowed (nvml.unexplained_memory_slack_bytes)"
    )


def test_hung_nvml_call_still_scans_the_os_sources(spawned: Spawned, tmp_path: Path) -> None:
    """Every GPU's memory query never returns: the scan still ends, says so per GPU, and
    finds the launcher-pattern job from the OS sources."""
    need_program("gcc")
    pid = worker(spawned, tmp_path, name="train_while_gpu_hangs.py")
    gpu = {"total": 80 * GIB, "used": GIB}
    lib = fake_nvml(tmp_path, {"devices": [{**gpu, "uuid": "GPU-a"}, {**gpu, "uuid": "GPU-b"}]})
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}', call_timeout_s: 0.5}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
    )
    done = run_cli(
        "scan", "--json", "--config", str(cfg),
        env={"FAKE_NVML_BLOCK": "nvmlDeviceGetMemoryInfo"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    hung = [f for f in doc["findings"] if f["kind"] == "gpu-query-hung"]
    assert [(f["details"]["gpu_index"], f["details"]["call"]) for f in hung] == [
        (0, "nvmlDeviceGetMemoryInfo"),
        (1, "nvmlDeviceGetMemoryInfo"),
    ]
    job = next(j for j in doc["jobs"] if j["root_pid"] == pid)
    assert job["evidence"] == ["launcher"] and job["verdict"] == "rogue"


def test_explain_shows_the_gpu_memory_scan_shows(spawned: Spawned, tmp_path: Path) -> None:
    """`explain` and `scan` agree on what the job holds: the same total and per-GPU figures."""
    need_program("gcc")
    pid = worker(spawned, tmp_path)
    lib = fake_nvml(
        tmp_path,
        {
            "devices": [
                {"uuid": "GPU-aaaa", "total": 80 * GIB, "used": 5 * GIB,
                 "processes": [{"pid": pid, "mem": 4 * GIB}]},
                {"uuid": "GPU-bbbb", "total": 80 * GIB, "used": 1 * GIB,
                 "processes": [{"pid": pid, "mem": 1 * GIB}]},
            ]
        },
    )  # fmt: skip
    _, doc = scan(tmp_path, lib)
    job = next(j for j in doc["jobs"] if j["root_pid"] == pid)
    assert job["gpu_memory_bytes"] == 5 * GIB
    assert job["gpus"] == [
        {"index": 0, "uuid": "GPU-aaaa", "memory_bytes": 4 * GIB},
        {"index": 1, "uuid": "GPU-bbbb", "memory_bytes": 1 * GIB},
    ]
    done = run_cli("explain", str(pid), "--config", str(tmp_path / "cfg.yaml"))
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stdout.splitlines() if "GPU memory" in x]
    assert lines == ["  GPU memory: 5.0 GiB: GPU 0 GPU-aaaa 4.0 GiB, GPU 1 GPU-bbbb 1.0 GiB"]
