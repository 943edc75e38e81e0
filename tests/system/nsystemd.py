"""A real systemd booted as PID 1 of a private PID + mount namespace, for system tests.

Recipe and traps (notes/system-tests.md): ``unshare --pid --fork --mount --propagation
private --mount-proc /lib/systemd/systemd --system --unit=T.target`` with
``container=other`` in the environment. Only a minimal target is ever booted:
``T.target`` has ``DefaultDependencies=no`` and pulls in nothing, so no installed service
runs. A unit *without* ``DefaultDependencies=no`` (a ``systemd-run`` transient unit is
one) would pull in ``sysinit.target``, whose ``systemd-tmpfiles-setup`` empties /tmp
(``D /tmp``) and whose ``systemd-sysctl`` rewrites sysctls, on the host's shared root
filesystem. Two independent guards make that impossible rather than merely avoided:
the namespace gets a private tmpfs on /tmp (mounted by a shell that then ``exec``s
systemd, so systemd is still PID 1), and :data:`MASKED` units are masked (symlinked to
/dev/null) in the sandbox unit directory, which comes first in ``SYSTEMD_UNIT_PATH``.
A checkout cloned under /tmp (and its venv) is bound back over the private /tmp, and
only it (:func:`paths_hidden_by_private_tmp`): the units run the checkout's interpreter.
Units live in a sandbox directory named by ``SYSTEMD_UNIT_PATH=DIR:``;
nothing is written to /etc/systemd. The manager is reached with ``nsenter -t PID -p -m``,
and is SIGKILLed (taking every process in its namespace with it) in teardown.

Reuse: ``from tests.system.nsystemd import nsystemd`` (a session fixture) in a test
module, then ``nsystemd.add_unit(...)``, ``nsystemd.systemctl("start", ...)``,
``nsystemd.nsenter(...)``; stop your own units when your test ends.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.conftest import REPO, need, need_program, need_root

SYSTEMD = "/lib/systemd/systemd"
TARGET = "T.target"
MINIMAL_TARGET = """[Unit]
Description=rogue-watchdog test target (minimal: nothing else starts)
DefaultDependencies=no
"""
#: Units that touch host state through the shared root filesystem (tmpfiles empties
#: /tmp, sysctl rewrites fs.protected_*, journald and utmp write /var) or pull them in.
MASKED = (
    "sysinit.target",
    "basic.target",
    "systemd-tmpfiles-setup.service",
    "systemd-sysctl.service",
    "systemd-journald.service",
    "systemd-update-utmp.service",
)
# Runs as PID 1 of the new namespaces, then becomes systemd (still PID 1). The mount
# namespace is private (--propagation private), so the tmpfs is invisible to the host.
# ``sh -c _BOOT SYSTEMD --unit=T STAGE [PATH...]``: each PATH under /tmp (the checkout and
# its venv, when a user cloned there) would be hidden by the private /tmp, so the host's
# /tmp is first bound at STAGE (a directory in the sandbox) and each PATH bound back from
# it onto the tmpfs; then STAGE is detached. The rest of the host's /tmp stays hidden.
_BOOT = r"""set -e
sd=$0; unit=$1; stage=$2; shift 2
[ $# -eq 0 ] || mount --rbind /tmp "$stage"
mount -t tmpfs -o mode=1777,nosuid,nodev rwtest-tmp /tmp
for p do mkdir -p "$p"; mount --rbind "$stage${p#/tmp}" "$p"; done
[ $# -eq 0 ] || umount -l "$stage"
exec "$sd" --system "$unit"
"""


def paths_hidden_by_private_tmp() -> list[str]:
    """The directories under /tmp that the namespace's units run code from: this
    checkout, the venv and the interpreter it runs on (outermost first, none inside
    another). Empty when nothing lives under /tmp."""
    candidates = [REPO, Path(sys.prefix), Path(os.path.realpath(sys.executable)).parent]
    under = sorted(
        {p.resolve() for p in candidates if p.resolve().is_relative_to("/tmp")},
        key=lambda p: len(p.parts),
    )
    out: list[Path] = []
    for p in under:
        if p != Path("/tmp") and not any(p.is_relative_to(q) for q in out):
            out.append(p)
    return [str(p) for p in out]


class NamespacedSystemdError(RuntimeError):
    """The namespaced systemd did not boot or answer in time."""


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:  # comm may hold any bytes
            text = fh.read()
    except OSError:
        return None
    return int(text[text.rfind(b")") + 2 :].split()[1])


class NamespacedSystemd:
    """One systemd manager in its own PID and mount namespace.

    Args:
        sandbox: Directory for unit files, scripts and the manager's log. It must not be
            /tmp itself; a fresh directory under /var/tmp is the default.

    Attributes:
        pid: Host PID of the namespaced systemd (PID 1 inside), set by :meth:`start`.
        unit_dir: Where :meth:`add_unit` writes units (``SYSTEMD_UNIT_PATH``).
    """

    def __init__(self, sandbox: Path | None = None) -> None:
        self.sandbox = sandbox or Path(tempfile.mkdtemp(prefix="rwtest-", dir="/var/tmp"))
        self.unit_dir = self.sandbox / "units"
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        self._stage = self.sandbox / "host-tmp"
        self._stage.mkdir(exist_ok=True)
        self.pid: int | None = None
        self._unshare: subprocess.Popen[bytes] | None = None
        self._units: set[str] = {TARGET}
        (self.unit_dir / TARGET).write_text(MINIMAL_TARGET)
        for name in MASKED:
            (self.unit_dir / name).symlink_to("/dev/null")

    # -- lifecycle -------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        """Boot the manager and wait until ``systemctl is-system-running`` answers.

        Raises:
            NamespacedSystemdError: It exited or did not answer within ``timeout_s``.
        """
        env = {
            "container": "other",
            "SYSTEMD_UNIT_PATH": f"{self.unit_dir}:",
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
        }
        argv = [
            "unshare",
            "--pid",
            "--fork",
            "--mount",
            "--propagation",
            "private",
            "--mount-proc",
            "/bin/sh",
            "-c",
            _BOOT,
            SYSTEMD,
            f"--unit={TARGET}",
            str(self._stage),
            *paths_hidden_by_private_tmp(),
        ]
        log = open(self.sandbox / "systemd.log", "wb")  # noqa: SIM115 - closed with the child
        try:
            self._unshare = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._unshare.poll() is not None:
                raise NamespacedSystemdError(f"systemd exited: {self.log_tail()}")
            if self.pid is None:
                self.pid = self._find_child(self._unshare.pid)
            if self.pid is not None:
                res = self.systemctl("is-system-running", check=False, timeout_s=5)
                if res.stdout.strip() in ("running", "degraded"):
                    return
            time.sleep(0.2)
        self.stop()
        raise NamespacedSystemdError(f"systemd did not come up: {self.log_tail()}")

    @staticmethod
    def _find_child(parent: int) -> int | None:
        for name in os.listdir("/proc"):
            if name.isdigit() and _ppid(int(name)) == parent:
                return int(name)
        return None

    def stop(self) -> None:
        """SIGKILL the namespace's init (all its processes die with it) and clean up.

        Removes the cgroup directories systemd created for this manager's units (they
        are empty once the namespace is gone) and the sandbox directory.
        """
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self._unshare is not None:
            try:
                self._unshare.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._unshare.kill()
                self._unshare.wait(timeout=5)
        self.pid = None
        self._remove_unit_cgroups()
        shutil.rmtree(self.sandbox, ignore_errors=True)

    def _remove_unit_cgroups(self) -> None:
        # Only empty directories named after this manager's own units (and the
        # system-PREFIX.slice of its templates); rmdir refuses busy or foreign ones.
        patterns = []
        for u in self._units:
            if u.endswith(".target"):
                continue
            patterns.append(u.replace("@.", "@*."))
            if "@." in u:
                patterns.append(f"system-{u.split('@')[0]}.slice")
        try:
            hierarchies = [p / "system.slice" for p in Path("/sys/fs/cgroup").iterdir()]
        except OSError:
            return
        for base in hierarchies:
            try:
                dirs = [d for d in base.rglob("*") if d.is_dir()]
            except OSError:
                continue
            for d in sorted(dirs, key=lambda p: -len(p.parts)):
                if any(fnmatch.fnmatchcase(d.name, pat) for pat in patterns):
                    with contextlib.suppress(OSError):
                        d.rmdir()

    def log_tail(self, n_bytes: int = 2000) -> str:
        """The last bytes of the manager's console log, for failure messages."""
        try:
            return (self.sandbox / "systemd.log").read_bytes()[-n_bytes:].decode(errors="replace")
        except OSError:
            return ""

    # -- units -----------------------------------------------------------------------

    def add_unit(self, name: str, text: str, *, reload: bool = True) -> Path:
        """Write ``name`` into the sandbox unit directory and ``daemon-reload``.

        Give test units ``DefaultDependencies=no`` so nothing else gets pulled in.
        """
        path = self.unit_dir / name
        path.write_text(text)
        self._units.add(name)
        if reload and self.pid is not None:
            self.systemctl("daemon-reload")
        return path

    def write_file(self, name: str, text: str, mode: int = 0o644) -> Path:
        """Write a helper file (script, config) into the sandbox."""
        path = self.sandbox / name
        path.write_text(text)
        path.chmod(mode)
        return path

    # -- talking to it ---------------------------------------------------------------

    def nsenter(
        self,
        *argv: str,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout_s: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace (``nsenter -t PID -p -m``).

        Raises:
            subprocess.CalledProcessError: ``check`` and a non-zero exit.
            NamespacedSystemdError: The manager is not running.
        """
        if self.pid is None:
            raise NamespacedSystemdError("not started")
        # The tests' pinned socket (tests/conftest.py) is the host's: a command inside the
        # namespace finds the namespace's own daemon, as it would on that host.
        prefix = ["nsenter", "-t", str(self.pid), "-p", "-m", "env", "-u", "ROGUE_WATCHDOG_SOCKET"]
        if env is not None:
            prefix += [f"{k}={v}" for k, v in env.items()]
        return subprocess.run(
            [*prefix, *argv],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout_s,
            check=check,
            stdin=subprocess.DEVNULL,
        )

    def systemctl(
        self, *args: str, check: bool = True, timeout_s: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """``systemctl ARGS`` against the namespaced manager."""
        return self.nsenter("systemctl", "--no-pager", *args, check=check, timeout_s=timeout_s)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """``systemctl show -p ...`` as a dict (last value of each key)."""
        args: list[str] = ["show"]
        for p in props:
            args += ["-p", p]
        out = self.systemctl(*args, unit).stdout
        return dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)

    def wait_main_pid(self, unit: str, timeout_s: float = 20) -> int:
        """Wait until ``unit`` has a main process; its PID inside the namespace.

        Raises:
            NamespacedSystemdError: No main PID within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid = self.show(unit, "MainPID").get("MainPID", "0")
            if pid.isdigit() and int(pid) > 0:
                return int(pid)
            time.sleep(0.2)
        raise NamespacedSystemdError(f"{unit} has no main PID: {self.log_tail()}")

    def stop_units(self, units: Sequence[str]) -> None:
        """Stop units, ignoring failures (teardown helper)."""
        if self.pid is not None and units:
            self.systemctl("stop", *units, check=False)


@pytest.fixture(scope="session")
def nsystemd() -> Iterator[NamespacedSystemd]:
    """A booted namespaced systemd shared by the session; always killed at the end."""
    need_root()
    need_program("unshare", "nsenter", "systemctl")
    need(os.path.exists(SYSTEMD), f"needs {SYSTEMD} (Debian package systemd)")
    sd = NamespacedSystemd()
    try:
        sd.start()
        yield sd
    finally:
        sd.stop()
