"""A job's signature: "this job from this source", stable across respawns and restarts.

The tracker remembers jobs by it (a rogue signature that disappears and comes back opens
a ``respawned`` finding), and the enforcer and the ``terminate`` command use it to find
the open finding about a job.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ..model import Origin

_LONG_NUMBER = re.compile(r"\d{5,}")


def job_signature(user: str | None, cmdline: Sequence[str], origin: Origin) -> str:
    """A stable identifier of "this job from this source".

    Long digit runs (ports, PIDs, timestamps in arguments) are folded so a respawn with a
    new run id still matches. Orphan and unknown origins carry no spawner, so they
    reduce to user + command line: a ghost that comes back from the same place matches.

    Returns:
        16 hex digits.
    """
    # The fields that name the source (Origin.SOURCE_FIELDS: a new Slurm job id or
    # container id each run is the same source), read as scan-JSON keys: signatures are
    # stored, and must not change with how the records are spelled.
    keys = origin.SOURCE_FIELDS
    parts = [origin.kind if keys else "-", user or "?", _LONG_NUMBER.sub("#", " ".join(cmdline))]
    parts += [f"{k}={origin.fields.get(k)}" for k in keys]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]
