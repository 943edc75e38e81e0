"""One host cron (or atd) shared by every test process, stopped by the last one to leave.

Why: a harness used the cron that ran, or started one and stopped it at its own teardown,
under whatever test of another process was waiting for it: pytest-xdist workers, or a
second checkout's suite on the same host ("cron did not start … within 78 s", seen
2026-12-06 in a one-after-another run beside another suite). Starting one each would run
every ``/etc/cron.d`` line twice.

So each user takes a *lease* under one file lock in :data:`LEASE_DIR`: the first finds
the daemon that runs (which is never stopped: not ours) or starts one and records it; the
last to give its lease back stops the one that was recorded, only while it is still that
process (PID and start time). A holder that died without giving its lease back is pruned
by the next one who looks, so a killed run leaves at most a daemon the next run reuses or
stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

LEASE_DIR = Path("/run/rogue-watchdog-tests")


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _alive(pid: int, ticks: str) -> bool:
    return _start_ticks(pid) == ticks and _state(pid) not in ("Z", "X", "")


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler installed for ``signum`` (``SigCgt`` of
    ``/proc/PID/status``, proc(5)): before that, a signal whose default action ends the
    process (SIGHUP) kills a daemon that has only just started."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def wake(pid: int, signum: int, timeout_s: float = 10.0) -> bool:
    """Send ``signum`` to ``pid`` once it catches it (:func:`catches`), waiting up to
    ``timeout_s``; False (nothing sent) when it never did or is gone."""
    deadline = time.monotonic() + timeout_s
    while not catches(pid, signum):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def _mnt_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def _cmdline0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def running_daemon(name: str) -> int:
    """The PID of ``name``'s daemon in this mount namespace, or 0.

    Only the daemon itself: its job children share the name (cron's ``CRON``), and a
    daemon in a mount namespace of its own (the busy box's private cron) runs none of the
    host's lines.
    """
    found = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    mine = _mnt_ns(os.getpid())
    daemons = [
        p
        for p in pids
        if _ppid(p) not in pids
        and os.path.basename(_cmdline0(p)) == name  # not an orphaned ``CRON`` job child
        and _mnt_ns(p) == mine
    ]
    return daemons[0] if daemons else 0


class DaemonLease:
    """A share of the host's ``name`` daemon (``cron`` or ``atd``) for one harness."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.pid = 0
        self.ours = False  # whether the lease file records this daemon as started by a test
        me = os.getpid()
        self._holder = f"{me}-{_start_ticks(me)}-{secrets.token_hex(4)}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Path]:
        LEASE_DIR.mkdir(mode=0o700, exist_ok=True)
        holders = LEASE_DIR / f"{self.name}.holders"
        holders.mkdir(mode=0o700, exist_ok=True)
        with open(LEASE_DIR / f"{self.name}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield holders
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _recorded(self) -> tuple[int, str] | None:
        try:
            pid, ticks = (LEASE_DIR / f"{self.name}.started").read_text().split()
        except (OSError, ValueError):
            return None
        return (int(pid), ticks) if _alive(int(pid), ticks) else None

    def acquire(self) -> int:
        """Take a share; return the daemon's PID (started here when none runs).

        Raises:
            RuntimeError: the daemon started here exited at once.
        """
        with self._locked() as holders:
            (holders / self._holder).touch()
            pid = running_daemon(self.name)
            if not pid:
                # A clean environment: what it starts must not carry this test session's
                # ownership marker (tests/ownprocs.py) into another session's jobs.
                env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
                proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    env=env,
                )
                time.sleep(0.5)
                if proc.poll() is not None:
                    (holders / self._holder).unlink(missing_ok=True)
                    raise RuntimeError(f"{' '.join(self.argv)} exited with {proc.returncode}")
                pid = proc.pid
                (LEASE_DIR / f"{self.name}.started").write_text(f"{pid} {_start_ticks(pid)}\n")
            recorded = self._recorded()
            self.ours = recorded is not None and recorded[0] == pid
            self.pid = pid
            return pid

    def release(self) -> None:
        """Give the share back; the last holder stops the daemon a test started."""
        with self._locked() as holders:
            (holders / self._holder).unlink(missing_ok=True)
            for entry in holders.iterdir():
                pid, ticks = entry.name.split("-")[:2]
                if not _alive(int(pid), ticks):
                    entry.unlink(missing_ok=True)
            if any(holders.iterdir()):
                return
            recorded = self._recorded()
            (LEASE_DIR / f"{self.name}.started").unlink(missing_ok=True)
            if recorded is None:
                return
            pid, ticks = recorded
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while _alive(pid, ticks) and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # ours to reap when this process started it
                time.sleep(0.1)
            if _alive(pid, ticks):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
