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

A GPU gained after the alert is the same again (:func:`alerted_gpus`): the alert stays
identified by the GPUs it was sent with, and the message and ``gpu_indexes`` name the
GPUs the job holds now, as a periodic finding's do (issue 35: a probe paged while NVML's
device count was lost, with no GPU, was paged again 5 s later when NVML showed it on
GPU 0, as a relabelled ``remind``). An alert's GPU labels are settled once, by its first
page: the settle (``alerts.settle_s``) gives the GPU picture time to fill in before it.
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


def _label(g: dict[str, Any]) -> str:
    """How a GPU is named in an alert's ``gpu`` label (its index, ``?`` for none)."""
    index = g.get("index")
    return "?" if index is None else str(index)


def alerted_gpus(rec: FindingRecord, f: Finding) -> Finding:
    """``f`` whose ``details.gpus`` (what its alert is identified by) are those ``rec``
    was alerted with, when the job holds a GPU now that its alert did not name.

    The alert's own ``gpu`` label says which (``rec.alerted_routing``): a finding paged
    from memory during a storage outage kept its sightings' GPUs in ``details`` after
    its page. Without it (alerted before labels were kept), ``rec.details.gpus``.

    Args:
        rec: The open finding as it was before this tick, already alerted.
        f: This tick's sighting of it (after :func:`last_seen_gpus`).

    Returns:
        ``f`` unchanged when its GPUs are those alerted; else ``f`` whose
        ``details.gpus`` are the alerted ones (this tick's memory where held),
        ``gpu_indexes`` every GPU, and ``details.gpus_gained`` the indexes the alert
        does not name. Its message, from this tick's sighting, names every GPU held now.
    """
    was, now = _held(rec.details.get("gpus")), _held(f.details.get("gpus"))
    pool = {_label(g): g for g in [*was, *now]}
    label = (rec.alerted_routing or {}).get("gpu")
    named = label.split(",") if label else []
    if rec.alerted_routing is None or any(n not in pool for n in named):
        named = [_label(g) for g in was]
    gpus = [pool[n] for n in named if n in pool]
    if [_key(g) for g in gpus] == [_key(g) for g in now]:
        return f
    gained = [g for g in now if _label(g) not in named]
    indexes = {_index(g) for g in [*gpus, *now]}
    indexes.update(i for i in f.details.get("gpu_indexes") or () if isinstance(i, int))
    details = {
        **f.details,
        "gpus": gpus,
        "gpu_indexes": sorted(indexes),
        "gpus_gained": sorted({_index(g) for g in gained}),
    }
    return dataclasses.replace(f, details=details)
