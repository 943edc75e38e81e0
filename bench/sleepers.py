"""The population the benchmarks scan: N sleeping processes, always killed afterwards."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sleepers(count: int, lifetime_s: int = 3600) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start ``count`` ``sleep`` processes (each in its own session), give them a second to
    settle, and SIGKILL and reap every one on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(
                subprocess.Popen(
                    ["sleep", str(lifetime_s)], stdin=subprocess.DEVNULL, start_new_session=True
                )
            )
        time.sleep(1.0)
        yield procs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait()
