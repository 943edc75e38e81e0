"""Ship gates watched by the daemon: refuse non-finite weights where models are deployed.

Each tick, for every gate of ``ship_gates:``, :class:`ShipGateSource`:

1. lists the weights files in the deploy directory (the gate's ``patterns``, recursively,
   skipping the quarantine folder) and, for the freshness rule, in the training directory;
2. submits every file whose identity (:class:`FileKey`: size, mtime, ctime, inode) was
   the same at two polls at least ``settle_s`` apart (wall-clock seconds, default 10:
   ticks can come milliseconds apart) to the background :class:`VerifyWorker` (a file
   still being written is never verified half-way);
3. waits at most ``wait_s`` (0.25 s) for results, so a big file is reported on a later
   tick instead of stalling the loop; results are cached per file version, so each
   version is read once per daemon run;
4. reports ``poisoned-weights`` (critical) for a non-finite file and
   ``weights-unverified`` (high) for one that could not be fully verified (the gate
   fails closed), one finding per gate and path, open while the file is there; it
   resolves when the file is replaced by a finite one, removed or quarantined; a shard
   index is judged with the versions of its shards, and one whose shard is missing
   (quarantined included) is ``weights-unverified`` as incomplete; a ``poisoned-weights``
   message names the newest training output verified finite, verifying undecided ones
   when it opens, within :data:`LAST_GOOD_WAIT_S` and :data:`LAST_GOOD_BYTES` a tick;
5. with ``quarantine: true`` moves a non-finite file aside (:mod:`.quarantine`) and
   records a ``quarantine-weights`` action whose undo op renames it back;
6. with ``train_dir``, reports ``deploy-stale`` (high) when the newest finite training
   output is newer than every deployed file verified finite and has waited more than
   ``stale_after_s`` (a deployed NaN or unverifiable file does not count as deployed).
"""

from __future__ import annotations

import fnmatch
import os
import queue
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import Config
from ..config.ship_gates import QUARANTINE_DIRNAME, ShipGate
from ..faults import fault_point
from ..hostpaths import config_args
from ..hosttext import clip, code_span, own_code, plain_or_code
from ..logs import get_logger
from ..model import INDEX_SUFFIX, UNVERIFIABLE_SUFFIXES, WEIGHT_SUFFIXES, Finding, ScanResult
from ..state import ActionJournal, JournalError, StateDB
from .discover import index_shards
from .fanotify import Fanotify
from .freshness import human_duration, past_limit
from .opengate import Decision, OpenGate
from .quarantine import (
    QUARANTINE_SUFFIX,
    FileOps,
    QuarantineError,
    quarantine_file,
)
from .report import FileReport, Status
from .verifyworker import DEPLOY, TRAIN, FileKey, VerifyWorker

log = get_logger()

#: Longest a tick waits for verification results (seconds); slower files report later.
TICK_WAIT_S = 0.25
#: Bad tensor names listed in a finding's details.
MAX_NAMED_TENSORS = 10
#: Longest the opening of a ``poisoned-weights`` finding waits for training outputs to be
#: verified, newest first, so that its page names the newest good one (seconds) ...
LAST_GOOD_WAIT_S = 5.0
#: ... and the most bytes of training outputs it has verified for that (4 GiB: about
#: 0.5-2 s from the page cache here). What is left is verified in the background.
LAST_GOOD_BYTES = 4 << 30
#: Unverified training outputs a message names in its ``verify-weights`` command.
MAX_NAMED_OUTPUTS = 3


def _version(key: FileKey) -> list[int]:
    """What stays of a file's identity across a rename (into quarantine and back):
    size, mtime and inode (the rename changes its ctime)."""
    return [key.size_bytes, key.mtime_ns, key.ino]


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _shown(path: object) -> str:
    """A path from the host as a message names it: as it is when it is one plain word,
    else quoted (:func:`~watchdog.hosttext.plain_or_code`). Whoever wrote a weights file
    chose its name, and a name in the product's words could forge them."""
    return plain_or_code(str(path), 300)


def _arg(path: str) -> str:
    """A path as an argument of a command a message prints: shell-quoted, and quoted as
    code unless that is one plain word (:func:`_shown`)."""
    return plain_or_code(shlex.quote(path), 300)


@dataclass
class Listing:
    """Files of one directory that match a gate's patterns.

    Attributes:
        keys: Path → identity of every matching file (vanished files are left out).
        errors: Why parts of the directory could not be read.
        outside: Files that resolve outside the directory, through a symlinked folder
            or named by a shard index, with how they were reached (they
            are verified and reported, never quarantined: they are not the gate's files).
        shards: Shard index path → every shard path it names, present or not (an
            index's verdict depends on its shards as much as on its own bytes).
    """

    keys: dict[str, FileKey] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    outside: dict[str, str] = field(default_factory=dict)
    shards: dict[str, list[str]] = field(default_factory=dict)

    def basis(self, index: str) -> tuple[FileKey | None, ...]:
        """The versions of the shards ``index`` names (None: missing), as listed now."""
        return tuple(self.keys.get(s) for s in self.shards.get(index, ()))


