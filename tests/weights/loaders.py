"""The loaders people use, each asked to read one file the way a user's code does.

Each loader returns a :class:`Reading`: accepted or refused (and why), and the values it
would hand to the user, per tensor, as float64 (floats) or int64/uint64 (integers).
These are the real libraries, not models of them:

* ``safetensors`` (Rust core): ``safetensors.numpy.load_file`` and
  ``safetensors.torch.load_file``;
* ``torch.load(..., weights_only=True)``, with and without ``mmap=True`` (the two read
  storages by different code paths: miniz streaming and an mmap of the zip);
* numpy: ``np.load(allow_pickle=False)`` for ``.npy`` (plain and ``mmap_mode="r"``)
  and ``.npz``;
* gguf-py (``gguf.GGUFReader`` + ``gguf.quants.dequantize``) and llama.cpp's C reader
  (ggml's ``gguf_init_from_file`` + the type's ``to_float``, ``tests/weights/ggml``).

A loader that would crash the user's program (any exception) counts as refusing the
file; its values are then not compared.
"""

from __future__ import annotations

import struct
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Values = dict[str, np.ndarray]


@dataclass(frozen=True)
class Reading:
    """What one loader made of one file.

    Attributes:
        loader: The loader's name, e.g. ``"ggml"``.
        values: Tensor name to a flat array of what the loader returns (float64 for
            float types, int64/uint64 for integers); None when it refused the file.
        error: Why it refused (the exception, or ggml's log), else "".
        opaque: Tensors the loader returns without values it converts (ggml's Q8_K,
            gguf-py's types without a dequantizer).
        unsupported: It refused for want of a type, not by a rule about the file
            (safetensors.numpy on float8: numpy has no such dtype).
    """

    loader: str
    values: Values | None
    error: str = ""
    opaque: tuple[str, ...] = field(default=())
    unsupported: bool = False

    @property
    def accepted(self) -> bool:
        """True when the loader returned the file's tensors."""
        return self.values is not None

    def non_finite(self) -> list[str]:
        """Names of the tensors holding a NaN or an infinity, in name order."""
        if self.values is None:
            return []
        return sorted(
            k for k, v in self.values.items() if v.dtype.kind == "f" and not np.isfinite(v).all()
        )

    def summary(self) -> str:
        """One line for a report: refused and why, or the tensors and bad ones."""
        if self.values is None:
            return f"{self.loader}: refused ({self.error.strip()[:160]})"
        bad = self.non_finite()
        return f"{self.loader}: {len(self.values)} tensors" + (f", non-finite {bad}" if bad else "")


def _refused(loader: str, exc: BaseException, unsupported: bool = False) -> Reading:
    return Reading(loader, None, f"{type(exc).__name__}: {exc}", unsupported=unsupported)


def _flat(arr: Any) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype.kind == "f":
        return a.astype(np.float64).ravel()
    if a.dtype.kind == "c":
        return np.concatenate(
            [a.real.astype(np.float64).ravel(), a.imag.astype(np.float64).ravel()]
        )
    if a.dtype.kind == "b":
        return a.astype(np.int64).ravel()
    if a.dtype.kind == "u":
        return a.astype(np.uint64).ravel()
    if a.dtype.kind == "i":
        return a.astype(np.int64).ravel()
    if a.dtype.kind == "V" and a.dtype.name in _ML_FLOATS:  # ml_dtypes' bfloat16, float8_*
        return a.astype(np.float64).ravel()
    raise TypeError(f"dtype {a.dtype} not compared")


_ML_FLOATS = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"}


def _torch_flat(t: Any) -> np.ndarray:
    import torch

    if t.dtype.is_floating_point:
        return t.detach().to(torch.float64).reshape(-1).numpy()
    if t.dtype.is_complex:
        r = torch.view_as_real(t.detach().to(torch.complex128)).reshape(-1, 2)
        return np.concatenate([r[:, 0].numpy(), r[:, 1].numpy()])
    if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return t.detach().to(torch.int64).reshape(-1).numpy().astype(np.uint64)
    return t.detach().to(torch.int64).reshape(-1).numpy()


