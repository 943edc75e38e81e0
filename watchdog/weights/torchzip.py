"""PyTorch zip checkpoints (``torch.save`` since 1.6), checked without torch.

Layout (torch/serialization.py, ``_save``/``_load``): a zip archive whose single
top-level folder holds ``data.pkl`` (the pickled object), ``data/<key>`` (raw
storage bytes, one member per storage), ``byteorder`` and ``version``. Tensors
appear in the pickle as ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)`` calls whose storage is a persistent id ``('storage',
torch.<Type>Storage, key, location, numel)``. Since torch 2.x, dtypes without a
typed storage class (fp8, uint16/32/64, ...) are written as
``torch._utils._rebuild_tensor_v3(storage, offset, size, stride, requires_grad,
hooks, dtype[, metadata])`` over ``torch.storage.UntypedStorage``, whose ``numel``
counts bytes; ``offset``, sizes and strides count elements of ``dtype``.

The pickle is read by :class:`RestrictedUnpickler`, which resolves only a fixed
list of names to local stand-ins and never imports anything: any other global
(``os.system``, ``builtins.eval``, a model class…) makes the file "not verified".
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import io
import math
import pickle
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import TORCH_DTYPES, TORCH_STORAGES, DType
from .errors import NotVerifiedError
from .finite import Counts, count_nonfinite, uint_dtype
from .regular import open_zip
from .report import FileReport, TensorReport
from .scan import (
    Field,
    MappedFile,
    PendingCounts,
    ScanContext,
    element_layout,
    gather,
    gather_quietly,
)
from .zipmember import (
    MemberReader,
    require_plain_layout,
    require_unique_members,
)

MAX_PICKLE_BYTES = 256 << 20
MAX_DEPTH = 64

#: Every tensor rebuilt while one pickle is loaded, reachable from the root or not.
_MADE: contextvars.ContextVar[list[TensorRef] | None] = contextvars.ContextVar(
    "torchzip_made", default=None
)


@dataclass(frozen=True)
class StorageType:
    """Stand-in for a ``torch.<Name>Storage`` class (``dtype`` None: ``UntypedStorage``)."""

    name: str
    dtype: DType | None


@dataclass(frozen=True)
class StorageRef:
    """A storage named by a persistent id: ``data/<key>`` holding ``numel`` elements.

    Attributes:
        key: Member name under ``data/``.
        dtype: Element type of a typed storage; ``None`` for an ``UntypedStorage``,
            whose ``numel`` counts bytes.
        numel: Elements (typed) or bytes (untyped).
    """

    key: str
    dtype: DType | None
    numel: int

    def __setstate__(self, _state: object) -> None:
        # pickle's BUILD would otherwise rewrite a frozen stand-in through __dict__.
        raise NotVerifiedError("pickle sets state on a storage")

    @property
    def nbytes(self) -> int | None:
        """Size of the storage in bytes (``None`` when not whole bytes)."""
        return self.numel if self.dtype is None else self.dtype.nbytes_for(self.numel)


@dataclass(frozen=True)
class TensorRef:
    """Stand-in for a rebuilt tensor: a strided view into a storage.

    Attributes:
        storage: The storage viewed.
        dtype: Element type of the tensor.
        offset: First element, in elements of ``dtype``.
        size: Shape in elements.
        stride: Strides in elements.
    """

    storage: StorageRef
    dtype: DType
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    def __setstate__(self, _state: object) -> None:
        # pickle's BUILD would otherwise rewrite a frozen stand-in through __dict__.
        raise NotVerifiedError("pickle sets state on a tensor")


@dataclass(frozen=True)
class TorchDType:
    """Stand-in for a ``torch.<dtype>`` global."""

    name: str
    dtype: DType


@dataclass(frozen=True)
class _Opaque:
    """Stand-in for a harmless torch global such as ``torch.float16`` or ``Parameter``."""

    name: str


def _ints(x: object, what: str) -> tuple[int, ...]:
    if not isinstance(x, tuple | list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in x
    ):
        raise NotVerifiedError(f"tensor {what} is not a tuple of non-negative ints: {x!r}")
    return tuple(x)


def _rebuild(
    storage: object, offset: object, size: object, stride: object, dtype: DType | None
) -> TensorRef:
    if not isinstance(storage, StorageRef):
        raise NotVerifiedError("tensor rebuilt from something that is not a storage")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise NotVerifiedError(f"bad storage offset {offset!r}")
    sz, st = _ints(size, "size"), _ints(stride, "stride")
    if len(sz) != len(st):
        raise NotVerifiedError("tensor size and stride differ in length")
    if dtype is None:
        if storage.dtype is None:
            raise NotVerifiedError("tensor over an untyped storage without a dtype")
        dtype = storage.dtype
    elif storage.dtype is not None and storage.dtype != dtype:
        raise NotVerifiedError(
            f"tensor of {dtype.name} over a typed storage of {storage.dtype.name}"
        )
    ref = TensorRef(storage, dtype, offset, sz, st)
    made = _MADE.get()
    if made is not None:
        made.append(ref)
    return ref


def _rebuild_tensor(storage: object, offset: object, size: object, stride: object) -> TensorRef:
    return _rebuild(storage, offset, size, stride, None)


def _rebuild_tensor_v2(
    storage: object, offset: object, size: object, stride: object, *_rest: object
) -> TensorRef:
    return _rebuild(storage, offset, size, stride, None)


def _rebuild_tensor_v3(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    _requires_grad: object,
    _hooks: object,
    dtype: object,
    *_rest: object,
) -> TensorRef:
    """``torch._utils._rebuild_tensor_v3``: the dtype is an argument (untyped storages)."""
    if not isinstance(dtype, TorchDType):
        raise NotVerifiedError(f"_rebuild_tensor_v3 with dtype {dtype!r:.60}, not a torch dtype")
    return _rebuild(storage, offset, size, stride, dtype.dtype)


def _rebuild_parameter(data: object, *_rest: object) -> object:
    return data


def _rebuild_from_type_v2(func: object, _new_type: object, args: object, _state: object) -> object:
    if func not in (_rebuild_tensor_v3, _rebuild_tensor_v2, _rebuild_tensor) or not isinstance(
        args, tuple
    ):
        raise NotVerifiedError("unsupported tensor subclass rebuild")
    return func(*args)


def _size(arg: object = ()) -> tuple[int, ...]:
    return _ints(arg, "torch.Size")


_ALLOWED: dict[tuple[str, str], object] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    # torch.save writes a set as ``__builtin__.set([...])`` under protocol 2; the walk
    # checks every tensor inside one.
    ("builtins", "set"): set,
    ("__builtin__", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "frozenset"): frozenset,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch.storage", "UntypedStorage"): StorageType("UntypedStorage", None),
    ("torch", "UntypedStorage"): StorageType("UntypedStorage", None),
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch.nn.parameter", "Parameter"): _Opaque("torch.nn.parameter.Parameter"),
    ("torch", "Size"): _size,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds tensors and storages as inert stand-ins, and nothing else.

    Raises (from :meth:`load`):
        NotVerifiedError: The pickle names a global outside the allow-list or a
            malformed persistent id.
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.storages: dict[str, StorageRef] = {}

    def find_class(self, module: str, name: str) -> Any:
        """Resolve an allowed global to its stand-in; refuse everything else."""
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name in TORCH_STORAGES:
            return StorageType(name, TORCH_STORAGES[name])
        if module == "torch" and name in TORCH_DTYPES:
            return TorchDType(name, TORCH_DTYPES[name])
        raise NotVerifiedError(
            f"pickle references {module}.{name}, which is not a tensor rebuild function"
        )

    def persistent_load(self, pid: Any) -> StorageRef:
        """Turn ``('storage', StorageType, key, location, numel)`` into a :class:`StorageRef`.

        ``numel`` counts elements of a typed storage and bytes of an ``UntypedStorage``.
        """
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise NotVerifiedError(f"unsupported persistent id {pid!r:.80}")
        _, stype, key, _location, numel = pid
        if not isinstance(stype, StorageType):
            raise NotVerifiedError("persistent id without a known storage type")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise NotVerifiedError(f"bad storage key/numel {key!r} {numel!r}")
        ref = StorageRef(key, stype.dtype, numel)
        prev = self.storages.setdefault(key, ref)
        if prev != ref:
            raise NotVerifiedError(f"storage {key!r} declared twice with different types")
        return ref


def load_restricted(data: bytes) -> object:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`.

    Raises:
        NotVerifiedError: Disallowed global, malformed or truncated pickle.
    """
    return load_checkpoint(data).obj


