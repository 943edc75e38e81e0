"""Execute the generic undo ops of any action (the ``actions.undo_json`` contract).

``undo_json`` holds a list of ops (or ``{"ops": [...]}``), run in order:

- ``{"op": "rename", "from": A, "to": B}``: move ``B`` back to ``A`` (refused when ``A``
  exists again).
- ``{"op": "restore_file", "path": P, "backup": B, "uid": U, "gid": G, "mode": M,
  "sha256": S}``: the backup must still hash to ``S``; its bytes replace ``P`` atomically
  with owner ``U:G`` and mode ``M``, and ``P``'s directory is touched so cron(8) notices.
  With ``"mtime_ns": T`` (a unit file moved aside), ``P`` gets its modification time
  ``T`` back.
- ``{"op": "crontab_restore", "user": U, "backup": B}``: ``crontab -u U B`` (a
  crontab(1) header in ``B`` is left out: crontab writes its own).
- ``{"op": "systemctl", "argv": [...]}``: ``systemctl ARGV``; likewise ``scontrol``,
  ``docker``, ``podman`` and ``supervisorctl`` (a container's restart policy and running
  state, a supervisord program: :mod:`watchdog.actions.sources`).
- ``{"op": "at_requeue", "backup": B, "sha256": S, "queue": Q, "time": T, "user": U,
  "path": P}``: the saved at job script ``B`` (still hashing to ``S``) queued again with
  ``at -q Q -t T``, as ``U`` (``runuser``) when not root; refused while the job's own
  spool file ``P`` still exists (it was never removed).
- ``{"op": "cgroup_lift", "cgroup": D}``: lift a GPU denial (watchdog/actions/gpudeny.py):
  every process in the cgroup ``D`` moves back to the cgroup above it, then ``D`` is
  removed (refused for a directory that is no denial's). With ``"programs": [ID...]``
  (cgroup v2) those device programs are detached from ``D`` first, each only when it is
  attached to ``D`` itself and is a denial's.

Every op goes through :class:`~watchdog.actions.effects.Effects`. The first failure
stops the undo (later ops may depend on it) and is reported. Before each op the undo
checks what it depends on (:func:`check_op`: the name to put back is free, the file to
move back is there, on the same file system, in a folder that can be written, a backup
still hashes to its record); a dry run runs those very checks against what the ops
before it would have left, so it predicts the failure the undo would have. What only a
command can tell (``systemctl``, ``scontrol``, ``crontab``) is known when it runs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..lineage.crontab import installed_header_lines
from .effects import Effects
from .gpudeny import is_denial, lift
from .sources import requeue_argv

OP_KINDS = (
    "rename", "restore_file", "crontab_restore", "systemctl", "scontrol", "docker", "podman",
    "supervisorctl", "at_requeue", "cgroup_lift",
)  # fmt: skip
# The ops that run a command: ``[op, *argv]``.
_COMMANDS = ("systemctl", "scontrol", "docker", "podman", "supervisorctl")


class UndoError(ValueError):
    """An undo record is malformed (unknown op, missing keys)."""


#: Required keys of each op and what each must hold (``int`` excludes ``bool``).
_SHAPES: dict[str, dict[str, str]] = {
    "rename": {"from": "str", "to": "str"},
    "restore_file": {
        "path": "str", "backup": "str", "uid": "int", "gid": "int", "mode": "int", "sha256": "str",
    },
    "crontab_restore": {"user": "str", "backup": "str"},
    "systemctl": {"argv": "argv"},
    "scontrol": {"argv": "argv"},
    "docker": {"argv": "argv"},
    "podman": {"argv": "argv"},
    "supervisorctl": {"argv": "argv"},
    "at_requeue": {"backup": "str", "sha256": "str", "queue": "str", "time": "str", "user": "str"},
    "cgroup_lift": {"cgroup": "str"},
}  # fmt: skip


def _holds(value: Any, want: str) -> bool:
    if want == "str":
        return isinstance(value, str) and value != ""
    if want == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return (
        isinstance(value, list) and bool(value) and all(isinstance(a, str) for a in value)
    )  # argv


def _check_op(n: int, op: Any) -> None:
    if not isinstance(op, dict) or op.get("op") not in OP_KINDS:
        raise UndoError(f"op {n}: unknown undo op {op!r}")
    for key, want in _SHAPES[op["op"]].items():
        if key not in op:
            raise UndoError(f"op {n} ({op['op']}): missing {key!r}")
        if not _holds(op[key], want):
            kind = {"str": "a non-empty string", "int": "an integer"}.get(
                want, "a non-empty list of strings"
            )
            raise UndoError(f"op {n} ({op['op']}): {key!r} must be {kind}, not {op[key]!r}")


def ops_of(undo: Any) -> list[dict[str, Any]]:
    """The op list of an ``undo_json`` value (a list, or a dict with ``ops``), checked
    against the documented shape of every op before any of them runs.

    Raises:
        UndoError: Not a list of ops; an unknown ``op``; a missing key or a key of the
            wrong type (e.g. ``restore_file`` without ``sha256``).
    """
    ops = undo.get("ops") if isinstance(undo, dict) else undo
    if not isinstance(ops, list):
        raise UndoError("undo record is not a list of ops")
    for n, op in enumerate(ops, 1):
        _check_op(n, op)
    return ops


def describe(op: dict[str, Any]) -> str:
    """One line saying what ``op`` will do."""
    kind = op["op"]
    if kind == "rename":
        return f"rename {op['to']} back to {op['from']}"
    if kind == "restore_file":
        return (
            f"restore {op['path']} from {op['backup']} (sha256 {str(op['sha256'])[:12]}…, "
            f"owner {op['uid']}:{op['gid']}, mode {int(op['mode']):04o})"
        )
    if kind == "crontab_restore":
        return f"crontab -u {op['user']} {op['backup']}"
    if kind == "at_requeue":
        return f"{' '.join(requeue_argv(op))} < {op['backup']}"
    if kind == "cgroup_lift":
        return (
            f"lift the GPU denial: move the processes in {op['cgroup']} back to "
            f"{os.path.dirname(op['cgroup'].rstrip('/'))} and remove it"
        )
    return f"{kind} {' '.join(op['argv'])}"


@dataclass
class UndoResult:
    """Outcome of :func:`run_undo`: ``ok``, ``failed`` or ``dry-run``; steps done."""

    outcome: str
    done: list[str] = field(default_factory=list)
    error: str | None = None


def _strip_header(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(lines[installed_header_lines(lines) :])


class _Overlay:
    """What the ops before this one would have changed (a dry run runs none of them)."""

    def __init__(self) -> None:
        self.present: dict[str, bool] = {}

    def lexists(self, path: str) -> bool:
        return self.present.get(path, os.path.lexists(path))

    def did(self, op: dict[str, Any]) -> None:
        if op["op"] == "rename":
            self.present[op["to"]] = False
            self.present[op["from"]] = True
        elif op["op"] == "restore_file":
            self.present[op["path"]] = True


def _backup(op: dict[str, Any]) -> bytes:
    data = Path(op["backup"]).read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != op["sha256"]:
        raise OSError(
            f"backup {op['backup']} changed (sha256 {got[:12]}…, recorded {op['sha256'][:12]}…)"
        )
    return data


def _writable_folder(path: str) -> str:
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise OSError(f"folder {folder} is gone")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OSError(f"cannot write in folder {folder}")
    return folder


def check_op(op: dict[str, Any], lexists: Callable[[str], bool] = os.path.lexists) -> None:
    """Check what ``op`` depends on, changing nothing: the undo runs it before each op,
    a dry run before describing it.

    Args:
        op: One checked op (:func:`ops_of`).
        lexists: Whether a path exists (a dry run passes what the ops before it would
            have left).

    Raises:
        OSError: The op would fail, saying why: the name to put back is taken again,
            the file to move back is gone, the folder is gone or read-only, the
            quarantine folder is on another file system (``rename(2)``: ``EXDEV``), a
            backup is unreadable or no longer hashes to its record.
    """
    kind = op["op"]
    if kind == "rename":
        back, moved = op["from"], op["to"]
        if lexists(back):
            raise OSError(f"{back} exists again; not overwriting it with {moved}")
        if not lexists(moved):
            raise OSError(f"{moved} is gone: nothing to put back")
        folder = _writable_folder(back)
        if os.path.lexists(moved) and os.lstat(moved).st_dev != os.stat(folder).st_dev:
            raise OSError(f"{moved} is on another file system than {folder}")
    elif kind == "restore_file":
        _backup(op)
        _writable_folder(op["path"])
    elif kind == "crontab_restore":
        Path(op["backup"]).read_bytes()
    elif kind == "at_requeue":
        _backup(op)
        path = op.get("path")
        if isinstance(path, str) and lexists(path):
            raise OSError(f"{path} is still queued: it was never removed")
    elif kind == "cgroup_lift":
        if not is_denial(op["cgroup"]):
            raise OSError(f"{op['cgroup']} is not a GPU denial's cgroup: left alone")
        if not os.path.isdir(op["cgroup"]):
            raise OSError(f"{op['cgroup']} is gone: the denial was lifted already")


def _program_ids(op: dict[str, Any]) -> list[int]:
    """A ``cgroup_lift``'s recorded device program ids (cgroup v2); none for v1."""
    ids = op.get("programs")
    if not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]


