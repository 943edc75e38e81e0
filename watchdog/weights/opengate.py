"""Ship gates enforced at ``open(2)``: no process reads a non-finite version of a gated file.

The daemon's after-the-fact gate verifies a deploy directory and quarantines what is
non-finite, but a reader that opens the file in between serves NaN. With
``enforce: open`` the daemon holds a fanotify ``FAN_CLASS_CONTENT`` group
(:mod:`watchdog.weights.fanotify`) with ``FAN_OPEN_PERM`` marks on the gated folder, each
subfolder, and whatever a listed name resolves to (a file or folder reached through a
link, a Hugging Face cache blob). Every open of a marked file waits for this listener:

* the daemon's own opens (same process) are allowed at once: its verifier reads marked
  files, and the listener must never wait for itself;
* an open for writing (``O_WRONLY``/``O_RDWR``/``O_CREAT``/``O_TRUNC``, read from
  ``/proc/PID/syscall`` while the opener waits) is allowed: a bad file can always be
  replaced;
* a file that no gate pattern names (``config.json``) is allowed;
* a read open of a version (device, inode, size, mtime, ctime) already verified finite is
  allowed; one verified non-finite or not verifiable is refused (``EPERM``);
* an unverified version is verified now, through the event's own descriptor
  (``/proc/self/fd/N`` of a duplicate: the same inode, whatever the name points at by
  then), the opener waiting, for at most ``timeout_s``; past it the open is refused and
  the refusal says so.

In ``audit`` mode nothing is refused: each would-be refusal is reported. The kernel fails
open when the listener is gone, so :meth:`OpenGate.state` says "not enforcing" (and why)
whenever the thread is not answering.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import select
import shlex
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import hosttext
from .fanotify import FAN_OPEN_PERM, Event, Fanotify
from .report import FileReport

Identity = tuple[int, int, int, int, int]

#: open(2) flags that make an open a writer's (fcntl.h, the same on every Linux arch).
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
#: x86_64 and aarch64 syscall numbers: (flags argument index) per open-like call.
_OPEN_CALLS: dict[str, dict[int, int | None]] = {
    "x86_64": {2: 1, 257: 2, 85: None},  # open(path, flags), openat(dir, path, flags), creat
    "aarch64": {56: 2},  # openat
}


_UNKNOWN = "unknown"  # a verdict lookup's default (a real verdict is None or a reason)

#: File versions whose verdict is kept (about 100 bytes each); the oldest goes first.
_MAX_VERDICTS = 65536


def identity(st: os.stat_result) -> Identity:
    """The version of a file: device, inode, size, mtime_ns, ctime_ns."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def opener_writes(pid: int, proc: Path = Path("/proc"), machine: str | None = None) -> bool:
    """True when the process ``pid`` waits in an open for writing.

    Reads ``/proc/PID/syscall`` (proc(5): the syscall number and its arguments in hex,
    while the process is blocked in it). Anything unreadable counts as a read open, so
    the file is judged.
    """
    arch = machine or os.uname().machine
    try:
        fields = (proc / str(pid) / "syscall").read_text().split()
        nr = int(fields[0])
    except (OSError, ValueError, IndexError):
        return False
    calls = _OPEN_CALLS.get(arch, {})
    if nr not in calls:
        return False
    index = calls[nr]
    if index is None:  # creat(2) always writes
        return True
    try:
        flags = int(fields[1 + index], 16)
    except (ValueError, IndexError):
        return False
    return bool(flags & _WRITE_FLAGS)


def describe_opener(pid: int, proc: Path = Path("/proc")) -> dict[str, object]:
    """PID, user id and command line of an opener, host text escaped (hosttext)."""
    out: dict[str, object] = {"pid": pid}
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                out["uid"] = int(line.split()[1])
                break
        raw = (proc / str(pid) / "cmdline").read_bytes()
        argv = [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a]
        out["command"] = hosttext.safe_text(shlex.join(argv))
    except (OSError, ValueError, IndexError):
        out.setdefault("command", "(gone)")
    return out


