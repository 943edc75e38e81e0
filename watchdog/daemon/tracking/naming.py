"""What a finding's message says beyond the scan's text: the operator's undo that
re-enabled the job's source, and the finding's own id in the commands it offers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from ...model import Finding
from ...policy.findings import name_finding_in_commands
from ...state import SourceUndo


def with_undo_notes(
    findings: Iterable[Finding],
    undos: Mapping[tuple[int, int], SourceUndo | None],
    cli_args: str = "",
    again: Mapping[tuple[int, int], str] | None = None,
) -> list[Finding]:
    """A rogue job that runs because an operator undid the disabling of its source
    says so in its one finding (no ``respawned`` beside it, and the enforcer opens no
    ``remediation-failed``).

    Args:
        findings: This tick's findings.
        undos: By job root identity (PID, start ticks): the undo that re-enabled the
            source the job started from after, or None.
        cli_args: The daemon's `` --config PATH`` for the printed ``undo``
            (:meth:`SourceUndo.note`).
        again: By identity: what the note says next when the source was disabled again
            since that undo (:data:`DISABLED_AGAIN` and the action): the run's story, and
            the source's state now (fresh user, 2026-12-07: "re-enabled by undo" only,
            after a second disable-source).
    """
    out = []
    for f in findings:
        root = f.details.get("root")
        undo = None
        if f.kind in ("rogue-job", "excess-instances") and isinstance(root, list):
            undo = undos.get(tuple(root))
        if undo is not None:
            since = (again or {}).get(tuple(root), "")  # type: ignore[arg-type]
            f = dataclasses.replace(
                f,
                message=f"{f.message}; {undo.note(cli_args)}{since}",
                details={
                    **f.details,
                    "source_undo": {"undo_action": undo.undo.id, "undid": undo.disable.id},
                },
            )
        out.append(f)
    return out


#: Starts what an undo note says when the source was disabled again since that undo.
DISABLED_AGAIN = "its source was disabled again by rogue-watchdog disable-source"


def disabled_again(disable_id: int, at: str) -> str:
    """``; its source was disabled again by rogue-watchdog disable-source (action 9 at
    T)``: appended to an undo note (``at``: the action's time, as alerts write it)."""
    return f"; {DISABLED_AGAIN} (action {disable_id} at {at})"


def with_own_id(f: Finding, finding_id: int) -> str:
    """``f``'s message once it is filed as ``finding_id``: its commands name ``F<id>``,
    which still works after the job exited (:func:`name_finding_in_commands`); for a
    periodic finding, in place of its latest run's PID."""
    root = f.root_pid
    periodic = f.details.get("periodic")
    if root is None and isinstance(periodic, dict) and isinstance(periodic.get("pid"), int):
        root = periodic["pid"]
    return name_finding_in_commands(f.message, root, finding_id)
