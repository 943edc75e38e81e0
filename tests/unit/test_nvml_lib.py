"""Pieces of the NVML source that need no library: struct layout, value mapping, config."""

from __future__ import annotations

import ctypes

from rogue_watchdog.sources.nvml_lib import ProcessInfoV1, memory_or_none
from tests.fakenvml.build import config_text


def test_v1_struct_is_16_bytes_with_memory_at_offset_8() -> None:
    # nvml.h nvmlProcessInfo_v1_t: u32 pid, 4 bytes padding, u64 usedGpuMemory.
    assert ctypes.sizeof(ProcessInfoV1) == 16
    assert ProcessInfoV1.usedGpuMemory.offset == 8


def test_not_available_memory_is_none_not_zero() -> None:
    assert memory_or_none(0xFFFF_FFFF_FFFF_FFFF) is None
    assert memory_or_none(None) is None
    assert memory_or_none(0) == 0
    assert memory_or_none(0xFFFF_FFFF_FFFF_FFFE) == 0xFFFF_FFFF_FFFF_FFFE


def test_fake_config_rendering() -> None:
    spec = {
        "driver": "535.1",
        "devices": [
            {
                "name": "NVIDIA A100 80GB",
                "uuid": "GPU-a",
                "total": 100,
                "proc_error": 4,
                "processes": [{"pid": 9, "mem": None, "kind": "mps"}],
                "mig_devices": [{"index": 1, "uuid": "MIG-b", "processes": [{"pid": 8, "mem": 5}]}],
            }
        ],
    }
    assert config_text(spec).splitlines()[1:] == [
        "driver\t535.1",
        "device\tname=NVIDIA A100 80GB\tuuid=GPU-a\ttotal=100\terr_compute=4\terr_graphics=4"
        "\terr_mps=4",
        "mig\tparent=0\tindex=1\tuuid=MIG-b",
        "proc\tdevice=0\tkind=compute\tpid=8\tmem=5\tmig=1",
        "proc\tdevice=0\tkind=mps\tpid=9\tmem=NA",
    ]
