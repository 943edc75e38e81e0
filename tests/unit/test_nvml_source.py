"""NvmlSource through the real nvidia-ml-py code path, against the fake libnvidia-ml.

Each snapshot runs in a fresh interpreter (pynvml keeps its loaded library in module
globals), which also loads the library exactly as production does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Spawned, need, need_program
from tests.fakenvml.fixtures import REPO, fake_nvml, library_path, snapshot_in_subprocess

GIB = 1 << 30
H200_TOTAL = 150_754_820_096  # bytes, an H200's framebuffer as NVML reports it
HIDDEN_OPEN = "; its jobs' findings stay open until their processes are seen to exit"


@pytest.fixture(autouse=True)
def _gcc() -> None:
    need_program("gcc")


def _sleepers(spawned: Spawned, n: int) -> list[int]:
    return [spawned.start(["sleep", "300"]).pid for _ in range(n)]


def _gpu(index: int, uuid: str, total: int, used: int, name: str = "NVIDIA H200") -> dict[str, Any]:
    return {
        "index": index,
        "uuid": uuid,
        "name": name,
        "memory_total_bytes": total,
        "memory_used_bytes": used,
        "mig_index": None,
    }


def _proc(
    pid: int, uuid: str, index: int, mem: int | None, kind: str = "compute"
) -> dict[str, Any]:
    return {
        "pid": pid,
        "gpu_uuid": uuid,
        "gpu_index": index,
        "used_memory_bytes": mem,
        "list_kind": kind,
    }


def _snap(lib_dir: Path, **kw: Any) -> dict[str, Any]:
    return snapshot_in_subprocess(lib_dir, **kw)[0]


def _two_gpus(pid_a: int, pid_b: int) -> dict[str, Any]:
    return {
        "driver": "550.54.15",
        "devices": [
            {
                "name": "NVIDIA H200",
                "uuid": "GPU-00000000-aaaa",
                "total": H200_TOTAL,
                "used": 3 * GIB,
                "processes": [{"pid": pid_a, "mem": 2 * GIB + 12345, "gi": 1, "ci": 2}],
            },
            {
                "name": "NVIDIA H200",
                "uuid": "GPU-11111111-bbbb",
                "total": H200_TOTAL,
                "used": GIB,
                "processes": [{"pid": pid_b, "mem": 987_654_321}],
            },
        ],
    }


def _expected_two_gpus(pid_a: int, pid_b: int) -> tuple[list[Any], list[Any]]:
    gpus = [
        _gpu(0, "GPU-00000000-aaaa", H200_TOTAL, 3 * GIB),
        _gpu(1, "GPU-11111111-bbbb", H200_TOTAL, GIB),
    ]
    procs = [
        _proc(pid_a, "GPU-00000000-aaaa", 0, 2 * GIB + 12345),
        _proc(pid_b, "GPU-11111111-bbbb", 1, 987_654_321),
    ]
    return gpus, procs


def test_lists_real_processes_with_exact_memory(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    snap = _snap(fake_nvml(tmp_path, _two_gpus(a, b)))
    gpus, procs = _expected_two_gpus(a, b)
    assert snap["available"] is True
    assert snap["error"] is None
    assert snap["driver_version"] == "550.54.15"
    assert snap["gpus"] == gpus
    assert snap["processes"] == procs
    assert snap["findings"] == []
    assert snap["process_api"] == {"compute": "v3", "graphics": "v3", "mps": "v3"}


def test_default_load_through_ld_library_path(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    snap = _snap(fake_nvml(tmp_path, _two_gpus(a, b)), via_ld_library_path=True)
    assert snap["available"] is True
    assert snap["processes"] == _expected_two_gpus(a, b)[1]


def test_no_v3_symbols_falls_back_to_v2(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    snap = _snap(fake_nvml(tmp_path, _two_gpus(a, b), variant="no_v3"))
    assert snap["process_api"] == {"compute": "v2", "graphics": "v2", "mps": "v2"}
    assert snap["processes"] == _expected_two_gpus(a, b)[1]
    assert snap["findings"] == []


def test_only_unversioned_symbols_read_16_byte_v1_structs(tmp_path: Path) -> None:
    # Three entries with large values: a 24-byte reading of a 16-byte array would shift
    # the second and third entries and fail here.
    spec = {
        "devices": [
            {
                "uuid": "GPU-v1",
                "name": "Tesla V100",
                "total": 34 * GIB,
                "processes": [
                    {"pid": 1001, "mem": 17_179_869_191},
                    {"pid": 1002, "mem": None},
                    {"pid": 1003, "mem": 4_294_967_301},
                    {"pid": 1004, "mem": 65536, "kind": "graphics"},
                ],
            }
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec, variant="v1_only"))
    assert snap["process_api"] == {"compute": "v1", "graphics": "v1", "mps": "v1"}
    assert snap["processes"] == [
        _proc(1001, "GPU-v1", 0, 17_179_869_191),
        _proc(1002, "GPU-v1", 0, None),
        _proc(1003, "GPU-v1", 0, 4_294_967_301),
        _proc(1004, "GPU-v1", 0, 65536, "graphics"),
    ]
    assert snap["findings"] == []


def test_garbage_pids_are_binding_mismatch_and_dropped(tmp_path: Path, spawned: Spawned) -> None:
    (real,) = _sleepers(spawned, 1)
    spec = {
        "devices": [
            {
                "uuid": "GPU-x",
                "total": 80 * GIB,
                "processes": [
                    {"pid": 0, "mem": GIB},
                    {"pid": 4294967295, "mem": GIB},
                    {"pid": real, "mem": 5 * GIB},
                ],
            }
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [_proc(real, "GPU-x", 0, 5 * GIB)]
    assert [(f["kind"], f["severity"], f["message"]) for f in snap["findings"]] == [
        (
            "binding-mismatch",
            "warning",
            "NVML listed an impossible compute process on GPU 0 (GPU-x): PID 0; "
            "the NVML binding and driver disagree, entry dropped",
        ),
        (
            "binding-mismatch",
            "warning",
            "NVML listed an impossible compute process on GPU 0 (GPU-x): PID 4294967295; "
            "the NVML binding and driver disagree, entry dropped",
        ),
    ]
    assert snap["findings"][1]["details"] == {
        "gpu_index": 0,
        "gpu_uuid": "GPU-x",
        "list_kind": "compute",
        "pid": 4294967295,
        "used_memory_bytes": GIB,
    }


def test_pid_at_or_above_pid_max_is_binding_mismatch(tmp_path: Path) -> None:
    spec = {
        "devices": [
            {
                "uuid": "GPU-x",
                "total": 80 * GIB,
                "processes": [{"pid": 32768, "mem": 1}, {"pid": 32767, "mem": 2}],
            }
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec), pid_max=32768)
    assert snap["processes"] == [_proc(32767, "GPU-x", 0, 2)]
    assert [f["details"]["pid"] for f in snap["findings"]] == [32768]
    assert snap["findings"][0]["kind"] == "binding-mismatch"


def test_memory_above_device_total_is_binding_mismatch(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    spec = {
        "devices": [
            {
                "uuid": "GPU-m",
                "total": 80 * GIB,
                "processes": [{"pid": a, "mem": 80 * GIB + 1}, {"pid": b, "mem": 80 * GIB}],
            }
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [_proc(b, "GPU-m", 0, 80 * GIB)]
    assert [f["message"] for f in snap["findings"]] == [
        "NVML listed an impossible compute process on GPU 0 (GPU-m): used memory "
        "85899345921 bytes above the device total of 85899345920 bytes; the NVML "
        "binding and driver disagree, entry dropped"
    ]


def test_no_permission_on_one_device_is_hidden_not_empty(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    spec = _two_gpus(a, b)
    spec["devices"][0]["proc_error"] = 4  # NVML_ERROR_NO_PERMISSION
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [_proc(b, "GPU-11111111-bbbb", 1, 987_654_321)]
    assert snap["blind_gpus"] == [0]
    assert snap["findings"] == [
        {
            "kind": "gpu-processes-hidden",
            "severity": "warning",
            "message": "cannot see processes on GPU 0: Insufficient Permissions (NVML error 4)"
            + HIDDEN_OPEN,
            "root_pid": None,
            "details": {
                "gpu_index": 0,
                "gpu_uuid": "GPU-00000000-aaaa",
                "mig_index": None,
                "lists": {
                    "compute": "Insufficient Permissions (NVML error 4)",
                    "graphics": "Insufficient Permissions (NVML error 4)",
                    "mps": "Insufficient Permissions (NVML error 4)",
                },
            },
        }
    ]


def test_not_supported_graphics_list_only_is_info(tmp_path: Path, spawned: Spawned) -> None:
    (a,) = _sleepers(spawned, 1)
    spec = {
        "devices": [
            {"uuid": "GPU-g", "total": GIB, "err_graphics": 3, "processes": [{"pid": a, "mem": 7}]}
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [_proc(a, "GPU-g", 0, 7)]
    assert [(f["kind"], f["severity"], f["message"]) for f in snap["findings"]] == [
        (
            "gpu-processes-hidden",
            "info",
            "cannot see processes on GPU 0: Not Supported (NVML error 3)",
        )
    ]
    assert snap["findings"][0]["details"]["lists"] == {"graphics": "Not Supported (NVML error 3)"}


def test_pid_that_does_not_exist_is_still_returned(tmp_path: Path) -> None:
    ghost = next(p for p in range(32767, 300, -1) if not os.path.exists(f"/proc/{p}"))
    spec = {"devices": [{"uuid": "GPU-z", "total": GIB, "processes": [{"pid": ghost, "mem": 3}]}]}
    snap = _snap(fake_nvml(tmp_path, spec), pid_max=32768)
    assert snap["processes"] == [_proc(ghost, "GPU-z", 0, 3)]
    assert snap["findings"] == []


def test_graphics_only_process_and_memory_not_available(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    spec = {
        "devices": [
            {
                "uuid": "GPU-q",
                "total": GIB,
                "processes": [
                    {"pid": a, "mem": 4096, "kind": "graphics"},
                    {"pid": b, "mem": None, "kind": "compute"},
                ],
            }
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [
        _proc(b, "GPU-q", 0, None, "compute"),
        _proc(a, "GPU-q", 0, 4096, "graphics"),
    ]


def test_pid_once_per_device_with_first_list_kind(tmp_path: Path, spawned: Spawned) -> None:
    (a,) = _sleepers(spawned, 1)
    spec = {
        "devices": [
            {
                "uuid": "GPU-0",
                "total": GIB,
                "processes": [
                    {"pid": a, "mem": 30, "kind": "mps"},
                    {"pid": a, "mem": 10, "kind": "graphics"},
                    {"pid": a, "mem": 20, "kind": "compute"},
                ],
            },
            {"uuid": "GPU-1", "total": GIB, "processes": [{"pid": a, "mem": 40, "kind": "mps"}]},
        ]
    }
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [
        _proc(a, "GPU-0", 0, 20, "compute"),
        _proc(a, "GPU-1", 1, 40, "mps"),
    ]


def test_missing_library_path_is_unavailable(tmp_path: Path) -> None:
    lib_dir = fake_nvml(tmp_path, {}, variant="missing")
    lib = library_path(lib_dir)
    snap = _snap(lib_dir)
    assert snap == {
        "available": False,
        "driver_version": None,
        "error": f"NVML library not found: {lib}: cannot open shared object file: "
        "No such file or directory",
        "gpus": [],
        "processes": [],
        "findings": [],
        "process_api": {},
        "blind_gpus": [],
    }


def test_missing_library_on_loader_path_is_unavailable(tmp_path: Path) -> None:
    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False)
    need("libnvidia-ml.so.1" not in ldconfig.stdout, "a real libnvidia-ml.so.1 is installed")
    snap = _snap(fake_nvml(tmp_path, {}, variant="missing"), via_ld_library_path=True)
    assert snap["available"] is False
    assert snap["error"] == "NVML library not found: libnvidia-ml.so.1 could not be loaded"


def test_driver_not_loaded_is_unavailable(tmp_path: Path) -> None:
    snap = _snap(fake_nvml(tmp_path, {"init_error": 9, "devices": [{"uuid": "GPU-a"}]}))
    assert snap["available"] is False
    assert snap["error"] == "nvmlInit failed: Driver Not Loaded (NVML error 9)"
    assert snap["gpus"] == []


def test_lost_gpu_gives_finding_and_others_are_listed(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    spec = _two_gpus(a, b)
    spec["devices"][0]["handle_error"] = 15  # NVML_ERROR_GPU_IS_LOST
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["available"] is True
    assert snap["gpus"] == [_gpu(1, "GPU-11111111-bbbb", H200_TOTAL, GIB)]
    assert snap["processes"] == [_proc(b, "GPU-11111111-bbbb", 1, 987_654_321)]
    assert snap["findings"] == [
        {
            "kind": "gpu-query-failed",
            "severity": "warning",
            "message": "cannot query GPU 0: GPU is lost (NVML error 15)",
            "root_pid": None,
            "details": {"gpu_index": 0, "error": "GPU is lost (NVML error 15)"},
        }
    ]


def test_init_once_per_source_and_shutdown_on_close(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    log = tmp_path / "calls.log"
    snaps = snapshot_in_subprocess(
        fake_nvml(tmp_path, _two_gpus(a, b)), rounds=3, env={"FAKE_NVML_LOG": str(log)}
    )
    assert [s["processes"] for s in snaps] == [_expected_two_gpus(a, b)[1]] * 3
    calls = log.read_text().split()
    assert calls.count("nvmlInitWithFlags") == 1
    assert calls.count("nvmlShutdown") == 1
    assert calls[-1] == "nvmlShutdown"


def test_reinit_after_whole_system_failure(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    spec = {"count_error": 15, "devices": [{"uuid": "GPU-a"}]}
    snaps = snapshot_in_subprocess(
        fake_nvml(tmp_path, spec), rounds=2, env={"FAKE_NVML_LOG": str(log)}
    )
    assert [(s["available"], s["error"]) for s in snaps] == [
        (False, "nvmlDeviceGetCount failed: GPU is lost (NVML error 15)")
    ] * 2
    calls = log.read_text().split()
    assert calls.count("nvmlInitWithFlags") == 2
    assert calls.count("nvmlShutdown") == 2


def _mig_spec(pid_a: int, pid_b: int, parent_error: int | None) -> dict[str, Any]:
    return {
        "devices": [
            {
                "name": "NVIDIA H200",
                "uuid": "GPU-mig-parent",
                "total": H200_TOTAL,
                "used": 2 * GIB,
                "max_mig": 3,
                "proc_error": parent_error,
                # The aggregate list repeats MIG processes; they keep their MIG device.
                "processes": [] if parent_error else [{"pid": pid_a, "mem": GIB}],
                "mig_devices": [
                    {
                        "index": 0,
                        "name": "NVIDIA H200 MIG 1g.18gb",
                        "uuid": "MIG-aaaa",
                        "total": 18 * GIB,
                        "used": GIB,
                        "processes": [{"pid": pid_a, "mem": GIB}],
                    },
                    {
                        "index": 2,
                        "name": "NVIDIA H200 MIG 3g.71gb",
                        "uuid": "MIG-cccc",
                        "total": 71 * GIB,
                        "used": GIB // 2,
                        "processes": [{"pid": pid_b, "mem": GIB // 2}],
                    },
                ],
            }
        ]
    }


@pytest.mark.parametrize("parent_error", [None, 4])
def test_mig_devices_are_listed_per_instance(
    tmp_path: Path, spawned: Spawned, parent_error: int | None
) -> None:
    a, b = _sleepers(spawned, 2)
    snap = _snap(fake_nvml(tmp_path, _mig_spec(a, b, parent_error)))
    assert snap["gpus"] == [
        _gpu(0, "GPU-mig-parent", H200_TOTAL, 2 * GIB),
        {**_gpu(0, "MIG-aaaa", 18 * GIB, GIB, "NVIDIA H200 MIG 1g.18gb"), "mig_index": 0},
        {**_gpu(0, "MIG-cccc", 71 * GIB, GIB // 2, "NVIDIA H200 MIG 3g.71gb"), "mig_index": 2},
    ]
    assert snap["processes"] == [
        _proc(a, "MIG-aaaa", 0, GIB),
        _proc(b, "MIG-cccc", 0, GIB // 2),
    ]
    # Slot 1 is empty (NOT_FOUND) and the parent's aggregate list needs privileges
    # (NO_PERMISSION) while every MIG device was listed: neither hides anything.
    assert snap["findings"] == []


def test_mig_device_with_hidden_processes(tmp_path: Path, spawned: Spawned) -> None:
    a, b = _sleepers(spawned, 2)
    spec = _mig_spec(a, b, parent_error=4)
    spec["devices"][0]["mig_devices"][1]["proc_error"] = 4
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["processes"] == [_proc(a, "MIG-aaaa", 0, GIB)]
    assert [f["message"] for f in snap["findings"]] == [
        "cannot see processes on GPU 0 MIG 2: Insufficient Permissions (NVML error 4)"
        + HIDDEN_OPEN,
        "cannot see processes on GPU 0: Insufficient Permissions (NVML error 4)" + HIDDEN_OPEN,
    ]
    assert snap["blind_gpus"] == [0]


def test_non_utf8_name_or_uuid_keeps_nvml_and_the_other_gpus(
    tmp_path: Path, spawned: Spawned
) -> None:
    """Tester's case: one GPU name with byte 0xff made all of NVML "unavailable"."""
    a, b = _sleepers(spawned, 2)
    spec = _two_gpus(a, b)
    spec["devices"][0]["name"] = "NVIDIA H200 \udcff"  # raw byte 0xff in the driver
    spec["devices"][0]["uuid"] = "GPU-\udcfe\udcff-aaaa"
    snap = _snap(fake_nvml(tmp_path, spec))
    assert snap["available"] is True
    assert snap["error"] is None
    assert snap["gpus"] == [
        _gpu(0, "GPU-\\xfe\\xff-aaaa", H200_TOTAL, 3 * GIB, name="NVIDIA H200 \\xff"),
        _gpu(1, "GPU-11111111-bbbb", H200_TOTAL, GIB),
    ]
    assert snap["processes"] == [
        _proc(a, "GPU-\\xfe\\xff-aaaa", 0, 2 * GIB + 12345),
        _proc(b, "GPU-11111111-bbbb", 1, 987_654_321),
    ]
    assert snap["findings"] == []