@dataclass(frozen=True)
class Decision:
    """One answered open that was (or in audit mode would have been) refused.

    Attributes:
        path: The name opened (``readlink`` of the event's descriptor).
        opener: :func:`describe_opener` of the opener.
        reason: Why: the file's report summary, or the time limit.
        refused: True when the open failed (EPERM); False in audit mode.
    """

    path: str
    opener: dict[str, object]
    reason: str
    refused: bool


@dataclass
class _Pending:
    """Opens waiting for the verification of one file version."""

    events: list[tuple[Event, str]] = field(default_factory=list)
    deadline: float = 0.0


class OpenGate:
    """A fanotify listener that gates read opens of one ship gate's files.

    Args:
        name: The ship gate's name.
        mode: ``"open"`` (refuse) or ``"audit"`` (report only).
        roots: Gated folders (each subfolder is marked too).
        patterns: Globs of the gated file names (as the ship gate's ``patterns``).
        verify: ``verify(path, name) -> FileReport`` for ``path`` = ``/proc/self/fd/N``;
            ``name`` gives the suffix.
        timeout_s: Longest an opener waits for a verification.
        on_decision: Called (from the listener's threads) with each refusal.
        kernel: Factory of the fanotify group (tests, hosts without it).
        skip: A folder under a root that is not gated (the quarantine folder).
    """

    def __init__(
        self,
        name: str,
        mode: str,
        roots: Iterable[Path],
        patterns: Iterable[str],
        verify: Callable[[Path, Path], FileReport],
        timeout_s: float = 5.0,
        on_decision: Callable[[Decision], None] | None = None,
        kernel: Callable[[], Fanotify] = Fanotify,
        skip: Path | None = None,
    ) -> None:
        self.name = name
        self.mode = mode
        self.roots = [Path(r) for r in roots]
        self.patterns = tuple(p.lower() for p in patterns)
        self._verify = verify
        self.timeout_s = timeout_s
        self._on_decision = on_decision
        self._kernel = kernel
        self._skip = str(skip) if skip is not None else None
        self._fan: Fanotify | None = None
        self._verdicts: dict[Identity, str | None] = {}  # None: finite; else why refused
        self._pending: dict[Identity, _Pending] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"opengate-{name}")
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = -1, -1
        self._marked: set[str] = set()
        # Resolved path -> the listed name it is reached by (whose suffix names the format).
        self._file_links: dict[str, str] = {}
        self._dir_links: dict[str, str] = {}  # resolved folder -> listed folder
        self._link_folders: set[str] = set()  # folders holding a file link's target
        self._relearned: set[Identity] = set()  # versions the links were re-mapped for
        self.problems: list[str] = []
        self.unavailable: str | None = None
        self.decisions: list[Decision] = []

    # ------------------------------------------------------------------ state

    def state(self) -> tuple[str, str]:
        """``(state, why)``: ``enforcing``, ``auditing`` or ``not enforcing``."""
        if self.unavailable is not None:
            return "not enforcing", self.unavailable
        if self._thread is None or not self._thread.is_alive():
            return "not enforcing", "the open listener is not running (the kernel fails open)"
        why = "; ".join(self.problems)
        return ("enforcing" if self.mode == "open" else "auditing"), why

    # ------------------------------------------------------------------ marks

    def _listed_as(self, path: str) -> str:
        """The name in a gated folder that ``path`` (a resolved path) is reached by."""
        listed = self._file_links.get(path)
        if listed is not None:
            return listed
        folder = self._dir_links.get(os.path.dirname(path))
        if folder is not None:
            return os.path.join(folder, os.path.basename(path))
        return path

    def _gated_name(self, path: str) -> str | None:
        """The listed name ``path`` is opened as, or None when no pattern names it."""
        listed = self._listed_as(path)
        base = os.path.basename(listed).lower()
        for root in self.roots:
            rel = os.path.relpath(listed, root).lower()
            if rel.startswith(".."):
                continue
            for pat in self.patterns:
                if fnmatch.fnmatchcase(rel if "/" in pat else base, pat):
                    return listed
        return None

    def _links(self) -> Iterable[tuple[str, str]]:
        """``(link, resolved target)`` of every symbolic link under the roots."""
        for root in self.roots:
            for folder, dirs, files in os.walk(root, followlinks=False):
                if self._skip is not None and os.path.dirname(self._skip) == folder:
                    dirs[:] = [d for d in dirs if d != os.path.basename(self._skip)]
                for entry in [*dirs, *files]:
                    full = os.path.join(folder, entry)
                    if not os.path.islink(full):
                        continue
                    try:
                        yield full, os.path.realpath(full, strict=True)
                    except OSError:
                        continue  # dangling: nothing to open

    def _relearn_links(self) -> None:
        """Map file links again (a link made since the last tick), without marking."""
        for full, real in self._links():
            if not os.path.isdir(real):
                self._file_links[real] = full

    def refresh(self) -> None:
        """Mark every folder under the roots and every target a listed name resolves to.

        Called at start and on each daemon tick (new subfolders, new links). A file
        link's target is gated through a mark on the target's folder, so a target
        replaced by rename is gated at once; an unknown file opened in such a folder
        makes the listener map the links again before judging it. A mark that fails is
        named in :attr:`problems` (and :meth:`state`'s why).
        """
        if self._fan is None:
            return
        problems: list[str] = []
        for root in self.roots:
            for folder, dirs, _files in os.walk(root, followlinks=False):
                if self._skip is not None and os.path.dirname(self._skip) == folder:
                    dirs[:] = [d for d in dirs if d != os.path.basename(self._skip)]
                self._mark(folder, True, problems)
        for full, real in self._links():
            if os.path.isdir(real):
                for sub, _d, _f in os.walk(real):
                    self._mark(sub, True, problems)
                    self._dir_links[sub] = os.path.join(full, os.path.relpath(sub, real))
            else:
                self._file_links[real] = full
                self._link_folders.add(os.path.dirname(real))
                self._mark(os.path.dirname(real), True, problems)
        self.problems = problems

    def _mark(self, path: str, folder: bool, problems: list[str]) -> None:
        if path in self._marked or self._fan is None:
            return
        try:
            self._fan.mark(path, folder)
            self._marked.add(path)
        except OSError as exc:
            problems.append(f"cannot mark {hosttext.safe_text(path)}: {exc.strerror}")

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        """Open the fanotify group, mark, and start answering (or record why not)."""
        try:
            self._fan = self._kernel()
        except OSError as exc:
            self.unavailable = f"fanotify unavailable: {exc.strerror or exc}"
            return
        self.refresh()
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(
            target=self._listen, name=f"opengate-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop answering and close the group (waiting opens then proceed: fail open)."""
        if self._thread is not None and self._stop_w >= 0:
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for pending in self._pending.values():
                for ev, _ in pending.events:
                    self._answer(ev, True)
            self._pending.clear()
        if self._fan is not None:
            self._fan.close()
            self._fan = None
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1

    def _listen(self) -> None:
        assert self._fan is not None
        poller = select.poll()
        poller.register(self._fan.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll(self._poll_ms())}
            if self._stop_r in ready:
                return
            self._expire()
            if self._fan.fd in ready:
                for ev in self._fan.read():
                    try:
                        self._handle(ev)
                    except Exception as exc:  # never leave an opener waiting forever
                        self._answer(ev, self.mode != "open")
                        self._report(ev, "?", f"the gate failed: {type(exc).__name__}: {exc}")

    def _poll_ms(self) -> int:
        with self._lock:
            if not self._pending:
                return 1000
            soonest = min(p.deadline for p in self._pending.values())
        return max(1, int((soonest - time.monotonic()) * 1000) + 1)

    # ------------------------------------------------------------------ events

    def _answer(self, ev: Event, allow: bool) -> None:
        if self._fan is not None:
            # A failed answer: the group is closing, and the kernel lets the open through.
            with contextlib.suppress(OSError):
                self._fan.respond(ev.fd, allow)
        with contextlib.suppress(OSError):
            os.close(ev.fd)

    def _report(self, ev: Event, path: str, reason: str) -> None:
        decision = Decision(path, describe_opener(ev.pid), reason, self.mode == "open")
        self.decisions.append(decision)
        if self._on_decision is not None:
            self._on_decision(decision)

    def _judge(self, ev: Event, path: str, verdict: str | None) -> None:
        if verdict is None:
            self._answer(ev, True)
            return
        self._report(ev, path, verdict)
        self._answer(ev, self.mode != "open")

    def _handle(self, ev: Event) -> None:
        if not ev.mask & FAN_OPEN_PERM:
            os.close(ev.fd)
            return
        if ev.pid == os.getpid():  # the daemon's own reads (its verifier): never wait
            self._answer(ev, True)
            return
        key = identity(os.fstat(ev.fd))
        if self._verdicts.get(key, _UNKNOWN) is None:  # one lookup: the pool may prune
            # The hot path: a version verified finite opens for anyone, whatever it is named.
            self._answer(ev, True)
            return
        path = os.readlink(f"/proc/self/fd/{ev.fd}")
        if opener_writes(ev.pid):
            self._answer(ev, True)
            return
        listed = self._gated_name(path)
        if (
            listed is None
            and os.path.dirname(path) in self._link_folders
            and key not in self._relearned
        ):
            # A file beside a link target, e.g. a new HF blob whose snapshot link was
            # made since the last tick: is some listed name a link to it now?
            if len(self._relearned) >= _MAX_VERDICTS:
                self._relearned.clear()
            self._relearned.add(key)
            self._relearn_links()
            listed = self._gated_name(path)
        if listed is None:
            self._answer(ev, True)
            return
        with self._lock:
            if key in self._verdicts:
                verdict = self._verdicts[key]
            else:
                pending = self._pending.get(key)
                if pending is not None:
                    pending.events.append((ev, path))
                    return
                self._pending[key] = _Pending([(ev, path)], time.monotonic() + self.timeout_s)
                dup = os.dup(ev.fd)
                self._pool.submit(self._verify_now, key, dup, Path(listed))
                return
        self._judge(ev, path, verdict)

    def _verify_now(self, key: Identity, fd: int, listed: Path) -> None:
        try:
            report = self._verify(Path(f"/proc/self/fd/{fd}"), listed)
            verdict = None if report.ok else dataclasses.replace(report, path=listed).summary()
            if report.ok and identity(os.fstat(fd)) != key:
                verdict = "the file changed while it was verified at open"
        except Exception as exc:
            verdict = f"not verified at open: {type(exc).__name__}: {exc}"
        finally:
            os.close(fd)
        with self._lock:
            if len(self._verdicts) >= _MAX_VERDICTS:  # oldest first: dicts keep order
                del self._verdicts[next(iter(self._verdicts))]
            self._verdicts[key] = verdict
            pending = self._pending.pop(key, None)
        for ev, path in pending.events if pending else []:
            self._judge(ev, path, verdict)

    def _expire(self) -> None:
        now = time.monotonic()
        late: list[tuple[Event, str]] = []
        with self._lock:
            for key, p in list(self._pending.items()):
                if p.deadline <= now:
                    late.extend(p.events)
                    p.events = []
                    p.deadline = float("inf")  # the verification goes on; later opens wait
                    del self._pending[key]
        for ev, path in late:
            self._report(ev, path, f"not verified within {self.timeout_s:g} s at open: refused")
            self._answer(ev, self.mode != "open")

    def learn(self, key: Identity, report: FileReport) -> None:
        """Record a verdict the daemon's own verifier reached for a file version."""
        with self._lock:
            self._verdicts[key] = None if report.ok else report.summary()
