"""Test-only fault points: where the fault-injection tests kill the process.

``ROGUE_WATCHDOG_FAULT=NAME[,NAME...]`` in the environment makes the process kill itself
with SIGKILL when it reaches a fault point of one of those names, exactly as ``kill -9``
would, between two steps of an action (the system test
``tests/system/test_action_faults.py``; docs/reliability.md lists the points). The
lifecycle simulator sets a hook instead (:func:`set_hook`), which raises to end a
simulated daemon at that point. Nothing else sets either; unset, a fault point costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

#: The environment variable naming the fault points to die at.
ENV = "ROGUE_WATCHDOG_FAULT"

_hook: Callable[[str], None] | None = None


def set_hook(hook: Callable[[str], None] | None) -> None:
    """Call ``hook(name)`` at every fault point (the simulator); None removes it."""
    global _hook
    _hook = hook


def fault_point(name: str) -> None:
    """Die here (SIGKILL to this process) when :data:`ENV` names ``name``; call the
    hook, if one is set, first."""
    if _hook is not None:
        _hook(name)
    wanted = os.environ.get(ENV)
    if wanted and name in wanted.split(","):
        signal.raise_signal(signal.SIGKILL)  # this very process, as kill -9 would