def test_huge_max_mig_device_count_is_capped(tmp_path: Path, spawned: Spawned) -> None:
    """Tester's case: nvmlDeviceGetMaxMigDeviceCount = 2**31 - 1 made the MIG loop hang."""
    a, b = _sleepers(spawned, 2)
    spec = _mig_spec(a, b, parent_error=4)
    spec["devices"][0]["max_mig"] = 2_147_483_647
    log = tmp_path / "calls.log"
    snap = _snap(fake_nvml(tmp_path, spec), env={"FAKE_NVML_LOG": str(log)})
    assert snap["available"] is True
    assert [g["uuid"] for g in snap["gpus"]] == ["GPU-mig-parent", "MIG-aaaa", "MIG-cccc"]
    assert snap["processes"] == [
        _proc(a, "MIG-aaaa", 0, GIB),
        _proc(b, "MIG-cccc", 0, GIB // 2),
    ]
    assert snap["findings"] == [
        {
            "kind": "binding-mismatch",
            "severity": "warning",
            "message": (
                "NVML reported 2147483647 MIG device slots on GPU 0 (GPU-mig-parent), more "
                "than any GPU has; only the first 16 were probed: the NVML binding and "
                "driver disagree"
            ),
            "root_pid": None,
            "details": {
                "gpu_index": 0,
                "gpu_uuid": "GPU-mig-parent",
                "max_mig_device_count": 2147483647,
                "probed": 16,
            },
        }
    ]
    assert log.read_text().split().count("nvmlDeviceGetMigDeviceHandleByIndex") == 16


def _run_script(script: str, lib_dir: Path, env: dict[str, str] | None = None) -> Any:
    """Run ``script`` (which prints one JSON document) in a fresh interpreter with
    ``LIB`` and ``CONF`` set; structlog events go to stderr, returned beside it."""

    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    head = (
        "import json, sys, time, threading, structlog\n"
        "structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))\n"
        "from pathlib import Path\n"
        "from rogue_watchdog.sources.nvml import NvmlSource\n"
        "from rogue_watchdog.policy.nvml import nvml_snapshot_json\n"
        "from tests.fakenvml.build import write_config\n"
        f"LIB = {str(library_path(lib_dir))!r}\n"
        f"CONF = Path({str(lib_dir / 'fake_nvml.conf')!r})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", head + script], capture_output=True, text=True,
        env=full_env, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout), out.stderr


