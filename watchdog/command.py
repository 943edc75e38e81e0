"""The one record of what an external command returned.

Readers (``lineage``: ``systemctl show``, ``squeue``), actors (``actions.effects``:
``systemctl mask``, ``crontab -``) and the queue (``scontrol hold``) all return it, so
one recording double in tests answers for every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommandResult:
    """What a command returned: its exit status and its output decoded as text.

    Attributes:
        returncode: The exit status (``subprocess.CompletedProcess.returncode``);
            :class:`watchdog.actions.effects.Effects` reports a missing program as 127
            and a timeout as 124, as a shell would.
        stdout: Standard output (UTF-8, undecodable bytes replaced).
        stderr: Standard error, likewise.
    """

    returncode: int
    stdout: str
    stderr: str
