"""The tests' own guard (tests/ownprocs.py): rogue-watchdog, run by a test, signals only
processes this test session started, and signals only through ``Effects.send_signal``.

The "foreign" process here is the test's own too (a ``sleep`` re-parented away from
pytest, with a bare environment), so a broken guard could only hit it.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.guards import Expected, LiveProc, SignalGuard, read_live
from rogue_watchdog.actions.terminate import terminate_tree
from tests import ownprocs
from tests.conftest import REPO, Spawned, poll

BARE = {"PATH": "/usr/bin:/bin"}


class Orphans:
    """Processes started through a shell that exits at once: re-parented away from the
    test process. Each is killed at the end by PID and start time."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []

    def start(self, command: str, env: dict[str, str] | None = None) -> tuple[int, int]:
        """Run ``command`` in the background of a shell that exits; ``(PID, start)``."""
        done = subprocess.run(
            ["sh", "-c", f"{command} >/dev/null 2>&1 & echo $!"],
            env=env, capture_output=True, text=True, timeout=30, check=True,
            start_new_session=True,
        )  # fmt: skip
        pid = int(done.stdout)
        # Its argv *is* the command's words: a substring also matched the shell's fork
        # before its exec (argv still ``sh -c COMMAND ...``), as test_hand_restart's did.
        want = tuple(shlex.split(command))

        def execd() -> LiveProc | None:
            live = read_live(pid)
            return live if live is not None and live.cmdline == want else None

        live = poll("the orphan's exec", execd, 10, 0.02)
        self.started.append((pid, live.start_ticks))
        return pid, live.start_ticks

    def cleanup(self) -> None:
        for pid, start in self.started:
            live = read_live(pid)
            if live is not None and live.start_ticks == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def orphans() -> Iterator[Orphans]:
    o = Orphans()
    try:
        yield o
    finally:
        o.cleanup()


def alive(pid: int, start: int) -> bool:
    live = read_live(pid)
    return live is not None and live.start_ticks == start and live.state != "Z"


def test_a_process_this_session_did_not_start_gets_no_signal(orphans: Orphans) -> None:
    pid, start = orphans.start("sleep 300", env=BARE)
    assert ownprocs.owner_of(pid) is None
    with pytest.raises(PermissionError, match="test guard, nothing sent"):
        Effects().send_signal(pid, signal.SIGTERM, start)
    out = terminate_tree([Expected(pid, start)], SignalGuard(), Effects(), 0.2, kill_wait_s=0)
    assert [(p.pid, p.signals, p.result) for p in out.procs] == [(pid, [], "survived")]
    assert out.outcome == "partial"
    assert alive(pid, start)
    refused = ownprocs.take_refusals()  # else this test fails at teardown, as it should
    assert len(refused) >= 2  # SIGTERM, then SIGSTOP at each look at the tree
    assert all(f"to PID {pid} `sleep 300` (uid {os.getuid()}): not started" in r for r in refused)


def test_processes_the_session_started_are_its_own(
    orphans: Orphans, spawned: Spawned, tmp_path: Path
) -> None:
    child = spawned.start(["sleep", "300"], env=BARE).pid  # no marker, below the test
    assert ownprocs.owner_of(child) == "a descendant of the test process"
    marked, marked_start = orphans.start("sleep 300")  # away from the test, marked
    assert ownprocs.owner_of(marked) == "marked"
    # What cron starts from a test's sandbox: neither marked nor below the test.
    claimed, _ = orphans.start(
        f"{sys.executable} -c 'import time; time.sleep(300)' {tmp_path}/x", env=BARE
    )
    assert ownprocs.owner_of(claimed) is None
    ownprocs.claim_path(tmp_path)
    try:
        assert ownprocs.owner_of(claimed) == f"names {tmp_path}"
    finally:
        ownprocs.release_path(tmp_path)
    assert ownprocs.owner_of(claimed) is None
    Effects().send_signal(marked, signal.SIGTERM, marked_start)
    poll("the marked orphan to exit", lambda: not alive(marked, marked_start), 10, 0.02)
    assert ownprocs.take_refusals() == []


SIGNALLING = {"kill", "killpg", "pidfd_send_signal", "pthread_kill", "send_signal"}


def test_the_product_signals_only_through_effects() -> None:
    """The guard wraps ``Effects.send_signal``: any other way to signal a process from
    watchdog/ would bypass it. Allowed: that method's own ``pidfd_send_signal``, calls of
    ``send_signal`` on an Effects, and ``os.kill(pid, 0)`` (asks, sends nothing)."""
    found = []
    for path in sorted((REPO / "watchdog").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in SIGNALLING:
                continue
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            zero = len(node.args) > 1 and ast.unparse(node.args[1]) == "0"
            if name == "send_signal" and receiver.endswith("effects"):
                continue
            if (rel, receiver, name) == (
                "watchdog/actions/effects.py",
                "signal",
                "pidfd_send_signal",
            ):
                continue
            if (receiver, name) == ("os", "kill") and zero:
                continue
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