def _run_op(op: dict[str, Any], effects: Effects) -> None:
    kind = op["op"]
    check_op(op)
    if kind == "rename":
        effects.rename(op["to"], op["from"])
    elif kind == "restore_file":
        data = _backup(op)
        effects.write_file_atomic(op["path"], data, int(op["uid"]), int(op["gid"]), int(op["mode"]))
        if isinstance(op.get("mtime_ns"), int) and not isinstance(op["mtime_ns"], bool):
            effects.set_mtime(op["path"], op["mtime_ns"])
        effects.touch(os.path.dirname(op["path"]) or ".")
    elif kind == "cgroup_lift":
        lift(op["cgroup"], effects, programs=_program_ids(op))
    elif kind == "crontab_restore":
        data = _strip_header(Path(op["backup"]).read_bytes())
        out = effects.run(["crontab", "-u", op["user"], "-"], data)
        if out.returncode != 0:
            raise OSError(f"crontab -u {op['user']} exited {out.returncode}: {out.stderr.strip()}")
    elif kind == "at_requeue":
        argv = requeue_argv(op)
        out = effects.run(argv, _backup(op))
        if out.returncode != 0:
            raise OSError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
    else:
        argv = [kind, *op["argv"]]
        out = effects.run(argv)
        if out.returncode != 0:
            raise OSError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")