def test_hung_call_skips_that_gpu_only_and_never_piles_up(tmp_path: Path, spawned: Spawned) -> None:
    """A listing call that never returns (a driver wedged after an Xid): the snapshot
    still comes back, GPU 1 is still listed, the stuck GPU is called at most once at a
    time, and once the call returns the GPU is listed again."""
    a, b = _sleepers(spawned, 2)
    spec = _two_gpus(a, b)
    blocked = dict(spec, block=[{"symbol": "nvmlDeviceGetComputeRunningProcesses_v3", "device": 0}])
    lib = fake_nvml(tmp_path, blocked)
    log = tmp_path / "calls.log"
    script = (
        f"spec = json.loads({json.dumps(json.dumps(spec))})\n"
        "src = NvmlSource(LIB, call_timeout_s=0.5)\n"
        "s1 = nvml_snapshot_json(src.snapshot(4194304))\n"
        "s2 = nvml_snapshot_json(src.snapshot(4194304))\n"
        "threads = threading.active_count()\n"
        "write_config(CONF, spec)\n"  # the driver comes back: the stuck call returns
        "stuck = src._runner.stuck['GPU 0']\n"
        "stuck.done.wait(30)\n"
        "s3 = nvml_snapshot_json(src.snapshot(4194304))\n"
        "src.close()\n"
        "print(json.dumps([s1, s2, s3, threads]))\n"
    )
    (s1, s2, s3, threads), stderr = _run_script(script, lib, {"FAKE_NVML_LOG": str(log)})
    hung = {
        "kind": "gpu-query-hung",
        "severity": "warning",
        "root_pid": None,
    }
    for snap in (s1, s2):
        assert snap["available"] is True
        assert snap["gpus"] == [_gpu(1, "GPU-11111111-bbbb", H200_TOTAL, GIB)]
        assert snap["processes"] == [_proc(b, "GPU-11111111-bbbb", 1, 987_654_321)]
        assert snap["blind_gpus"] == [0]
        [f] = snap["findings"]
        assert {k: f[k] for k in hung} == hung
        assert f["details"]["fingerprint"] == "GPU 0"
        assert f["details"]["call"] == "nvmlDeviceGetComputeRunningProcesses_v3"
        assert f["message"].startswith(
            "NVML call hung: nvmlDeviceGetComputeRunningProcesses_v3 for GPU 0 has not "
            "returned for "
        )
        assert f["message"].endswith(
            " s (a hung driver, e.g. after an Xid error); processes on GPU 0 are not seen "
            "until it returns; the other GPUs and the OS sources are still scanned"
        )
    # main thread, the stuck call's thread, one fresh worker: nothing piled up
    assert threads == 3
    calls = log.read_text().split()
    # Each listing is two calls (count, then fill). GPU 1: 3 snapshots x 2. GPU 0: the
    # stuck first call, never made again while stuck (s2), its second call once released,
    # and 2 in s3.
    assert calls.count("nvmlDeviceGetComputeRunningProcesses_v3") == 3 * 2 + 1 + 1 + 2
    assert s3["processes"] == _expected_two_gpus(a, b)[1]
    assert s3["findings"] == [] and s3["blind_gpus"] == []
    assert (
        "nvml-call-returned" in stderr
        and "call=nvmlDeviceGetComputeRunningProcesses_v3 what='GPU 0'" in stderr
    )


