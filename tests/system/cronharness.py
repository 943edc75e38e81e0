"""Real Debian cron for system tests: sandboxed entries, fake trainers, strict cleanup.

Facts this relies on (notes/system-tests.md): ``cron`` picks up ``/etc/cron.d`` files
within a minute (touching the directory helps); file names with dots are ignored; a job
runs as ``cron`` → ``CRON`` → ``/bin/sh -c CMD`` → command, dash staying as the parent.

Ownership rules kept here:
* cron is shared (:class:`tests.system.hostdaemon.DaemonLease`): the one that runs is
  used and left alone; one started for the tests is stopped by the last test process
  that uses it, never under another's test.
* Files: ``/etc/cron.d/rwtest-<hex>-p<PID>s<ticks>-<n>`` (no dots; those of a test
  process that is gone are removed by the next harness), user crontabs of throwaway users
  ``rwt<hex>`` made with ``useradd -M``; all removed in :meth:`CronHarness.close`.
* Trainers are ``/usr/bin/python3 SANDBOX/<name>/train_fake.py`` where SANDBOX is a fresh
  random directory: a process is ours only when its argv is exactly that, and either its
  parent chain reaches the cron daemon in use, or it was re-parented to PID 1 (the
  daemonised scenario, which by design has no cron ancestor left).
* SANDBOX is claimed for the test session (``tests/ownprocs.py``): what cron starts
  from it inherits nothing from the test, and rogue-watchdog may signal it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.ownprocs import claim_path, release_path
from tests.system.hostdaemon import DaemonLease, _start_ticks

PYTHON = "/usr/bin/python3"
CRON_D = Path("/etc/cron.d")
TRAINER_SOURCE = "import time\ntime.sleep(120)\n"


def _mnt_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def _cmdline(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(raw.decode("utf-8", "replace").split("\0")[:-1])


def _ppid(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()  # comm may hold any bytes
    except OSError:
        return 0
    return int(text[text.rfind(b")") + 2 :].split()[1])


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


_OWNED = re.compile(r"rwtest-[0-9a-f]+-p(\d+)s(\d+)-\d+")


def remove_orphaned_entries() -> list[Path]:
    """Remove ``/etc/cron.d/rwtest-*`` files whose name says their test process is gone
    (a session killed before its teardown: its ghost line would fire every minute for
    every later test on the host). Names without an owner are left alone: whose they
    are cannot be told. Returns what was removed."""
    removed = []
    for path in CRON_D.glob("rwtest-*"):
        m = _OWNED.fullmatch(path.name)
        if m is None or _start_ticks(int(m.group(1))) == m.group(2):
            continue  # not marked, or its owner runs
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    if removed:
        os.utime(CRON_D)
    return removed


class CronHarness:
    """A cron daemon plus the sandboxed entries and trainers of one test module."""

    def __init__(self) -> None:
        self.sandbox = Path(tempfile.mkdtemp(prefix="rwtest-cron-"))
        self.sandbox.chmod(0o755)  # the throwaway users must read their trainers
        claim_path(self.sandbox)
        self.tag = secrets.token_hex(4)
        self.lease: DaemonLease | None = None
        self.cron_pid = 0
        self.cron_d_files: list[Path] = []
        self.users: list[str] = []

    # -- setup ----------------------------------------------------------------------

    def ensure_cron(self) -> int:
        """Take a share of the host's cron (tests/system/hostdaemon.py): the one that runs,
        or one started for the tests and stopped by the last test process using it."""
        if self.lease is None:
            self.lease = DaemonLease("cron", ["cron", "-f"])
            self.cron_pid = self.lease.acquire()
        return self.cron_pid

    def trainer(self, name: str) -> Path:
        """Create ``SANDBOX/name/train_fake.py`` (sleeps 120 s) and return its path."""
        folder = self.sandbox / name
        folder.mkdir(mode=0o755, exist_ok=True)
        path = folder / "train_fake.py"
        path.write_text(TRAINER_SOURCE)
        path.chmod(0o644)
        return path

    def run_parts_dir(self, trainer: Path) -> tuple[Path, Path]:
        """``SANDBOX/cron.rwtest/rwjob``: a run-parts script that runs ``trainer``."""
        folder = self.sandbox / "cron.rwtest"
        folder.mkdir(mode=0o755, exist_ok=True)
        script = folder / "rwjob"  # run-parts only runs names without dots
        script.write_text(f"#!/bin/sh\n{PYTHON} {trainer}\n")
        script.chmod(0o755)
        return folder, script

    def add_cron_d(self, lines: list[str]) -> Path:
        """Write ``/etc/cron.d/rwtest-<hex>-p<PID>s<start ticks>-<n>`` (mode 0644, root;
        the name says which test process owns it: :func:`remove_orphaned_entries`) and
        nudge cron."""
        remove_orphaned_entries()
        me = f"p{os.getpid()}s{_start_ticks(os.getpid())}"
        path = CRON_D / f"rwtest-{self.tag}-{me}-{len(self.cron_d_files)}"
        self.cron_d_files.append(path)
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o644)
        os.utime(CRON_D)
        return path

    def add_user(self) -> str:
        """Create a throwaway system user without a home directory."""
        name = f"rwt{self.tag}{len(self.users)}"
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
        self.users.append(name)
        return name

    def install_user_crontab(self, user: str, lines: list[str]) -> Path:
        """``crontab -u USER FILE``; returns the spool file."""
        src = self.sandbox / f"crontab-{user}"
        src.write_text("\n".join(lines) + "\n")
        subprocess.run(["crontab", "-u", user, str(src)], check=True)
        return Path("/var/spool/cron/crontabs") / user

    # -- observation ----------------------------------------------------------------

    def descends_from_cron(self, pid: int) -> bool:
        """True when ``pid``'s parent chain reaches the cron daemon in use."""
        seen = 0
        while pid > 1 and seen < 64:
            if pid == self.cron_pid:
                return True
            pid = _ppid(pid)
            seen += 1
        return False

    def ours(self, path: Path) -> list[int]:
        """PIDs running ``/usr/bin/python3 path`` that this harness may claim."""
        want = (PYTHON, str(path))
        out = []
        for pid in _pids():
            if _cmdline(pid) != want:
                continue
            if self.descends_from_cron(pid) or _ppid(pid) == 1:
                out.append(pid)
        return sorted(out)

    def wait_for(self, paths: list[Path], timeout_s: float) -> dict[Path, int]:
        """Wait until each trainer runs; return the first PID of each."""
        deadline = time.monotonic() + timeout_s
        found: dict[Path, int] = {}
        while time.monotonic() < deadline:
            for path in paths:
                if path not in found and (pids := self.ours(path)):
                    found[path] = pids[0]
            if len(found) == len(paths):
                return found
            time.sleep(0.5)
        missing = [str(p) for p in paths if p not in found]
        raise TimeoutError(f"cron did not start {missing} within {timeout_s:.0f} s")

    @staticmethod
    def seconds_to_fire() -> float:
        """Seconds until the minute at which cron will run a just-installed entry."""
        now = time.time()
        left = 60 - now % 60
        # Too close to the boundary, cron may only notice the file a minute later.
        return left + 60 if left < 8 else left

    # -- teardown -------------------------------------------------------------------

    def close(self) -> None:
        """Remove entries first (no new runs), then kill our trainers, then stop cron."""
        for path in self.cron_d_files:
            path.unlink(missing_ok=True)
        if self.cron_d_files:
            os.utime(CRON_D)
        for user in self.users:
            subprocess.run(["crontab", "-u", user, "-r"], capture_output=True)
        trainers = list(self.sandbox.glob("*/train_fake.py"))
        for _ in range(2):  # a second sweep catches a run cron forked meanwhile
            for path in trainers:
                for pid in self.ours(path):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        for user in self.users:
            for _ in range(10):  # its job shells may take a moment to exit
                if subprocess.run(["userdel", user], capture_output=True).returncode == 0:
                    break
                time.sleep(0.5)
        if self.lease is not None:
            self.lease.release()
        shutil.rmtree(self.sandbox, ignore_errors=True)
        release_path(self.sandbox)
