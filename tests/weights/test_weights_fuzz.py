"""Property-based fuzzing: parsers never crash, never execute code, never pass damage."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rogue_watchdog.weights import Status
from rogue_watchdog.weights.api import verify_file
from rogue_watchdog.weights.report import FileReport
from rogue_watchdog.weights.scan import ScanContext

from .builders import (
    gguf_bytes,
    pickle_bytes,
    q8_0_blocks,
    safetensors_bytes,
    st_array,
    tensor,
    write_torch_zip,
)

SETTINGS = settings(
    max_examples=int(os.environ.get("WEIGHTS_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
CTX = ScanContext(chunk_bytes=4096)


def _valid_files(d: Path) -> dict[str, bytes]:
    arr = np.arange(64, dtype=np.float32)
    out = {
        "m.safetensors": safetensors_bytes(
            {"a": st_array(arr, "F32"), "b": st_array(arr[:8].astype(np.float16), "F16")}
        ),
        "m.gguf": gguf_bytes(
            [("q", 8, (64,), q8_0_blocks([0x3C00, 0x3C00])), ("f", 0, (4,), arr[:4].tobytes())]
        ),
    }
    np.save(d / "m.npy", arr)
    out["m.npy"] = (d / "m.npy").read_bytes()
    np.savez_compressed(d / "m.npz", a=arr)
    out["m.npz"] = (d / "m.npz").read_bytes()
    write_torch_zip(d / "m.pt", {"w": tensor("FloatStorage", "0", 64, (64,))}, {"0": arr.tobytes()})
    out["m.pt"] = (d / "m.pt").read_bytes()
    return out


# Built once at import (hypothesis draws from them); the files are read into bytes, so the
# directory goes at once.
with tempfile.TemporaryDirectory(prefix="weights-fuzz-") as _tmp:
    VALID = _valid_files(Path(_tmp))
NAMES = sorted(VALID)


def _check(name: str, data: bytes) -> FileReport:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_bytes(data)
        report = verify_file(p, CTX)  # must not raise
    assert report.status in Status
    return report


def test_valid_seeds_pass() -> None:
    for name in NAMES:
        assert _check(name, VALID[name]).status is Status.FINITE, name


@SETTINGS
@given(name=st.sampled_from(NAMES), data=st.data())
def test_truncation_never_passes(name: str, data: st.DataObject) -> None:
    raw = VALID[name]
    cut = data.draw(st.integers(0, len(raw) - 1))
    assert _check(name, raw[:cut]).status is not Status.FINITE


@SETTINGS
@given(name=st.sampled_from(NAMES), data=st.data())
def test_byte_mutations_never_crash(name: str, data: st.DataObject) -> None:
    raw = bytearray(VALID[name])
    n_edits = data.draw(st.integers(1, 8))
    for _ in range(n_edits):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    report = _check(name, bytes(raw))
    if report.status is Status.FINITE:  # a benign edit (e.g. in finite data) may still pass
        assert report.tensors and all(not t.nonfinite for t in report.tensors)


@SETTINGS
@given(blob=st.binary(max_size=600), name=st.sampled_from([*NAMES, "x.bin", "x.dat"]))
def test_arbitrary_bytes_never_crash_or_pass(blob: bytes, name: str) -> None:
    assert _check(name, blob).status is Status.NOT_VERIFIED


@SETTINGS
@given(
    header=st.dictionaries(
        st.text(max_size=8),
        st.fixed_dictionaries(
            {
                "dtype": st.sampled_from(["F32", "BF16", "F8_E4M3", "I8", "F4", "X"]),
                "shape": st.lists(st.integers(-2, 9), max_size=3),
                "data_offsets": st.lists(st.integers(-4, 80), min_size=0, max_size=3),
            }
        ),
        max_size=4,
    ),
    tail=st.binary(max_size=80),
)
def test_random_safetensors_headers(header: dict, tail: bytes) -> None:  # type: ignore[type-arg]
    import json
    import struct

    text = json.dumps(header).encode()
    report = _check("h.safetensors", struct.pack("<Q", len(text)) + text + tail)
    if report.status is Status.FINITE:  # only a fully consistent header may pass
        covered = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in header.values())
        assert covered == len(tail)


@SETTINGS
@given(
    ops=st.lists(
        st.sampled_from(
            [
                b"(",
                b"t",
                b"R",
                b"N",
                b"}",
                b"]",
                b"u",
                b"e",
                b"Q",
                b"\x93",
                b"\x85",
                b"\x86",
                b"0",
                b"cos\nsystem\n",
                b"cbuiltins\neval\n",
                b"ctorch._utils\n_rebuild_tensor_v2\n",
                b"ctorch\nFloatStorage\n",
                b"X\x01\x00\x00\x00a",
                b"K\x01",
                b"b",
                b"s",
                b"\x8c\x02os",
            ]
        ),
        max_size=30,
    )
)
def test_random_pickle_opcodes_never_execute(ops: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = write_torch_zip(
            Path(d) / "p.pt", None, {}, pickle_data=b"\x80\x02" + b"".join(ops) + b"."
        )
        report = verify_file(p, CTX)
    assert report.status is Status.NOT_VERIFIED


def test_pickle_builder_roundtrip_sanity() -> None:
    # the builder that the fuzz seeds rely on emits a loadable pickle
    import pickle

    assert pickle.loads(pickle_bytes({"a": (1, "b", [2.5])})) == {"a": (1, "b", [2.5])}