def test_init_failure_retried_after_1s_doubling_to_60s_and_logged_on_recovery(
    tmp_path: Path,
) -> None:
    lib = fake_nvml(tmp_path, {"init_error": 9, "devices": [{"uuid": "GPU-a"}]})
    log = tmp_path / "calls.log"
    script = (
        "src = NvmlSource(LIB)\n"
        "delays = []\n"
        "for _ in range(9):\n"
        "    s = src.snapshot(4194304)\n"
        "    delays.append(src.retry_after_s)\n"
        "    cached = src.snapshot(4194304)\n"  # within the delay: no nvmlInit
        "    assert cached.error == s.error, cached\n"
        "    src._retry_at = 0.0\n"  # let the delay pass
        "write_config(CONF, {'devices': [{'uuid': 'GPU-a'}]})\n"
        "back = src.snapshot(4194304)\n"
        "print(json.dumps([delays, back.available, src.retry_after_s]))\n"
    )
    (delays, available, after), stderr = _run_script(script, lib, {"FAKE_NVML_LOG": str(log)})
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert available is True and after == 0.0
    assert log.read_text().split().count("nvmlInitWithFlags") == 10
    assert "nvml-recovered" in stderr and "failed_attempts=9" in stderr
    assert "last_error='nvmlInit failed: Driver Not Loaded (NVML error 9)'" in stderr
