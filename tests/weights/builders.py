"""Writers for test fixtures, straight from the format specs (no torch, no safetensors).

* safetensors: 8-byte LE header length, JSON header, byte buffer.
* torch zip: ``ROOT/data.pkl`` (protocol-2 pickle written opcode by opcode),
  ``ROOT/data/KEY`` storages, ``ROOT/byteorder``, ``ROOT/version``.
* GGUF v3: header, metadata, tensor infos, aligned data section.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# ---------------------------------------------------------------- safetensors


def safetensors_bytes(
    tensors: dict[str, tuple[str, list[int], bytes]],
    metadata: dict[str, str] | None = None,
    header_override: dict[str, Any] | None = None,
) -> bytes:
    """Serialize ``{name: (dtype, shape, raw)}`` contiguously in the given order."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    if header_override is not None:
        header.update(header_override)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, raw in tensors.values())


def write_safetensors(
    path: Path, tensors: dict[str, tuple[str, list[int], bytes]], **kw: Any
) -> Path:
    path.write_bytes(safetensors_bytes(tensors, **kw))
    return path


def st_array(arr: np.ndarray, dtype: str) -> tuple[str, list[int], bytes]:
    """A safetensors entry from a numpy array (bytes as stored)."""
    return dtype, list(arr.shape), np.ascontiguousarray(arr).tobytes()


# ---------------------------------------------------------------- pickle emitter


@dataclass(frozen=True)
class Global:
    module: str
    name: str


@dataclass(frozen=True)
class Reduce:
    func: Any
    args: tuple[Any, ...]


@dataclass(frozen=True)
class PersId:
    pid: tuple[Any, ...]


class PickleWriter:
    """Emits protocol-2 pickle opcodes for plain values and the markers above."""

    def __init__(self, stack_global: bool = False) -> None:
        self.out = bytearray(b"\x80\x04" if stack_global else b"\x80\x02")
        self.stack_global = stack_global

    def emit(self, obj: Any) -> None:
        o = self.out
        if obj is None:
            o += b"N"
        elif obj is True:
            o += b"\x88"
        elif obj is False:
            o += b"\x89"
        elif isinstance(obj, int):
            n = max(1, (obj.bit_length() + 8) // 8)
            o += b"\x8a" + bytes([n]) + obj.to_bytes(n, "little", signed=True)
        elif isinstance(obj, float):
            o += b"G" + struct.pack(">d", obj)
        elif isinstance(obj, str):
            enc = obj.encode()
            o += b"X" + struct.pack("<I", len(enc)) + enc
        elif isinstance(obj, Global):
            if self.stack_global:
                self.emit(obj.module)
                self.emit(obj.name)
                o += b"\x93"
            else:
                o += b"c" + f"{obj.module}\n{obj.name}\n".encode()
        elif isinstance(obj, Reduce):
            self.emit(obj.func)
            self.emit(tuple(obj.args))
            o += b"R"
        elif isinstance(obj, PersId):
            self.emit(tuple(obj.pid))
            o += b"Q"
        elif isinstance(obj, tuple):
            o += b"("
            for x in obj:
                self.emit(x)
            o += b"t"
        elif isinstance(obj, list):
            o += b"]("
            for x in obj:
                self.emit(x)
            o += b"e"
        elif isinstance(obj, dict):
            o += b"}("
            for k, v in obj.items():
                self.emit(k)
                self.emit(v)
            o += b"u"
        else:
            raise TypeError(type(obj))

    def finish(self) -> bytes:
        return bytes(self.out) + b"."


def pickle_bytes(obj: Any, stack_global: bool = False) -> bytes:
    w = PickleWriter(stack_global)
    w.emit(obj)
    return w.finish()


def ordered_dict(items: dict[str, Any] | None = None) -> Reduce:
    return Reduce(
        Global("collections", "OrderedDict"), ([(k, v) for k, v in (items or {}).items()],)
    )


def tensor(
    storage_type: str,
    key: str,
    numel: int,
    size: tuple[int, ...],
    stride: tuple[int, ...] | None = None,
    offset: int = 0,
) -> Reduce:
    """``torch._utils._rebuild_tensor_v2`` of a storage persistent id."""
    if stride is None:
        stride = tuple(math.prod(size[i + 1 :]) for i in range(len(size)))
    storage = PersId(("storage", Global("torch", storage_type), key, "cpu", numel))
    return Reduce(
        Global("torch._utils", "_rebuild_tensor_v2"),
        (storage, offset, tuple(size), tuple(stride), False, ordered_dict()),
    )


def write_torch_zip(
    path: Path,
    obj: Any,
    storages: dict[str, bytes],
    root: str = "archive",
    compress: bool = False,
    byteorder: str = "little",
    pickle_data: bytes | None = None,
) -> Path:
    """Write a ``torch.save``-style zip: pickle of ``obj`` plus raw storages."""
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=mode) as zf:
        zf.writestr(
            f"{root}/data.pkl", pickle_data if pickle_data is not None else pickle_bytes(obj)
        )
        zf.writestr(f"{root}/byteorder", byteorder)
        for key, raw in storages.items():
            zf.writestr(f"{root}/data/{key}", raw)
        zf.writestr(f"{root}/version", "3\n")
    return path


