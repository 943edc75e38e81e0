"""While a GPU cannot be seen, a job's findings keep the GPUs they were last seen on.

Blindness is not a change: a job seen by its command line while NVML cannot see GPU 0
(lost, its process list refused, NVML unusable) has no GPU this tick, which says
nothing about where it runs. Its finding keeps the GPUs of its last sighting (so the
labels an alert is identified by do not change: no reminder, no resolve-and-fire pair
in Alertmanager for a job that never stopped); once the GPUs are seen again, what they
show counts (issue 32, case 7).

A GPU released after the alert is the same: a job's process leaves NVML's list when it
tears down its CUDA context, often a tick or more before it exits, and a job may free
its memory between phases. The alert a person was paged with stays identified by the
GPUs it named (no relabel, so no second page); the message says the GPU is not held now
(busy-box CI, 2026-12-06: a cron ghost's run seen between its context teardown and its
exit was a ``remind`` at high).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...model import Finding, GpuHeld
from ...policy.findings import gpus_text
from ...state import FindingRecord


def _held(entries: Any) -> list[dict[str, Any]]:
    return [g for g in entries if isinstance(g, dict)] if isinstance(entries, list) else []


def _key(g: dict[str, Any]) -> object:
    return g.get("uuid") or g.get("index")


def _index(g: dict[str, Any]) -> int:
    index = g.get("index")
    return index if isinstance(index, int) else -1


def last_seen_gpus(rec: FindingRecord, f: Finding, released: bool = False) -> Finding:
    """``f`` with the GPUs ``rec`` named that ``f`` no longer does.

    Args:
        rec: The open finding as it was before this tick.
        f: This tick's sighting of it.
        released: False for a blind tick (the GPUs cannot be seen); True for a tick that
            sees them and the job no longer on them, after its alert was sent.

    Returns:
        ``f`` unchanged when it lost no GPU; else ``f`` whose ``details.gpus`` (and
        ``gpu_indexes``) keep the lost ones, ``details.gpus_unseen`` (blind) or
        ``details.gpus_released`` names their indexes, and whose message says they
        cannot be seen now, or are not held now.
    """
    was, now = _held(rec.details.get("gpus")), _held(f.details.get("gpus"))
    seen = {_key(g) for g in now}
    lost = [g for g in was if _key(g) not in seen]
    if not lost:
        return f
    # All of them lost: the very list last alerted, so the labels read exactly as then.
    gpus = was if not now else sorted([*now, *lost], key=_index)
    unseen = sorted({_index(g) for g in lost})
    details = {
        **f.details,
        "gpus": gpus,
        "gpu_indexes": sorted({_index(g) for g in gpus}),
        "gpus_released" if released else "gpus_unseen": unseen,
    }
    shown = [GpuHeld(str(g.get("uuid", "")), _index(g), g.get("memory_bytes")) for g in lost]
    why = "not held now" if released else "which cannot be seen now"
    message = f"{f.message}; last seen on {gpus_text(shown)}, {why}"
    return dataclasses.replace(f, message=message, details=details)
