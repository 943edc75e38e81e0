"""Shared test plumbing.

System tests need root and real components (cron, systemd, Slurm, a C compiler). Where
those are missing they skip with a reason; with ``ROGUE_WATCHDOG_REQUIRE_SYSTEM=1`` (set by
``.ci/run``) a skip of a system test is turned into a failure instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from tests import ownprocs

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")
REQUIRE_SYSTEM = os.environ.get("ROGUE_WATCHDOG_REQUIRE_SYSTEM") == "1"
# Commands run without --config look for a running daemon wherever its socket is
# (rogue_watchdog.cli.common.find_daemon): on a host where other suites run daemons of their
# own, a test's command would find one of theirs. Pinned to a socket nobody listens on;
# tests of that discovery unset it.
os.environ["ROGUE_WATCHDOG_SOCKET"] = "/nonexistent/rogue-watchdog-tests/status.sock"
# pytest-xdist's workers are started with COLUMNS=80 LINES=24: the commands tests run
# would lay their tables out 80 wide, where piped output keeps whole lines (render.py).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

# A user's shell does not set PYTHONUNBUFFERED; this workplace's shells and CI's may. The
# commands tests run meet a block-buffered stdout as a user's do: with it set, a failed
# write at exit (exit 120, not 2) passed here (stop 44's env -i rehearsal found it).
os.environ.pop("PYTHONUNBUFFERED", None)

# Before any test starts a process: what tests start carries the session's marker, and
# rogue-watchdog signals nothing else (tests/ownprocs.py).
ownprocs.mark_environment()
ownprocs.install()


@pytest.fixture(autouse=True)
def _signals_reach_only_own_processes() -> Iterator[None]:
    """Fail a test during which rogue-watchdog tried to signal a process this test
    session did not start (the guard sent nothing: tests/ownprocs.py). A daemon, an
    enforcer or ``terminate_tree`` on the real process table sees the whole host; limit
    what it acts on to the test's own processes (a rule naming ``tmp_path``,
    ``enforcement.dry_run``, a fake ``/proc``)."""
    yield
    refused = ownprocs.take_refusals()
    if refused:
        pytest.fail(
            "rogue-watchdog tried to signal process(es) this test session did not start "
            "(nothing was sent):\n  " + "\n  ".join(refused),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_nvml_left_initialised() -> Iterator[None]:
    """Each test starts with no NVML initialised in this process. pynvml keeps one
    library per process and refuses another while ``nvmlInit`` calls are outstanding
    (watchdog/sources/nvml_lib.py): a test that left its stand-in initialised (the trust
    simulator's machines never shut theirs down) made a later test of the same xdist
    worker that loads another stand-in see "another NVML library ... is in use" and
    report NVML unavailable. Only pynvml's count is reset: calling ``nvmlShutdown``
    could block on a stand-in a test told to hang."""
    yield
    pynvml = sys.modules.get("pynvml")
    if pynvml is not None and getattr(pynvml, "_nvmlLib_refcount", 0) > 0:
        with pynvml.libLoadLock:
            pynvml._nvmlLib_refcount = 0


def need(condition: bool, reason: str) -> None:
    """Skip (or, under ROGUE_WATCHDOG_REQUIRE_SYSTEM=1, fail) unless ``condition`` holds."""
    if condition:
        return
    if REQUIRE_SYSTEM:
        pytest.fail(f"system test prerequisite missing: {reason}")
    pytest.skip(reason)


def need_root() -> None:
    need(os.geteuid() == 0, "needs root")


def need_program(*names: str) -> None:
    for name in names:
        need(shutil.which(name) is not None, f"needs {name} on PATH (apt-get install it)")


class Spawned:
    """Processes a test started; every one is killed (with its group) at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: Sequence[str], **kw: object) -> subprocess.Popen[bytes]:
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("start_new_session", True)
        p: subprocess.Popen[bytes] = subprocess.Popen(list(argv), **kw)  # type: ignore[call-overload]
        self.procs.append(p)
        return p

    def daemon(self, config: Path, log: Path) -> subprocess.Popen[bytes]:
        """``python -m rogue_watchdog run --config CONFIG`` of this checkout, output to ``log``."""
        with open(log, "wb") as fh:
            return self.start(
                [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
                env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=fh, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def cleanup(self) -> None:
        # Kill each started process's whole group, also when the leader is already dead:
        # a test may kill a leader on purpose and leave its workers behind. A PID number
        # is not reused while any process still has it as its process group, so a group
        # that still has members is ours.
        for p in self.procs:
            if p.poll() is None or _group_alive(p.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


@pytest.fixture
def spawned() -> Iterator[Spawned]:
    """Start real processes that are always cleaned up."""
    s = Spawned()
    try:
        yield s
    finally:
        s.cleanup()


def poll(what: str, probe: Callable[[], T | None], timeout_s: float, interval_s: float = 0.2) -> T:
    """Call ``probe`` until it returns something truthy; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def process_picture(match: str) -> str:
    """Every process whose command line holds ``match``: PID, parent, state (``T``:
    stopped), and its children's, for a failure message: a process that never started
    its child (CI: a trainer not seen under its shell within 20-30 s, not reproduced)
    says whether the parent was stopped, gone or waiting."""
    out: list[str] = []
    procs: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        procs[int(entry)] = (int(rest[1]), rest[0], argv)
    for pid, (ppid, state, argv) in sorted(procs.items()):
        if match in argv:
            kids = [f"{k} {v[1]} {v[2][:80]!r}" for k, v in procs.items() if v[0] == pid]
            out.append(f"PID {pid} (parent {ppid}) state {state} {argv[:120]!r}; children: {kids}")
    return "\n".join(out) or f"no process holds {match!r}"


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rogue_watchdog ARGS`` in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "rogue_watchdog", *args],
        capture_output=True,
        text=True,
        errors="surrogateescape",  # the host's command lines may hold any bytes
        timeout=timeout,
        env=full_env,
        check=False,
    )


# Runs in a private mount namespace: binds each SRC onto its DST, then drops to nobody.
# ``sh -c _AS_NOBODY sh SRC DST [SRC DST...] -- ARGV...``
_AS_NOBODY = r"""set -e
while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done
shift
exec runuser -u nobody -- "$@"
"""


@contextlib.contextmanager
def nobody_python(*modules: str) -> Iterator[list[str]]:
    """An argv prefix running this checkout's interpreter as user ``nobody``, with the
    checkout and its venv's site-packages importable, whatever the checkout's path.

    A checkout under root's mode-0700 home (/root) is closed to nobody: its package, its
    venv and (through the venv) its interpreter. So the command runs in a private mount
    namespace (``unshare --mount``: the host's mounts are untouched) where the checkout
    and each site-packages directory are bound onto empty folders of a mode-0755 view
    under /var/tmp, and ``PYTHONPATH`` names those; the checkout's ``watchdog/`` is bound
    as ``rogue_watchdog`` too (PYTHONPATH does not run the editable install's .pth
    finder that maps the import name to the folder); the interpreter is the venv's base
    interpreter (``/usr/bin/python3.11`` on Debian), which loads the venv's packages.
    Only the view's mount points are new; every other path, and every permission the
    test is about, is the host's own. Append ``-c CODE`` or ``-m MODULE`` and arguments.

    Args:
        modules: Modules the command needs; importing them as nobody is checked first.

    Yields:
        ``[unshare, ..., runuser -u nobody -- env PYTHONPATH=... PYTHON]``.

    Raises:
        pytest.fail.Exception: Under ROGUE_WATCHDOG_REQUIRE_SYSTEM=1, not root or no
            runuser/unshare (a skip otherwise), or the probe import fails as nobody.
    """
    import sysconfig
    import tempfile

    need_root()
    need_program("runuser", "unshare", "mount")
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    paths = sysconfig.get_paths()
    sources = list(dict.fromkeys([str(REPO), paths["purelib"], paths["platlib"]]))
    base = os.path.realpath(sys.base_prefix)
    # An interpreter built under /root (pyenv) is bound too, and run from the view: it
    # finds its standard library beside itself, its libpython through LD_LIBRARY_PATH.
    relocate = not _others_can_reach(python) and Path(python).is_relative_to(base)
    view = Path(tempfile.mkdtemp(prefix="rwtest-nobody-", dir="/var/tmp"))
    try:
        view.chmod(0o755)
        pkg = view / "pkg"
        pkg.mkdir(mode=0o755)
        (pkg / "rogue_watchdog").mkdir(mode=0o755)
        binds: list[str] = [str(REPO / "watchdog"), str(pkg / "rogue_watchdog")]
        targets: list[str] = []
        for i, src in enumerate([*sources, *([base] if relocate else [])]):
            dst = view / str(i)
            dst.mkdir(mode=0o755)
            binds += [src, str(dst)]
            targets.append(str(dst))
        env = [f"PYTHONPATH={os.pathsep.join([str(pkg), *targets[: len(sources)]])}"]
        if relocate:
            env.append(f"LD_LIBRARY_PATH={targets[-1]}/lib")
            python = targets[-1] + python[len(base) :]
        argv = [
            "unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", _AS_NOBODY,
            "sh", *binds, "--", "env", *env, python,
        ]  # fmt: skip
        probe = subprocess.run(
            [*argv, "-c", f"import {', '.join(('rogue_watchdog', *modules))}"],
            capture_output=True, text=True, timeout=60, check=False, cwd="/",
        )  # fmt: skip
        if probe.returncode != 0:
            pytest.fail(f"user nobody cannot import {modules} with {python}: {probe.stderr}")
        yield argv
    finally:
        shutil.rmtree(view, ignore_errors=True)


def _others_can_reach(path: str) -> bool:
    """Whether a user in no group of the owner's can run ``path``: every directory above
    it searchable by others and the file executable by others."""
    p = Path(path)
    try:
        return all(os.stat(d).st_mode & 0o001 for d in [p, *p.parents])
    except OSError:
        return False
