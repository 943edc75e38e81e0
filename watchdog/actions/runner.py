"""Where long actions wait: off the daemon's tick (issue 32, case 3).

A terminate waits out its grace period (up to an hour) between SIGTERM and SIGKILL.
Waited inside the tick, that was a blind window: no scan, ``status`` showing the job as
rogue, resolves late. A task (:class:`Task`) is stepped instead: the tick makes its
first step (freeze, SIGTERM, SIGCONT: milliseconds) and hands it to a
:class:`ThreadRunner`, whose one thread steps every task when it is due and ends when
none is left. The CLI steps its task to the end in the caller (:class:`InlineRunner`),
as the simulator does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..logs import get_logger

log = get_logger()


class Task(Protocol):
    """One action in progress, stepped until done."""

    @property
    def action_id(self) -> int:
        """The action's row in the audit trail."""
        ...

    def step(self) -> float | None:
        """Advance without waiting; seconds until the next step, or None when done."""
        ...

    def interrupt(self, reason: str) -> None:
        """Stop it where it is, safely (nothing left frozen), and record why."""
        ...


class Runner(Protocol):
    """Steps tasks handed over after their first step."""

    def submit(self, task: Task, wait_s: float) -> None:
        """Step ``task`` again in ``wait_s`` seconds, and so on until it is done."""
        ...

    def in_flight(self) -> list[Task]:
        """Tasks not finished yet."""
        ...


class InlineRunner:
    """Steps each task to its end in the caller, sleeping in between (the CLI, tests).

    Args:
        sleep: The sleep function.
    """

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self.sleep = sleep

    def submit(self, task: Task, wait_s: float) -> None:
        """Run ``task`` to its end now."""
        wait: float | None = wait_s
        while wait is not None:
            self.sleep(wait)
            wait = task.step()

    def in_flight(self) -> list[Task]:
        """Always empty: a task submitted has finished."""
        return []


class ThreadRunner:
    """One background thread that steps every task when it is due (the daemon).

    The thread starts with the first task and ends when none is left. A task that
    raises is interrupted (:meth:`Task.interrupt`) and dropped, with a log line. The
    thread is a daemon thread: at exit, a task in progress is left as its write-ahead
    record says, and the next start finds it (docs/reliability.md).

    Args:
        clock: Monotonic clock.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._due: dict[int, tuple[float, Task]] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, task: Task, wait_s: float) -> None:
        """Step ``task`` again in ``wait_s`` seconds (on the runner's thread)."""
        with self._cond:
            self._due[id(task)] = (self.clock() + wait_s, task)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="rogue-watchdog-actions", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def in_flight(self) -> list[Task]:
        """Tasks not finished yet."""
        with self._cond:
            return [task for _due, task in self._due.values()]

    def settle(self, timeout_s: float) -> bool:
        """Wait until no task is left (tests); True when none is."""
        deadline = self.clock() + timeout_s
        with self._cond:
            while self._due:
                left = deadline - self.clock()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._due:
                    self._thread = None
                    self._cond.notify_all()
                    return
                now = self.clock()
                key, (due, task) = min(self._due.items(), key=lambda kv: kv[1][0])
                if due > now:
                    self._cond.wait(due - now)
                    continue
            wait = self._step(task)
            with self._cond:
                if wait is None:
                    self._due.pop(key, None)
                    self._cond.notify_all()
                else:
                    self._due[key] = (self.clock() + wait, task)

    @staticmethod
    def _step(task: Task) -> float | None:
        try:
            return task.step()
        except Exception as exc:  # a bug must not leave processes frozen, nor the thread dead
            log.error("action-task-failed", action_id=task.action_id, error=repr(exc))
            try:
                task.interrupt(f"failed: {type(exc).__name__}: {exc}")
            except Exception as again:
                log.error("action-task-failed", action_id=task.action_id, error=repr(again))
            return None
