"""Fold: the findings of one tick that share a fingerprint are one finding.

Findings are folded by fingerprint: copies of one job (the same command line from the
same source, each its own process tree) make one finding that names every instance,
never one message per PID of a job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ...model import Finding
from ...state import FindingRecord, clean

# PIDs named in a folded finding's message; ``details.root_pids`` lists every one.
NAMED_PIDS = 10


def fingerprint(finding: Finding, signatures: dict[int, str]) -> str:
    """Fold key of a finding: kind plus the job signature, an explicit key, or the message."""
    explicit = finding.details.get("fingerprint")
    if isinstance(explicit, str):
        return f"{finding.kind}:{explicit}"
    if finding.root_pid is not None and finding.root_pid in signatures:
        return f"{finding.kind}:{signatures[finding.root_pid]}"
    return f"{finding.kind}:{finding.message}"


def group(findings: Iterable[Finding], signatures: dict[int, str]) -> dict[str, list[Finding]]:
    """This tick's findings by fingerprint (as stored: :func:`~watchdog.state.clean`),
    each group in the order given; groups in the order their first finding came."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(clean(fingerprint(f, signatures)) or "", []).append(f)
    return groups


def job_root(value: object) -> tuple[int, int | None] | None:
    """One job identity as findings record it, read back without trusting it.

    ``details.root`` and each item of ``details.instance_roots`` are ``[PID, start
    ticks]`` (start ticks: field 22 of ``/proc/PID/stat``, clock ticks after boot; None in
    ``instance_roots`` where the finding recorded no root, :func:`fold`). They come back
    from the state database and the outage file, so anything may stand there.

    Args:
        value: The recorded value, of any type.

    Returns:
        ``(pid, start_ticks)``, start ticks None where recorded as null; None for
        anything but a two-item list of an int PID and an int or null start. Bools are
        not ints here (JSON ``true`` is no PID). Values are not range-checked: a
        negative number is returned as is (it names no process, so matches none).
    """
    if not isinstance(value, list) or len(value) != 2:
        return None
    pid, start = value
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None
    if start is None:
        return pid, None
    if not isinstance(start, int) or isinstance(start, bool):
        return None
    return pid, start


def _identity(f: Finding) -> tuple[int | None, int | None]:
    """A finding's job identity: root PID and start ticks (None where not recorded)."""
    root = job_root(f.details.get("root"))
    if root is not None and root[1] is not None:
        return root
    return f.root_pid, None


def _named(rec: FindingRecord) -> set[tuple[int, int | None]]:
    """The identities of the instances an open finding named (``details.instance_roots``,
    written by :func:`fold`): the copies of its job it already stands for."""
    items = rec.details.get("instance_roots")
    roots = (job_root(item) for item in (items if isinstance(items, list) else []))
    return {r for r in roots if r is not None}


def _among(ident: tuple[int | None, int | None], named: set[tuple[int, int | None]]) -> bool:
    pid, start = ident
    return any(pid == p and (start is None or s is None or start == s) for p, s in named)


def same_job(rec: FindingRecord, group: list[Finding]) -> bool:
    """True when the job an open finding is about is among this tick's findings of its
    fingerprint: the same root PID, and the same start time where both record one (a
    reused PID is another job); or, once that run is no longer among them (it ended, or
    a raised cap leaves it within), a copy of the job the finding already named as one of
    its instances (the finding goes on about it: it was paged for that copy too, so no
    second page). Findings about no job always are."""
    if rec.root_pid is None:
        return True
    was = rec.details.get("root")
    for f in group:
        if f.root_pid != rec.root_pid:
            continue
        now = f.details.get("root")
        if isinstance(was, list) and isinstance(now, list) and was != now:
            continue
        return True
    named = _named(rec)
    return any(_among(_identity(f), named) for f in group)


def fold(group: list[Finding], rec: FindingRecord | None) -> tuple[Finding, list[int]]:
    """One finding for several with the same fingerprint (copies of one job: the same
    command line from the same source, each its own process tree).

    The finding names every instance: ``details.instances`` and ``details.root_pids``,
    and the message ends "N instances of this job: PIDs a, b, …"; ``details.instance_roots``
    keeps each instance's identity (root PID, start ticks), so that the finding goes on
    about a copy it named once the run it named ends (:func:`same_job`). It keeps naming
    the PID it named before while that PID runs, so its root PID never switches silently.

    Returns:
        The folded finding and the root PIDs of its instances (sorted).
    """
    pids = sorted({f.root_pid for f in group if f.root_pid is not None})
    rep = group[0]
    if rec is not None and rec.root_pid is not None:
        copies = _named(rec)
        # The PID it named while that runs; else a copy it named before (not a new run).
        rep = next(
            (f for f in group if f.root_pid == rec.root_pid),
            next((f for f in group if _among(_identity(f), copies)), rep),
        )
    if len(group) == 1:
        return rep, pids
    details = dict(rep.details)
    details["instances"] = len(group)
    details["root_pids"] = pids
    details["instance_roots"] = sorted(
        [p, s] for p, s in {_identity(f) for f in group} if p is not None
    )
    named = ", ".join(str(p) for p in pids[:NAMED_PIDS])
    more = f" and {len(pids) - NAMED_PIDS} more" if len(pids) > NAMED_PIDS else ""
    message = f"{rep.message}; {len(group)} instances of this job: PIDs {named}{more}"
    return dataclasses.replace(rep, message=message, details=details), pids