def _walk(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every tensor or storage of a loaded torch object, with a dotted key path."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, torch.UntypedStorage | torch.TypedStorage):
        yield prefix, torch.tensor([], dtype=torch.uint8).set_(obj.untyped())
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list | tuple | set | frozenset):
        for i, v in enumerate(sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj):
            yield from _walk(v, f"{prefix}[{i}]")


# ---------------------------------------------------------------- safetensors


def _lacks_dtype(exc: BaseException) -> bool:
    """True when numpy lacks the file's type: a missing type, not a rule about the file.

    safetensors before 0.6 looked a dtype name up as numpy's attribute of that name
    (``AttributeError: module 'numpy' has no attribute 'bfloat16'``); 0.6 and later ask
    ``numpy.dtype(name)`` from Rust (``TypeError: data type 'bfloat16' not understood``).
    """
    text = str(exc)
    return (isinstance(exc, AttributeError) and "module 'numpy' has no attribute" in text) or (
        isinstance(exc, TypeError) and text.startswith("data type '") and "not understood" in text
    )


def safetensors_numpy(path: Path) -> Reading:
    """``safetensors.numpy.load_file``, with ml_dtypes loaded (bf16 and fp8 as numpy types).

    safetensors asks numpy for a type by name, and numpy knows ``bfloat16`` and the fp8
    types only once ml_dtypes is imported (it registers them). Without the import here,
    the answer for a bf16 file depended on whether anything earlier in the process had
    imported ml_dtypes (gate_fuzz seed 8675309: two bf16 files "refused" before the first
    fp8 case imported it). Importing it first makes the reading the same in every process
    and gives the values to compare; a type numpy still lacks is ``unsupported``.
    """
    import ml_dtypes  # noqa: F401  (registers bfloat16, float8_* with numpy)
    from safetensors.numpy import load_file

    try:
        return Reading("safetensors.numpy", {k: _flat(v) for k, v in load_file(str(path)).items()})
    except Exception as exc:
        return _refused("safetensors.numpy", exc, unsupported=_lacks_dtype(exc))


def safetensors_torch(path: Path) -> Reading:
    """``safetensors.torch.load_file``: every dtype torch has."""
    from safetensors.torch import load_file

    try:
        return Reading(
            "safetensors.torch", {k: _torch_flat(v) for k, v in load_file(str(path)).items()}
        )
    except Exception as exc:
        return _refused("safetensors.torch", exc)


# ---------------------------------------------------------------- torch


def _torch_load(path: Path, mmap: bool) -> Reading:
    import torch

    name = "torch.load(mmap)" if mmap else "torch.load"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(str(path), weights_only=True, map_location="cpu", mmap=mmap)
        return Reading(name, {k: _torch_flat(t) for k, t in _walk(obj)})
    except Exception as exc:
        return _refused(name, exc)


def torch_load(path: Path) -> Reading:
    """``torch.load(path, weights_only=True)``."""
    return _torch_load(path, mmap=False)


def torch_load_mmap(path: Path) -> Reading:
    """``torch.load(path, weights_only=True, mmap=True)``."""
    return _torch_load(path, mmap=True)


# ---------------------------------------------------------------- numpy


def numpy_load(path: Path) -> Reading:
    """``np.load(path, allow_pickle=False)``: an array, or every member of an npz."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = np.load(str(path), allow_pickle=False)
            if isinstance(obj, np.lib.npyio.NpzFile):
                with obj:
                    return Reading("numpy", {k: _flat(obj[k]) for k in obj.files})
            return Reading("numpy", {"": _flat(obj)})
    except Exception as exc:
        return _refused("numpy", exc)


def numpy_mmap(path: Path) -> Reading:
    """``np.load(path, mmap_mode="r")``: the data read at the header's end, in place."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.load(str(path), mmap_mode="r", allow_pickle=False)
            return Reading("numpy(mmap)", {"": _flat(np.array(arr))})
    except Exception as exc:
        return _refused("numpy(mmap)", exc)