def torch_state_dict(
    path: Path, arrays: dict[str, np.ndarray], storage_type: str, **kw: Any
) -> Path:
    """A state-dict checkpoint, one storage per array, keys ``0, 1, ...``."""
    items: dict[str, Any] = {}
    storages: dict[str, bytes] = {}
    for i, (name, arr) in enumerate(arrays.items()):
        key = str(i)
        items[name] = tensor(storage_type, key, arr.size, tuple(arr.shape))
        storages[key] = np.ascontiguousarray(arr).tobytes()
    return write_torch_zip(path, ordered_dict(items), storages, **kw)


# ---------------------------------------------------------------- GGUF


def _gstr(s: str) -> bytes:
    enc = s.encode()
    return struct.pack("<Q", len(enc)) + enc


def gguf_bytes(
    tensors: list[tuple[str, int, tuple[int, ...], bytes]],
    alignment: int = 32,
    version: int = 3,
    extra_kv: bytes = b"",
    n_extra_kv: int = 0,
    offsets: list[int] | None = None,
) -> bytes:
    """GGUF with ``(name, ggml_type, dims innermost-first, raw)`` tensors."""
    kv = _gstr("general.architecture") + struct.pack("<I", 8) + _gstr("test")
    kv += _gstr("general.alignment") + struct.pack("<II", 4, alignment)
    kv += _gstr("test.floats") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 1.0, 2.0)
    kv += extra_kv
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), 3 + n_extra_kv) + kv
    infos = b""
    data = b""
    auto_offsets = []
    for _name, _t, _dims, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        auto_offsets.append(len(data))
        data += raw
    for i, (name, t, dims, _raw) in enumerate(tensors):
        off = auto_offsets[i] if offsets is None else offsets[i]
        infos += _gstr(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off)
    out = head + infos
    out += b"\0" * (-len(out) % alignment)
    # Writers (gguf-py, ggml's gguf_write_to_file) pad after every tensor, the last too.
    return out + data + b"\0" * (-len(data) % alignment)


def f16_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float16).view(np.uint16)[0])


def q8_0_blocks(scales: list[int]) -> bytes:
    """Q8_0 blocks (34 bytes: f16 d + 32 int8) with the given f16 scale bit patterns."""
    return b"".join(struct.pack("<H", d) + bytes(range(32)) for d in scales)


def q2_k_blocks(d_dmin: list[tuple[int, int]]) -> bytes:
    """Q2_K blocks (84 bytes: scales[16], qs[64], f16 d, f16 dmin at the end)."""
    return b"".join(bytes(16) + bytes(64) + struct.pack("<HH", d, m) for d, m in d_dmin)