def list_files(root: Path, patterns: Sequence[str], skip: Path | None = None) -> Listing:
    """Walk ``root`` for files matching ``patterns`` (case-insensitive globs; one with a
    ``/`` matches the path relative to ``root``). Symlinked folders and files are
    followed (their targets are verified); a folder reached twice (a symlink loop) is
    walked once. Quarantine folders and quarantined
    files are skipped. Every shard a listed ``*.index.json`` names is listed too,
    wherever it resolves (a loader follows the index through symlinked folders and
    ``..``), so each is verified as a file of its own.

    Args:
        root: Directory to walk.
        patterns: Globs from the gate.
        skip: A folder not to enter (the gate's quarantine folder).

    Returns:
        The matching files; unreadable folders are named in ``errors``.
    """
    out = Listing()
    pats = [p.lower() for p in patterns]
    skip_real = os.path.realpath(skip) if skip is not None else None

    def onerror(exc: OSError) -> None:
        out.errors.append(f"cannot read {_shown(exc.filename)}: {exc.strerror}")

    if not root.is_dir():
        out.errors.append(f"{_shown(root)} is not a directory")
        return out
    try:
        root_st = os.stat(root)
    except OSError as exc:
        out.errors.append(f"cannot stat {_shown(root)}: {exc.strerror}")
        return out
    walked = {(root_st.st_dev, root_st.st_ino)}
    # Symlinked folders are followed ("current -> releases/v7" is how deploys switch
    # atomically, and the loader follows it); a folder reached again (a symlink loop,
    # or a second link to it) is walked once, its files are listed already.
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=True):
        keep: list[str] = []
        for d in sorted(dirnames):
            sub = os.path.join(dirpath, d)
            if d == QUARANTINE_DIRNAME or os.path.realpath(sub) == skip_real:
                continue
            try:
                dst = os.stat(sub)
            except OSError as exc:
                out.errors.append(f"cannot stat {_shown(sub)}: {exc.strerror}")
                continue
            if (dst.st_dev, dst.st_ino) in walked:
                continue
            walked.add((dst.st_dev, dst.st_ino))
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.endswith(QUARANTINE_SUFFIX):
                continue
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix().lower()
            low = name.lower()
            if not any(fnmatch.fnmatchcase(rel if "/" in pat else low, pat) for pat in pats):
                continue
            try:
                out.keys[str(p)] = FileKey.of(p)
            except FileNotFoundError:
                continue  # vanished, or a dangling symlink: nothing to load
            except OSError as exc:
                out.errors.append(f"cannot stat {_shown(p)}: {exc.strerror}")
    real_root = os.path.realpath(root)
    for path in out.keys:
        real = os.path.realpath(path)
        if os.path.commonpath([real, real_root]) != real_root:
            parent = os.path.realpath(os.path.dirname(path))
            own_link = os.path.islink(path) and os.path.commonpath([parent, real_root]) == real_root
            out.outside[path] = (
                f"a file link to {_shown(real)}"
                if own_link
                else "reached through a symlinked folder"
            )
    _add_index_shards(root, out)
    return out


def _add_index_shards(root: Path, out: Listing) -> None:
    real_root = os.path.realpath(root)
    for path in [p for p in out.keys if p.endswith(INDEX_SUFFIX)]:
        # Only the index JSON is read here, every tick; the index's own verification
        # reports missing shards and tensors.
        named = index_shards(Path(path))
        out.shards[path] = [str(s) for s in named]
        for shard in named:
            if str(shard) not in out.keys:
                try:
                    out.keys[str(shard)] = FileKey.of(shard)
                except OSError:
                    continue  # missing: the index's own verification reports it
            real = os.path.realpath(shard)
            if os.path.commonpath([real, real_root]) != real_root:
                out.outside[str(shard)] = "named by a shard index"


def _suffix(path: str) -> str:
    return os.path.splitext(path)[1].lower()


#: The kinds of finding a gate makes (its :meth:`ShipGateSource.covers`).
GATE_KINDS = frozenset(
    {"poisoned-weights", "weights-unverified", "deploy-stale", "ship-gate-degraded",
     "weights-open-refused"}
)  # fmt: skip