def run_undo(
    ops: Sequence[dict[str, Any]], effects: Effects, *, dry_run: bool = False
) -> UndoResult:
    """Run ``ops`` in order.

    Args:
        ops: Undo ops (see module doc).
        effects: Where the changes go.
        dry_run: Only check and describe them (:func:`check_op`, each against what the
            ops before it would have left).

    Returns:
        What was done; on the first failure ``outcome`` is ``failed`` and ``error`` says
        why (ops after it are not run). A dry run's ``outcome`` is ``dry-run``, or
        ``would-fail`` with ``error`` naming the op that would fail and why.
    """
    if dry_run:
        return _dry_run(ops)
    res = UndoResult("ok")
    for op in ops:
        try:
            _run_op(op, effects)
        except (OSError, KeyError, ValueError, TypeError) as exc:
            res.outcome = "failed"
            try:
                what = describe(op)
            except (KeyError, TypeError, ValueError):
                what = repr(op)
            res.error = f"{what}: {exc}"
            return res
        res.done.append(describe(op))
    return res


def _dry_run(ops: Sequence[dict[str, Any]]) -> UndoResult:
    res = UndoResult("dry-run")
    view = _Overlay()
    for op in ops:
        try:
            check_op(op, view.lexists)
        except (OSError, KeyError, ValueError, TypeError) as exc:
            res.outcome = "would-fail"
            res.error = f"{describe(op)}: {exc}"
            return res
        view.did(op)
        said = describe(op)
        if op["op"] in ("crontab_restore", "at_requeue", *_COMMANDS):
            said += " (its answer is known only when it runs)"
        res.done.append(said)
    return res