@dataclass
class Loaded:
    """What a checkpoint pickle holds.

    Attributes:
        obj: The unpickled root object (with stand-ins for tensors and storages).
        storages: Every storage a persistent id named, by key.
        made: Every tensor rebuilt, in pickle order, reachable from ``obj`` or not.
    """

    obj: object
    storages: dict[str, StorageRef]
    made: list[TensorRef]


def load_checkpoint(data: bytes) -> Loaded:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`, recording every storage and tensor.

    Raises:
        NotVerifiedError: Disallowed global, malformed or truncated pickle.
    """
    made: list[TensorRef] = []
    token = _MADE.set(made)
    unpickler = RestrictedUnpickler(data)
    try:
        obj = unpickler.load()
    except NotVerifiedError:
        raise
    except Exception as exc:  # any malformed pickle: fail closed
        raise NotVerifiedError(f"unreadable pickle: {type(exc).__name__}: {exc}") from exc
    finally:
        _MADE.reset(token)
    return Loaded(obj, unpickler.storages, made)


def iter_refs(
    obj: object, prefix: str = "", depth: int = 0, seen: set[int] | None = None
) -> Iterator[tuple[str, TensorRef | StorageRef]]:
    """Yield ``(dotted key path, tensor or storage)`` for everything the object holds.

    Dict keys as well as values, lists, tuples, sets and frozensets are walked
    (``torch.load`` returns tensors wherever the pickle put them); a container
    reached twice is walked once, so shared sub-lists cannot make the walk explode.

    Raises:
        NotVerifiedError: Nesting deeper than :data:`MAX_DEPTH`.
    """
    if depth > MAX_DEPTH:
        raise NotVerifiedError("checkpoint nested too deeply")
    if isinstance(obj, TensorRef | StorageRef):
        yield prefix or "<root>", obj
        return
    if not isinstance(obj, dict | list | tuple | set | frozenset):
        return
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))

    def sub(name: str) -> str:
        return f"{prefix}.{name}" if prefix else name

    if isinstance(obj, dict):
        for i, (k, v) in enumerate(obj.items()):
            key = k if isinstance(k, str) else repr(k)
            if not isinstance(k, str | int | float | bool | None):
                key = f"<key {i}>"
                yield from iter_refs(k, sub(key), depth + 1, seen)
            yield from iter_refs(v, sub(key), depth + 1, seen)
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from iter_refs(v, sub(str(i)), depth + 1, seen)
    else:
        for i, v in enumerate(obj):
            yield from iter_refs(v, sub(f"<item {i}>"), depth + 1, seen)


def iter_tensors(obj: object, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, TensorRef]]:
    """Yield ``(dotted key path, tensor)`` for every tensor :func:`iter_refs` reaches.

    Raises:
        NotVerifiedError: Nesting deeper than :data:`MAX_DEPTH`.
    """
    for name, ref in iter_refs(obj, prefix, depth):
        if isinstance(ref, TensorRef):
            yield name, ref


def checked_tensors(loaded: Loaded) -> list[tuple[str, TensorRef]]:
    """Every view of storage bytes ``torch.load`` could hand out, named.

    That is every tensor reachable from the root (under its key path), every other
    tensor the pickle rebuilt, and every storage as a whole where the pickle exposes it
    bare or no tensor views it (an untyped storage loads as ``uint8``), so that no
    stored byte a loader returns escapes the check.

    Raises:
        NotVerifiedError: Nesting deeper than :data:`MAX_DEPTH`.
    """
    out: list[tuple[str, TensorRef]] = []
    whole: dict[str, str] = {}
    reached: set[int] = set()
    for name, ref in iter_refs(loaded.obj):
        if isinstance(ref, TensorRef):
            out.append((name, ref))
            reached.add(id(ref))
        else:
            whole.setdefault(ref.key, name)
    for i, t in enumerate(loaded.made):
        if id(t) not in reached:
            out.append((f"<tensor {i} not reachable from the root>", t))
    viewed = {t.storage.key for _, t in out}
    for key in loaded.storages:
        if key not in viewed:
            whole.setdefault(key, f"<storage {key}>")
    for key, name in whole.items():
        st = loaded.storages[key]
        dtype = st.dtype if st.dtype is not None else TORCH_STORAGES["ByteStorage"]
        if dtype.nbytes_for(1) is None:
            raise NotVerifiedError(f"storage {key!r}: {dtype.name} is not whole bytes")
        out.append((name, TensorRef(st, dtype, 0, (st.numel,), (1,))))
    return out


def _find_root(zf: zipfile.ZipFile) -> str:
    roots = [n[: -len("data.pkl")] for n in zf.namelist() if n.endswith("/data.pkl")]
    roots = [r for r in roots if r.count("/") == 1]
    if len(roots) != 1:
        raise NotVerifiedError("zip is not a torch.save checkpoint (no single */data.pkl)")
    # torch's reader takes the archive's folder from the first member's name
    # (PyTorchStreamReader::init), not from wherever data.pkl is.
    first = zf.infolist()[0].filename
    if not first.startswith(roots[0]):
        raise NotVerifiedError(
            f"first member {first!r} is not under {roots[0]!r}, the folder of data.pkl"
        )
    return roots[0]


def verify_torchzip(path: Path, ctx: ScanContext, report: FileReport) -> None:
    """Check every tensor of a PyTorch zip checkpoint, appending to ``report.tensors``.

    Each tensor is checked over the storage elements it views: exactly its
    elements when contiguous, else the storage span its strides cover (noted).

    Raises:
        NotVerifiedError: Not a torch zip, disallowed pickle content, missing or
            short storage member, or a view outside its storage.
        OSError: The file cannot be read.
    """
    with MappedFile(path, ctx.mapped) as mf, _open_zip(path) as zf:
        require_plain_layout(mf, zf)
        require_unique_members(zf, fold_case=True)
        root = _find_root(zf)
        byteorder = "<"
        if root + "byteorder" in zf.namelist():
            order = zf.read(root + "byteorder").strip()
            if order not in (b"little", b"big"):
                raise NotVerifiedError(f"unknown byteorder {order!r}")
            byteorder = "<" if order == b"little" else ">"
        pkl = zf.getinfo(root + "data.pkl")
        if pkl.file_size > MAX_PICKLE_BYTES:
            raise NotVerifiedError(f"data.pkl is {pkl.file_size} bytes (limit {MAX_PICKLE_BYTES})")
        unpickler_input = zf.read(pkl)
        tensors = checked_tensors(load_checkpoint(unpickler_input))
        if not tensors:
            raise NotVerifiedError("checkpoint holds no tensors")
        readers: dict[str, MemberReader] = {}
        for _, t in tensors:  # every storage present and sized right before any scan
            key = t.storage.key
            if key in readers:
                continue
            member = f"{root}data/{key}"
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise NotVerifiedError(f"storage member {member!r} missing") from None
            if info.compress_type != zipfile.ZIP_STORED:
                # torch.save stores every storage; torch.load inflates a compressed one,
                # torch.load(mmap=True) maps its compressed bytes as the tensor's values.
                raise NotVerifiedError(
                    f"storage member {member!r} is compressed: torch.load inflates it,"
                    " torch.load(mmap=True) maps the compressed bytes; readers disagree"
                )
            need = t.storage.nbytes
            if need != info.file_size:
                raise NotVerifiedError(
                    f"storage {member!r} is {info.file_size} bytes, expected {need}"
                )
            readers[key] = MemberReader(zf, mf, info)
        pending: list[PendingCounts] = []
        finish: list[Callable[[Counts], None]] = []
        try:
            for name, t in tensors:
                started = _start_tensor(name, t, readers[t.storage.key], ctx, byteorder, report)
                if started is not None:
                    pending.append(started[0])
                    finish.append(started[1])
        except BaseException:
            gather_quietly(pending)
            raise
        for done, c in zip(finish, gather(pending), strict=True):
            done(c)


def _start_tensor(
    name: str,
    t: TensorRef,
    reader: MemberReader,
    ctx: ScanContext,
    byteorder: str,
    report: FileReport,
) -> tuple[PendingCounts, Callable[[Counts], None]] | None:
    """Append the tensor's report and start checking its values.

    Returns:
        ``None`` when there is nothing to scan, else the pending counts of the storage
        range and the function that turns them into the tensor's counts.

    Raises:
        NotVerifiedError: The view lies outside its storage or its dtype is not whole
            bytes per element.
    """
    dtype = t.dtype
    numel = math.prod(t.size)
    tr = TensorReport(name, dtype.name, t.size, checked=dtype.checked)
    report.tensors.append(tr)
    if numel == 0:
        return None
    span = 1 + sum((s - 1) * st for s, st in zip(t.size, t.stride, strict=True))
    itemsize = dtype.nbytes_for(1)
    storage_bytes = t.storage.nbytes
    if itemsize is None or storage_bytes is None:
        raise NotVerifiedError(f"tensor {name!r}: {dtype.name} is not whole bytes per element")
    if (t.offset + span) * itemsize > storage_bytes:
        raise NotVerifiedError(f"tensor {name!r} views past the end of its storage")
    if dtype.code is None:
        return None
    unit_bytes, fields = element_layout(dtype.code, dtype.components)
    contiguous = span == numel and _is_c_contiguous(t.size, t.stride)

    def done(c: Counts) -> None:
        if not contiguous and c.bad:
            # The storage span held a non-finite value: count the viewed elements one
            # by one, in C order, so the counts and the first bad index are those of
            # the tensor, not of the bytes under it.
            c = _count_view(t, reader, unit_bytes, fields, byteorder, ctx.chunk_bytes)
        tr.nan, tr.posinf, tr.neginf, tr.first_bad_index = c.nan, c.posinf, c.neginf, c.first_bad

    started = reader.scan_async(t.offset * unit_bytes, span, unit_bytes, fields, ctx, byteorder)
    return started, done


def _count_view(
    t: TensorRef,
    reader: MemberReader,
    unit_bytes: int,
    fields: list[Field],
    byteorder: str,
    chunk_bytes: int,
) -> Counts:
    """Exact counts over the elements a strided view holds; ``first_bad`` in C order.

    Rows of the outermost dimension are taken a few MiB at a time, so memory stays
    bounded by the chunk plus the bytes of the span (held only for a compressed member).
    """
    span = 1 + sum((s - 1) * st for s, st in zip(t.size, t.stride, strict=True))
    buf = reader.buffer(t.offset * unit_bytes, span * unit_bytes)
    size, stride = (t.size, t.stride) if t.size else ((1,), (1,))
    inner = math.prod(size[1:])
    rows_per = max(1, chunk_bytes // max(1, inner * unit_bytes))
    total = Counts()
    for row in range(0, size[0], rows_per):
        rows = min(rows_per, size[0] - row)
        for f in fields:
            code = f.code
            values = np.ndarray(
                shape=(rows, *size[1:]),
                dtype=uint_dtype(code.bits, byteorder),
                buffer=buf,
                offset=row * stride[0] * unit_bytes + f.offset_bytes,
                strides=tuple(st * unit_bytes for st in stride),
            )
            total.add(count_nonfinite(code, values), row * inner)
    return total


def _is_c_contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for s, st in zip(reversed(size), reversed(stride), strict=True):
        if s != 1 and st != expected:
            return False
        expected *= s
    return True


@contextlib.contextmanager
def _open_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    with contextlib.ExitStack() as stack:
        try:
            zf = stack.enter_context(open_zip(path))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise NotVerifiedError(f"unreadable zip: {exc}") from exc
        yield zf