class ShipGateSource:
    """The daemon's finding source for one ``ship_gates:`` entry.

    Args:
        gate: The gate's settings.
        db: State database (the quarantine action is recorded there).
        worker: Verification thread, shared by all gates.
        ops: File-system side effects (quarantine).
        wait_s: Longest a tick waits for verification results.
        open_gate: Builds the open-time gate of an ``enforce: open|audit`` gate
            (default :func:`make_open_gate`; tests and hosts without fanotify).
        cli_args: What the commands its findings print carry after the verb (the
            daemon's `` --config PATH``: :func:`watchdog.hostpaths.config_args`).
        last_good_wait_s: Longest the opening of a ``poisoned-weights`` finding waits
            for training outputs to be verified so it can name the newest good one.
        last_good_bytes: The most bytes of training outputs verified for that.
    """

    def __init__(
        self,
        gate: ShipGate,
        db: StateDB,
        worker: VerifyWorker,
        *,
        ops: FileOps | None = None,
        wait_s: float = TICK_WAIT_S,
        open_gate: Callable[[ShipGate, Callable[[Decision], None]], OpenGate] | None = None,
        cli_args: str = "",
        last_good_wait_s: float = LAST_GOOD_WAIT_S,
        last_good_bytes: int = LAST_GOOD_BYTES,
    ) -> None:
        self.gate = gate
        self.last_good_wait_s = last_good_wait_s
        self.last_good_bytes = last_good_bytes
        self.cli_args = cli_args
        self.name = f"ship-gate {gate.name}"
        self.db = db
        self.worker = worker
        self.ops = ops or FileOps()
        self.wait_s = wait_s
        self.deploy_dir = Path(gate.deploy_dir)
        self.train_dir = Path(gate.train_dir) if gate.train_dir else None
        self.quarantine_dir = Path(gate.quarantine_path)
        self._results: dict[FileKey, FileReport] = {}
        self.settle_s = gate.settle_s
        # path -> (version, first seen: tick time, monotonic time)
        self._seen: dict[str, tuple[FileKey, float, float]] = {}
        self._refused: dict[str, Finding] = {}  # path -> finding of its last bad version
        self._quarantine_failed: dict[FileKey, str] = {}
        # Index version → the versions of its shards its verdict was reached on, and the
        # same for indexes being checked now.
        self._basis: dict[FileKey, tuple[FileKey | None, ...]] = {}
        self._inflight: dict[FileKey, tuple[FileKey | None, ...]] = {}
        self._moved: dict[str, tuple[str, int]] = {}  # path → (where, action id) this run
        self._absent: dict[str, tuple[float, float]] = {}  # missing shard → since when
        self._stale: Finding | None = None  # the open deploy-stale finding, if any
        self._outside: dict[str, str] = {}  # files resolving outside deploy_dir, and how
        self._make_open_gate = open_gate or make_open_gate
        self.open_gate: OpenGate | None = None
        self._open_said: tuple[str, str] | None = None  # the state last logged
        self._decisions: queue.SimpleQueue[Decision] = queue.SimpleQueue()
        self._open_refused: dict[str, tuple[Decision, Finding]] = {}  # path -> last refusal
        # This tick's listings and settled versions (what _last_good walks and verifies),
        # and the refused deploy versions whose last good output was searched for already.
        self._tick: tuple[Listing, Listing, set[FileKey]] = (Listing(), Listing(), set())
        self._searched: set[FileKey] = set()
        self._budget: list[float] | None = None  # this tick's [deadline, bytes left]

    # -- settling ----------------------------------------------------------------------

    def _settled(self, keys: dict[str, FileKey], now: float) -> set[FileKey]:
        """Versions seen unchanged at two polls at least ``settle_s`` apart.

        Measured on the tick's wall clock (``now``), or on the monotonic clock when that
        says more time passed (a wall clock set back must not keep a file unjudged for
        as long as it went back): time, not the number of polls, since early ticks can
        come milliseconds apart.
        """
        mono = time.monotonic()
        seen: dict[str, tuple[FileKey, float, float]] = {}
        settled: set[FileKey] = set()
        for path, key in keys.items():
            prev = self._seen.get(path)
            if prev is None or prev[0] != key:
                seen[path] = (key, now, mono)
                continue
            seen[path] = prev
            if self._quiet(prev[1:], now, mono):
                settled.add(key)
        self._seen = seen
        return settled

    def _quiet(self, since: tuple[float, float], now: float, mono: float | None = None) -> bool:
        """Has ``settle_s`` passed since ``since`` (tick time, monotonic time)?"""
        elapsed = (mono if mono is not None else time.monotonic()) - since[1]
        return max(now - since[0], elapsed) >= self.settle_s

    def covers(self, fingerprint: str) -> bool:
        """True for the stored fingerprint of a finding this gate makes
        (``poisoned-weights:GATE:PATH`` and the like): while its tick raises they stay
        open instead of resolving (the daemon's loop), so a gate that fails never reads as
        a fixed file, nor pages again when it answers."""
        kind, _, rest = fingerprint.partition(":")
        return kind in GATE_KINDS and rest.startswith(f"{self.gate.name}:")

    # -- one tick ----------------------------------------------------------------------

    def findings(self, now: float, result: ScanResult | None = None) -> list[Finding]:
        """Findings of this gate that are open now (see the module docstring).

        Args:
            now: POSIX time of the tick.
            result: The tick's scan (unused: gates look at files, not processes).

        Returns:
            ``poisoned-weights``, ``weights-unverified``, ``deploy-stale`` and
            ``ship-gate-degraded`` findings.
        """
        deploy = list_files(self.deploy_dir, self.gate.patterns, self.quarantine_dir)
        self._outside = deploy.outside
        train = Listing()
        if self.train_dir is not None:
            train = list_files(self.train_dir, self.gate.patterns, self.quarantine_dir)
            train.keys = {p: k for p, k in train.keys.items() if _suffix(p) in WEIGHT_SUFFIXES}
        settled = self._settled({**deploy.keys, **train.keys}, now)
        self._tick = (deploy, train, settled)
        self._budget = None
        self._collect(deploy)  # results finished since the last tick, before submitting
        self._rejudge_indexes(deploy)
        for path, key in deploy.keys.items():
            if key in settled and key not in self._results:
                self._submit(path, key, deploy, settled)
        if self.train_dir is not None:
            self._submit_train(train, self._deployed(deploy), settled)
        if self.worker.pending():
            self.worker.wait(self.wait_s)
        self._collect(deploy)
        present = {*deploy.keys.values(), *train.keys.values()}
        self._results = {k: r for k, r in self._results.items() if k in present}
        self._basis = {k: b for k, b in self._basis.items() if k in present}
        self._inflight = {k: b for k, b in self._inflight.items() if k in present}
        self._quarantine_failed = {k: e for k, e in self._quarantine_failed.items() if k in present}

        self._moved = {p: m for p, m in self._moved.items() if p not in deploy.keys}

        out = self._deploy_findings(deploy, settled, now)
        self._searched &= set(deploy.keys.values())
        if self.train_dir is not None:
            out.extend(self._freshness(train, deploy, now))
        out.extend(self._degraded(deploy, train))
        out.extend(self._at_open(deploy, now))
        return out

    # -- shard indexes -----------------------------------------------------------------

    def _submit(self, path: str, key: FileKey, deploy: Listing, settled: set[FileKey]) -> None:
        """Queue one deploy file; an index with the versions of its shards as listed now
        (its verdict holds for those only), once each of them has settled too (a missing
        shard is the incompleteness check's: :meth:`_deploy_findings`)."""
        if path.endswith(INDEX_SUFFIX):
            basis = deploy.basis(path)
            if key in self._inflight or not all(b in settled for b in basis):
                return  # being checked (judged against its basis), or shards in motion
            self._inflight[key] = basis
        self.worker.submit(self.name, key, DEPLOY)

    def _collect(self, deploy: Listing) -> None:
        """Take the worker's finished results. An index's result counts only while its
        shards are the versions it was checked against (else it is checked again)."""
        for key, report in self.worker.collect(self.name).items():
            basis = self._inflight.pop(key, None)
            if report is None:
                continue
            if key.path.endswith(INDEX_SUFFIX):
                if basis is None or basis != deploy.basis(key.path):
                    continue
                self._basis[key] = basis
            self._results[key] = report

    def _rejudge_indexes(self, deploy: Listing) -> None:
        """Forget the verdict of every index one of whose shards changed, appeared or went
        (quarantined, removed, replaced): the index file is the same, its model is not."""
        for path, key in deploy.keys.items():
            stale = self._basis.get(key) != deploy.basis(path)
            if key in self._results and path.endswith(INDEX_SUFFIX) and stale:
                del self._results[key]

    def _incomplete(self, key: FileKey, shards: list[str], missing: list[str]) -> Finding:
        """``weights-unverified`` for an index some of whose shards are gone: the model it
        describes cannot load as shipped (a quarantined shard is named with its undo)."""
        gate = self.gate.name
        said = []
        for shard in missing:
            moved = self._moved.get(shard)
            said.append(
                _shown(shard)
                if moved is None
                else f"{_shown(shard)} (quarantined to {_shown(moved[0])}; undo: rogue-watchdog"
                f" undo{self.cli_args} {moved[1]})"
            )
        verb = "is" if len(missing) == 1 else "are"
        error = f"{len(missing)} of {len(shards)} shards it names {verb} missing: " + ", ".join(
            said
        )
        return Finding(
            kind="weights-unverified",
            severity="high",
            message=(
                f"ship gate {gate}: {_shown(key.path)} is incomplete, so the model is refused:"
                f" {error}"
            ),
            details={
                "fingerprint": f"{gate}:{key.path}",
                "gate": gate,
                "path": key.path,
                "format": "weights-index",
                "status": Status.NOT_VERIFIED.value,
                "size_bytes": key.size_bytes,
                "mtime": _when(key.mtime_ns / 1e9),
                "missing_shards": missing,
                "error": error,
            },
        )

    # -- enforcement at open -----------------------------------------------------------

    def enforcement(self) -> tuple[str, str]:
        """``(state, why)`` of refusal at open: ``enforcing``, ``auditing``, ``not enforcing``."""
        if self.gate.enforce == "off":
            return "not enforcing", "enforce: off (the after-the-fact gate only)"
        if self.open_gate is None:
            return "not enforcing", "not started yet"
        return self.open_gate.state()

    def close(self) -> None:
        """Stop the open-time listener, if any (its marks go: opens proceed ungated)."""
        if self.open_gate is not None:
            self.open_gate.stop()
            self.open_gate = None

    def _at_open(self, deploy: Listing, now: float) -> list[Finding]:
        """Start or refresh the open gate; its refusals and a 'not enforcing' finding."""
        if self.gate.enforce == "off":
            return []
        if self.open_gate is None:
            self.open_gate = self._make_open_gate(self.gate, self._decisions.put)
            self.open_gate.start()
        else:
            self.open_gate.refresh()
        state = self.open_gate.state()
        if state != self._open_said:
            log_at = log.warning if state[0] == "not enforcing" else log.info
            log_at("ship-gate-open", gate=self.gate.name, state=state[0], why=state[1])
            self._open_said = state
        while not self._decisions.empty():
            d = self._decisions.get()
            self._open_refused[d.path] = (d, self._open_finding(d, now))
        self._open_refused = {
            p: df for p, df in self._open_refused.items() if self._still_refused(p, deploy)
        }
        out = [f for _d, f in self._open_refused.values()]
        if state[0] == "not enforcing":
            out.append(
                Finding(
                    kind="ship-gate-degraded",
                    severity="warning",
                    message=(
                        f"ship gate {self.gate.name}: not enforcing at open ({state[1]});"
                        " the after-the-fact gate still runs"
                    ),
                    details={
                        "fingerprint": f"{self.gate.name}:enforce-open",
                        "gate": self.gate.name,
                        "enforce": self.gate.enforce,
                        "why": state[1],
                    },
                )
            )
        return out

    def _still_refused(self, path: str, deploy: Listing) -> bool:
        """A refusal at open stays open until the path is gone or verified finite."""
        key = deploy.keys.get(path)
        if key is None:
            return os.path.lexists(path)
        report = self._results.get(key)
        return report is None or not report.ok

    def _open_finding(self, d: Decision, now: float) -> Finding:
        verb = "refused" if d.refused else "would have refused (audit)"
        return Finding(
            kind="weights-open-refused",
            severity="critical" if d.refused else "warning",
            message=(
                f"ship gate {self.gate.name}: {verb} a read open of {_shown(d.path)} by PID"
                f" {d.opener.get('pid')} (uid {d.opener.get('uid', '?')},"
                f" {code_span(clip(str(d.opener.get('command', '?')), 200))}):"
                f" {code_span(clip(d.reason, 400))}"
            ),
            details={
                "fingerprint": f"{self.gate.name}:open:{d.path}",
                "gate": self.gate.name,
                "path": d.path,
                "opener": d.opener,
                "reason": d.reason,
                "refused": d.refused,
                "at": _when(now),
            },
        )

    # -- deploy directory --------------------------------------------------------------

    def _deploy_findings(self, deploy: Listing, settled: set[FileKey], now: float) -> list[Finding]:
        out: list[Finding] = []
        refused: dict[str, Finding] = {}
        # Indexes last: a shard quarantined in this loop makes its index incomplete now.
        order = sorted(deploy.keys.items(), key=lambda pk: pk[0].endswith(INDEX_SUFFIX))
        absent: dict[str, tuple[float, float]] = {}
        for path, key in order:
            shards = deploy.shards.get(path, [])
            missing = [s for s in shards if not os.path.exists(s)]
            for s in missing:
                absent[s] = self._absent.get(s) or absent.get(s) or (now, time.monotonic())
            # An index still settling may be a deploy in progress (index first, shards
            # after), and a shard gone for less than settle_s may be one being replaced
            # (rm, then cp): judged once settled, like every file. A shard this gate
            # quarantined is gone for good: at once.
            gone = [s for s in missing if s in self._moved or self._quiet(absent[s], now)]
            if missing and key in settled and (gone or path in self._refused):
                refused[path] = self._incomplete(key, shards, missing)
                out.append(refused[path])
                continue
            report = self._results.get(key)
            if report is None:
                # A new version not verified yet: a refused file stays refused until its
                # replacement is proven finite.
                if path in self._refused:
                    refused[path] = self._refused[path]
                    out.append(refused[path])
                continue
            if report.ok:
                continue
            finding = self._refusal(key, report, now)
            out.append(finding)
            if os.path.lexists(path):
                refused[path] = finding
        self._refused = refused
        self._absent = absent
        return out

    def _refusal(self, key: FileKey, report: FileReport, now: float) -> Finding:
        gate = self.gate.name
        details: dict[str, Any] = {
            "fingerprint": f"{gate}:{key.path}",
            "gate": gate,
            "path": key.path,
            "format": report.format,
            "status": report.status.value,
            "size_bytes": key.size_bytes,
            "mtime": _when(key.mtime_ns / 1e9),
            "totals": report.totals(),
            "bad_tensors": [t.name for t in report.bad_tensors[:MAX_NAMED_TENSORS]],
            "error": report.error,
        }
        if report.status is Status.NOT_VERIFIED:
            return Finding(
                kind="weights-unverified",
                severity="high",
                message=(
                    f"ship gate {gate}: {_shown(key.path)} could not be verified, so it is"
                    f" refused: {code_span(clip(str(report.error), 400))}"
                ),
                details=details,
            )
        t = report.totals()
        message = (
            f"ship gate {gate}: {_shown(key.path)} holds non-finite weights:"
            f" {t['bad_tensors']} of {t['tensors']} tensors non-finite"
            f" ({t['nan']} NaN, {t['posinf']} +Inf, {t['neginf']} -Inf)"
        )
        if report.error:
            message += f" and was not fully verified: {code_span(clip(report.error, 400))}"
        moved = False
        forced = self._forced_back(key)
        if self.gate.quarantine and key.path in self._outside and not self._own_link(key.path):
            how = self._outside[key.path]
            message += f"; not moved: it lies outside {self.deploy_dir} ({how})"
        elif self.gate.quarantine:
            message += self._quarantine(key, details, now, message)
            moved = "quarantined_to" in details
        message += self._next_steps(key, details, moved, paged=forced is None)
        if forced is not None:
            # Put back by `undo --force` past its refusal, as it was: the person who
            # did it was told it would be quarantined again. Recorded, not paged twice.
            details["forced_back_by"] = forced
            message += (
                f"; this very file was put back by {own_code('rogue-watchdog undo --force')} "
                "(action "
                f"{forced}) although it failed this gate: not paged again"
            )
        return Finding(
            kind="poisoned-weights",
            severity="info" if forced is not None else "critical",
            message=message,
            details=details,
        )

    def _forced_back(self, key: FileKey) -> int | None:
        """The id of the ``undo --force`` that put this very version of ``key`` back
        from this gate's quarantine past the undo's refusal, or None.

        Fresh-user hour (issue 33, F): undoing a quarantine put the NaN file back and
        the gate paged it again, critical, 5 s later. ``undo`` now refuses that; one
        who insists has been told, and is not paged for the same file version again.
        """
        try:
            recent = self.db.actions(200)
        except Exception:  # an unreadable trail: page as always
            return None
        forced = {
            a.details.get("undid"): a.id
            for a in recent
            if a.kind == "undo" and a.outcome == "ok" and a.details.get("forced")
        }
        for a in recent:
            if (
                a.kind == "quarantine-weights"
                and a.target == key.path
                and a.undone_at is not None
                and a.details.get("version") == _version(key)
                and a.id in forced
            ):
                return forced[a.id]
        return None

    def _next_steps(
        self, key: FileKey, details: dict[str, Any], moved: bool, *, paged: bool = True
    ) -> str:
        """What a person does next about a poisoned file, appended to the finding: move
        it aside (unless the quarantine did), then deploy good weights through ``ship``,
        naming the newest training output verified finite when the gate knows one.

        The page is the person's only prompt (fresh user H, issue 33: it resolved 5 s
        after it opened, quarantined, and never named the good output), so when the
        finding opens, undecided training outputs are verified now, within a bound
        (:meth:`_last_good`); what the bound leaves is said, never guessed.
        """
        steps = []
        if not moved:
            steps.append(
                f"move it out of {self.deploy_dir} before anything loads it (quarantine: true "
                f"on gate {self.gate.name} has the daemon do that, undoably)"
            )
        dst = _arg(key.path)
        first = paged and key not in self._searched
        self._searched.add(key)
        good, undecided, bad = self._last_good(first)
        if undecided:
            details["train_unverified"] = [k.path for k in undecided]
        if good is not None:
            details["last_good"] = good.path
            so_far = " so far" if undecided else ""
            steps.append(
                f"the newest training output verified finite{so_far} is {_shown(good.path)} "
                f"({_when(good.mtime_ns / 1e9)}); deploy it with: rogue-watchdog ship "
                f"{_arg(good.path)} {dst}"
            )
        else:
            none_good = (
                f"no training output in {self.train_dir} verifies finite ({bad} checked); "
                if bad and not undecided
                else ""
            )
            steps.append(
                f"{none_good}deploy the last good checkpoint to {dst} through "
                f"{own_code('rogue-watchdog ship')} (it copies only weights that verify finite; "
                f"{own_code('rogue-watchdog verify-weights')} tells whether a checkpoint does)"
            )
        if undecided:
            n = len(undecided)
            newer = "newer " if good is not None else ""
            named = " ".join(_arg(k.path) for k in undecided[:MAX_NAMED_OUTPUTS])
            more = f" (and {n - MAX_NAMED_OUTPUTS} more)" if n > MAX_NAMED_OUTPUTS else ""
            steps.append(
                f"{n} {newer}training output{'s' if n > 1 else ''} in {self.train_dir} "
                f"{'are' if n > 1 else 'is'} not verified yet, so "
                f"{'it may not be the newest good one' if good else 'none is named'}; "
                f"check: rogue-watchdog verify-weights {named}{more}"
            )
        return "; next: " + "; ".join(steps)

    def _last_good(self, verify_now: bool) -> tuple[FileKey | None, list[FileKey], int]:
        """The newest training output (``train_dir``) verified finite, walking them newest
        first from the gate's results.

        With ``verify_now`` an undecided, settled output is verified on the spot through
        the verification thread (its results are the gate's cache: nothing is verified
        twice), as long as the tick's ``last_good_wait_s`` and ``last_good_bytes`` last
        (one budget per tick, shared by the findings opening in it); otherwise
        (or once they are spent) the newest undecided one is queued for the background,
        so a later tick knows it. A file still being written is never verified.

        Returns:
            ``(good, undecided, bad)``: the newest output verified finite (None: none
            known), the outputs newer than it not verified yet, newest first, and how
            many newer than it were verified not finite.
        """
        if self.train_dir is None:
            return None, [], 0
        deploy, train, settled = self._tick
        if verify_now and self._budget is None:
            # One budget a tick, however many files open findings in it (ten poisoned
            # shards must not hold the tick ten times as long).
            self._budget = [time.monotonic() + self.last_good_wait_s, self.last_good_bytes]
        budget = self._budget if verify_now and self._budget is not None else [0.0, 0]
        queued = False
        undecided: list[FileKey] = []
        bad = 0
        for key in sorted(train.keys.values(), key=lambda k: (k.mtime_ns, k.path), reverse=True):
            report = self._results.get(key)
            if report is None and key in settled:
                left = budget[0] - time.monotonic()
                if left > 0 and key.size_bytes <= budget[1]:
                    budget[1] -= key.size_bytes
                    self.worker.submit(self.name, key, DEPLOY)
                    self.worker.wait_for(self.name, key, left)
                    self._collect(deploy)
                    report = self._results.get(key)
                    queued = queued or report is None  # still being verified
                elif not queued:
                    self.worker.submit(self.name, key, TRAIN)
                    queued = True
            if report is None:
                undecided.append(key)
            elif report.ok:
                return key, undecided, bad
            else:
                bad += 1
        return None, undecided, bad

    def _own_link(self, path: str) -> bool:
        """Is ``path`` a symbolic link whose own entry lies in the deploy directory?

        Such a link (to a training output, or a Hugging Face blob) is renamed by the
        quarantine, never its target; a name reached through a symlinked folder is not:
        renaming it would move a file in the folder the link points to.
        """
        if not os.path.islink(path):
            return False
        real_root = os.path.realpath(self.deploy_dir)
        parent = os.path.realpath(os.path.dirname(path))
        return os.path.commonpath([parent, real_root]) == real_root

    def _quarantine(
        self, key: FileKey, details: dict[str, Any], now: float, message: str = ""
    ) -> str:
        """Move ``key`` aside once; returns the text appended to the finding's message
        (``message``: the finding's message so far, recorded with the action)."""
        failed = self._quarantine_failed.get(key)
        if failed is not None:
            details["quarantine_error"] = failed
            return f"; quarantine failed: {failed}"
        facts = {
            "gate": self.gate.name, "path": key.path, "size_bytes": key.size_bytes,
            "totals": details["totals"], "fingerprint": details["fingerprint"],
            "message": message, "version": _version(key),
        }  # fmt: skip
        try:
            # Written before the move (issue 32, case 4: a daemon killed between the
            # rename and its record left a model in quarantine with no finding, no
            # alert and no undo; the next start finds this record and finishes it).
            journal = ActionJournal.begin(self.db, "daemon", "quarantine-weights", key.path, facts)
        except JournalError as exc:
            # No action without a record: the file stays (and stays refused).
            text = f"not moved: {exc}"
            details["quarantine_error"] = text
            log.error("weights-quarantine-failed", gate=self.gate.name, path=key.path, error=text)
            return f"; quarantine failed: {text}"
        fault_point("quarantine:begun")
        try:
            moved = quarantine_file(
                key, self.deploy_dir, self.quarantine_dir, now, self.ops, journal
            )
        except QuarantineError as exc:
            text = exc.strerror or str(exc)
            self._quarantine_failed[key] = text
            details["quarantine_error"] = text
            log.error("weights-quarantine-failed", gate=self.gate.name, path=key.path, error=text)
            journal.finish("failed", {**facts, "error": text})
            return f"; quarantine failed: {text}"
        # Logged before the audit record is finished, so the log says where the file
        # went even if recording fails.
        log.warning(
            "weights-quarantined", gate=self.gate.name, path=key.path,
            moved_to=str(moved.moved_to),
        )  # fmt: skip
        undo = [{"op": "rename", "from": str(moved.original), "to": str(moved.moved_to)}]
        journal.finish("done", {**facts, "moved_to": str(moved.moved_to)}, undo=undo)
        details["quarantined_to"] = str(moved.moved_to)
        details["action_id"] = journal.action_id
        self._moved[key.path] = (str(moved.moved_to), journal.action_id)
        return (
            f"; moved to {_shown(moved.moved_to)} (undo: rogue-watchdog undo{self.cli_args}"
            f" {journal.action_id})"
        )

    # -- freshness ---------------------------------------------------------------------

    def _deployed(self, deploy: Listing) -> tuple[str, FileKey] | None:
        """The newest deployed weights file verified finite (shard indexes do not count).

        A file that is non-finite or could not be verified is not "deployed": it must
        not be served, so the output it was meant to replace still waits.
        """
        files = [
            (p, k)
            for p, k in deploy.keys.items()
            if (_suffix(p) in WEIGHT_SUFFIXES or _suffix(p) in UNVERIFIABLE_SUFFIXES)
            and (r := self._results.get(k)) is not None
            and r.ok
        ]
        return max(files, key=lambda pk: pk[1].mtime_ns, default=None)

    def _undecided_deploy(self, deploy: Listing, newer_than_ns: int) -> bool:
        """Is a deployed weights file at least that new still waiting for its verdict?"""
        return any(
            k.mtime_ns >= newer_than_ns and k not in self._results
            for p, k in deploy.keys.items()
            if _suffix(p) in WEIGHT_SUFFIXES or _suffix(p) in UNVERIFIABLE_SUFFIXES
        )

    @staticmethod
    def _candidates(train: Listing, deployed: tuple[str, FileKey] | None) -> list[FileKey]:
        """Training outputs newer than every good deployed file, newest first."""
        floor = deployed[1].mtime_ns if deployed else -1
        newer = [k for k in train.keys.values() if k.mtime_ns > floor]
        return sorted(newer, key=lambda k: (k.mtime_ns, k.path), reverse=True)

    def _submit_train(
        self, train: Listing, deployed: tuple[str, FileKey] | None, settled: set[FileKey]
    ) -> None:
        # Only the newest undecided output is verified at a time: an older one matters
        # only if every newer one turns out bad.
        for key in self._candidates(train, deployed):
            report = self._results.get(key)
            if report is not None:
                if report.ok:
                    return
                continue
            if key in settled:
                self.worker.submit(self.name, key, TRAIN)
                return

    def _freshness(self, train: Listing, deploy: Listing, now: float) -> list[Finding]:
        deployed = self._deployed(deploy)
        good = next(
            (k for k in self._candidates(train, deployed) if (r := self._results.get(k)) and r.ok),
            None,
        )
        if good is not None and self._undecided_deploy(deploy, good.mtime_ns):
            # A deployed file as new as the output is still being verified: it may be
            # the deploy of that output. Keep what was open, open nothing new.
            return [self._stale] if self._stale is not None else []
        self._stale = None if good is None else self._stale_finding(good, deployed, now)
        return [self._stale] if self._stale is not None else []

    def _stale_finding(
        self, good: FileKey, deployed: tuple[str, FileKey] | None, now: float
    ) -> Finding | None:
        t1 = good.mtime_ns / 1e9
        waited_s = now - t1
        if waited_s <= self.gate.stale_after_s:
            return None
        gate = self.gate.name
        waited, limit = past_limit(waited_s, self.gate.stale_after_s)
        if deployed is None:
            what = (
                f"has waited {waited} (limit {limit}) and nothing verified"
                f" finite is deployed in {self.deploy_dir}"
            )
        else:
            t2 = deployed[1].mtime_ns / 1e9
            what = (
                f"is {human_duration(t1 - t2)} newer than deployed {_shown(deployed[0])}"
                f" ({_when(t2)});"
                f" it has waited {waited} (limit {limit})"
            )
        return Finding(
            kind="deploy-stale",
            severity="high",
            message=(
                f"ship gate {gate}: the deploy step did not run: newest good output"
                f" {_shown(good.path)} ({_when(t1)}) {what}"
            ),
            details={
                "fingerprint": f"{gate}:{self.train_dir}",
                "gate": gate,
                "train_path": good.path,
                "train_mtime": _when(t1),
                "deploy_path": deployed[0] if deployed else None,
                "deploy_mtime": _when(deployed[1].mtime_ns / 1e9) if deployed else None,
                "waited_s": round(waited_s, 1),
                "stale_after_s": self.gate.stale_after_s,
            },
        )

    # -- health ------------------------------------------------------------------------

    def _degraded(self, deploy: Listing, train: Listing) -> list[Finding]:
        """A gate that cannot see its directories would otherwise pass silently."""
        gate = self.gate.name
        out = []
        for what, listing, root in (
            ("deploy_dir", deploy, self.deploy_dir),
            ("train_dir", train, self.train_dir),
        ):
            if not listing.errors:
                continue
            out.append(
                Finding(
                    kind="ship-gate-degraded",
                    severity="warning",
                    message=f"ship gate {gate}: {what} not fully checked: "
                    + "; ".join(listing.errors[:3]),
                    details={
                        "fingerprint": f"{gate}:{root}",
                        "gate": gate,
                        "errors": listing.errors[:20],
                    },
                )
            )
        return out


