"""A job's signature: "this job from this source", stable across respawns and restarts.

The tracker remembers jobs by it (a rogue signature that disappears and comes back opens
a ``respawned`` finding), and the enforcer and the ``terminate`` command use it to find
the open finding about a job.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from watchdog.model import Origin

# Origin fields that identify the spawner across restarts of the job (a new Slurm job id
# or container id each time is the same source). Read as scan-JSON keys (Origin.fields):
# signatures are stored, and must not change with how the records are spelled.
_ORIGIN_KEYS: dict[str, tuple[str, ...]] = {
    "cron": ("file", "line", "script"),
    "systemd": ("unit", "user"),
    "slurm": ("account", "job_name"),
    "container": ("image", "pod_uid"),
    "kubernetes": ("namespace", "owner_kind", "owner_name"),
    "at": ("command",),
    "supervisor": ("program",),
}
_LONG_NUMBER = re.compile(r"\d{5,}")


def job_signature(user: str | None, cmdline: Sequence[str], origin: Origin) -> str:
    """A stable identifier of "this job from this source".

    Long digit runs (ports, PIDs, timestamps in arguments) are folded so a respawn with a
    new run id still matches. Orphan and unknown origins carry no spawner, so they
    reduce to user + command line: a ghost that comes back from the same place matches.

    Returns:
        16 hex digits.
    """
    keys = _ORIGIN_KEYS.get(origin.kind, ())
    parts = [origin.kind if keys else "-", user or "?", _LONG_NUMBER.sub("#", " ".join(cmdline))]
    parts += [f"{k}={origin.fields.get(k)}" for k in keys]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]
