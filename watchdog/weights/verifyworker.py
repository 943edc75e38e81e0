"""A background thread that verifies weights files for the daemon's ship gates.

The tick only submits files and collects finished reports, so a large checkpoint
(about 0.1–0.5 s per GiB here, minutes for a cold 100 GiB file on a slow disk) never
holds up the scan, the alerts or the other gates. Results are keyed by the file's
identity (:class:`FileKey`); a file that changes while it is read yields no result and
is verified again once it has settled.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..logs import get_logger
from ..model import INDEX_SUFFIX
from .api import verify_file
from .discover import check_index
from .report import FileReport

if TYPE_CHECKING:
    from .scan import ScanContext

log = get_logger()

#: Priority of files in a deploy directory (verified before training outputs).
DEPLOY = 0
#: Priority of training outputs (only needed for the freshness rule).
TRAIN = 1


class FileKey(NamedTuple):
    """Identity of one version of a file: a different key means different bytes may be there.

    ``ctime_ns`` and ``ino`` catch an in-place rewrite that restores the mtime and a
    rename over the path with the same size and mtime (``cp -p``, ``rsync -a``).
    """

    path: str
    size_bytes: int
    mtime_ns: int
    ctime_ns: int
    ino: int

    @classmethod
    def of(cls, path: Path) -> FileKey:
        """Stat ``path`` (following symlinks).

        Raises:
            OSError: The file vanished or cannot be stat'ed.
        """
        st = path.stat()
        return cls(str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


VerifyFn = Callable[[Path, "ScanContext"], FileReport]


def verify_one(path: Path, ctx: ScanContext) -> FileReport:
    """Verify one weights file or check one shard index; never raises.

    Returns:
        The file's report; for a ``*.index.json`` a report with no tensors that is
        finite when the index is consistent, else not verified.
    """
    if path.name.endswith(INDEX_SUFFIX):
        problems, _shards = check_index(path)  # the listing submits the shards themselves
        return problems[0] if problems else FileReport(path, "weights-index")
    return verify_file(path, ctx)


class VerifyWorker:
    """One thread verifying submitted files, highest priority (lowest number) first.

    It also satisfies the daemon's ``Worker`` protocol (``name``, ``start``, ``stop``);
    :meth:`submit` starts it on first use, so wiring it as a worker is optional.

    Args:
        verify: Function producing a file's report (tests wrap it to hold it up).
    """

    name = "weights-verifier"

    def __init__(self, verify: VerifyFn = verify_one) -> None:
        self._verify = verify
        self._queue: queue.PriorityQueue[tuple[int, int, FileKey | None, str]] = (
            queue.PriorityQueue()
        )
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._pending: set[tuple[str, FileKey]] = set()
        self._done: dict[str, dict[FileKey, FileReport | None]] = {}
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread if it is not running."""
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Ask the thread to finish its current file and exit; wait up to 5 s."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put((-1, next(self._order), None, ""))
        thread.join(timeout=5.0)
        self._thread = None

    def submit(self, owner: str, key: FileKey, priority: int = DEPLOY) -> None:
        """Queue one file version unless it is already queued or awaiting collection.

        Args:
            owner: Who collects the result (one gate); results are kept apart per owner.
            key: The file version to verify.
            priority: :data:`DEPLOY` or :data:`TRAIN`.
        """
        self.start()
        with self._cond:
            if (owner, key) in self._pending or key in self._done.get(owner, {}):
                return
            self._pending.add((owner, key))
        self._queue.put((priority, next(self._order), key, owner))

    def pending(self) -> int:
        """Files queued or being verified."""
        with self._cond:
            return len(self._pending)

    def wait(self, timeout_s: float) -> bool:
        """Wait until nothing is pending or ``timeout_s`` passes.

        Returns:
            True when nothing is pending.
        """
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout=timeout_s)

    def wait_for(self, owner: str, key: FileKey, timeout_s: float) -> bool:
        """Wait until ``owner``'s ``key`` is no longer queued or being verified (its result
        awaits :meth:`collect`, or it was never submitted), or ``timeout_s`` passes.

        Returns:
            True when it is no longer pending.
        """
        with self._cond:
            return self._cond.wait_for(lambda: (owner, key) not in self._pending, timeout=timeout_s)

    def collect(self, owner: str) -> dict[FileKey, FileReport | None]:
        """Take ``owner``'s finished results: a report, or None when the file changed or
        vanished while it was read (it must settle again)."""
        with self._cond:
            return self._done.pop(owner, {})

    def _run(self) -> None:
        # The context (and numpy, the scan kernels) is made on the first file: a daemon
        # with no ship gate never pays for it.
        ctx: ScanContext | None = None
        try:
            while True:
                _prio, _n, key, owner = self._queue.get()
                if key is None:
                    return
                report: FileReport | None = None
                try:
                    if ctx is None:
                        from .scan import ScanContext

                        # Read, not mapped: a file cut short under the check must be a
                        # report, never SIGBUS for the whole daemon.
                        ctx = ScanContext.default(mapped=False)
                    report = self._check(key, ctx)
                except Exception as exc:  # never let one file kill the thread
                    log.error("weights-verify-crashed", path=key.path, error=repr(exc))
                    if ctx is None:
                        # The check could not start (numpy missing, no thread): the
                        # file is refused as not verified, never left pending.
                        report = FileReport(
                            Path(key.path),
                            "unknown",
                            error=f"the check could not start: {type(exc).__name__}: {exc}",
                        )
                with self._cond:
                    self._pending.discard((owner, key))
                    self._done.setdefault(owner, {})[key] = report
                    self._cond.notify_all()
        finally:
            if ctx is not None:
                ctx.close()

    def _check(self, key: FileKey, ctx: ScanContext) -> FileReport | None:
        path = Path(key.path)
        try:
            if FileKey.of(path) != key:
                return None  # changed since it settled
            report = self._verify(path, ctx)
            if FileKey.of(path) != key:
                return None  # changed while it was read
        except OSError:
            return None  # vanished
        return report