# ---------------------------------------------------------------- gguf


def gguf_py(path: Path) -> Reading:
    """gguf-py: ``GGUFReader`` and ``quants.dequantize`` of each tensor's blocks."""
    import gguf
    from gguf import quants

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = gguf.GGUFReader(str(path))
            out: Values = {}
            opaque: list[str] = []
            for t in reader.tensors:
                qtype = gguf.GGMLQuantizationType(t.tensor_type)
                data = np.asarray(t.data)
                if (
                    qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F64)
                    or qtype in _GGUF_INTS
                ):
                    out[t.name] = _flat(data)
                    continue
                try:
                    out[t.name] = _flat(quants.dequantize(data, qtype))
                except NotImplementedError:  # read, but no dequantizer (Q8_K in 0.19)
                    out[t.name] = np.zeros(0)
                    opaque.append(t.name)
        return Reading("gguf-py", out, opaque=tuple(opaque))
    except Exception as exc:
        return _refused("gguf-py", exc)


_GGUF_INTS = {24, 25, 26, 27}
_GGML_INT_DTYPES = {24: "<i1", 25: "<i2", 26: "<i4", 27: "<i8", 28: "<f8"}


def _parse_ggml(out: bytes) -> tuple[Values, tuple[str, ...]]:
    vals: Values = {}
    opaque: list[str] = []
    pos = 0
    while pos < len(out):
        (n,) = struct.unpack_from("<I", out, pos)
        pos += 4
        name = out[pos : pos + n].decode("utf-8", "surrogateescape")
        pos += n
        (gtype,) = struct.unpack_from("<i", out, pos)
        pos += 4 + 32
        kind = out[pos : pos + 1]
        (nbytes,) = struct.unpack_from("<Q", out, pos + 1)
        pos += 9
        raw = out[pos : pos + nbytes]
        pos += nbytes
        if kind == b"f":
            vals[name] = np.frombuffer(raw, "<f4").astype(np.float64)
        elif kind == b"r":
            vals[name] = _flat(np.frombuffer(raw, _GGML_INT_DTYPES[gtype]))
        else:
            opaque.append(name)
    return vals, tuple(opaque)


def ggml_reader(exe: Path) -> Callable[[Path], Reading]:
    """llama.cpp's C reader, built by :func:`tests.weights.ggml.build.build_reader`."""

    def read(path: Path) -> Reading:
        with tempfile.NamedTemporaryFile(prefix="ggml-out-") as tmp:
            cp = subprocess.run(
                [str(exe), str(path), tmp.name], capture_output=True, timeout=60, check=False
            )
            if cp.returncode == 3:
                return Reading("ggml", None, cp.stderr.decode("utf-8", "replace"))
            if cp.returncode != 0:
                # A crash (abort on GGML_ASSERT, a signal) is a refusal the user sees too.
                return Reading("ggml", None, f"exit {cp.returncode}: {cp.stderr[-400:]!r}")
            vals, opaque = _parse_ggml(Path(tmp.name).read_bytes())
            return Reading("ggml", vals, opaque=opaque)

    return read


def loaders_for(suffix: str, ggml_exe: Path | None) -> list[Callable[[Path], Reading]]:
    """The loaders a user would point at a file with this suffix."""
    if suffix == ".safetensors":
        return [safetensors_numpy, safetensors_torch]
    if suffix in (".pt", ".pth", ".bin", ".ckpt"):
        return [torch_load, torch_load_mmap]
    if suffix == ".npy":
        return [numpy_load, numpy_mmap]
    if suffix == ".npz":
        return [numpy_load]
    if suffix == ".gguf":
        return [gguf_py] + ([ggml_reader(ggml_exe)] if ggml_exe is not None else [])
    raise ValueError(f"no loaders for {suffix}")