def make_open_gate(
    gate: ShipGate,
    on_decision: Callable[[Decision], None],
    kernel: Callable[[], Fanotify] = Fanotify,
) -> OpenGate:
    """The fanotify open gate of ``gate`` (started by the caller).

    Args:
        gate: The gate's settings (``enforce``, ``open_timeout_s``, folders, patterns).
        on_decision: Called with each refusal (from the listener's threads).
        kernel: The fanotify group's factory (a host without it: tests).
    """
    from .api import verify_file
    from .scan import ScanContext

    ctx = ScanContext.default(None, mapped=False)  # pread: a file cut short is not a SIGBUS
    return OpenGate(
        gate.name,
        gate.enforce,
        [Path(gate.deploy_dir)],
        [p for p in gate.patterns if not p.endswith(INDEX_SUFFIX)],
        lambda path, name: verify_file(path, ctx, name=name),
        timeout_s=gate.open_timeout_s,
        on_decision=on_decision,
        skip=Path(gate.quarantine_path),
        kernel=kernel,
    )


def build_ship_gate_sources(
    config: Config, db: StateDB, worker: VerifyWorker | None = None
) -> list[ShipGateSource]:
    """One finding source per ``ship_gates:`` entry, sharing one verification thread.

    Args:
        config: Validated configuration.
        db: The daemon's state database.
        worker: Verification thread to share; None creates one (started on first use;
            pass ``sources[0].worker`` to ``Daemon(workers=...)`` to stop it cleanly).

    Returns:
        The sources, in configuration order (empty without gates).
    """
    shared = worker or VerifyWorker()
    cli_args = config_args(config.source)
    return [ShipGateSource(gate, db, shared, cli_args=cli_args) for gate in config.ship_gates]
