"""How every output spells what a finding is about: severities, sizes, finding ids.

Apart from :mod:`watchdog.model` so that ``rogue-watchdog status`` renders the daemon's
answer without building the model's records (their dataclasses cost about as much to
import as the rest of the client).
"""

from __future__ import annotations

from typing import Literal, get_args

# Ascending: a sink's ``min_severity`` compares by position in SEVERITIES.
Severity = Literal["info", "warning", "high", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# Findings at these severities make `scan` and `status` exit 1; `info` ones do not.
REPORTED_SEVERITIES: tuple[Severity, ...] = SEVERITIES[SEVERITIES.index("warning") :]


def finding_ref(finding_id: int | None) -> str:
    """How every output spells a finding id: ``F12`` (``-`` when it has none yet).

    ``terminate`` and ``disable-source`` accept this spelling, and ``#12`` too.
    """
    return "-" if finding_id is None else f"F{finding_id}"


def fmt_bytes(n: int | None) -> str:
    """``1.5 GiB`` style size, or ``unknown`` for None."""
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def optional(value: object, template: str = "{}") -> str:
    """``template`` with ``value`` in it, or "" when there is no value to say.

    A message never says a Python ``None`` (nor an empty pair of parentheses): an
    optional part (what stops a job, why events are unavailable, a cron line's schedule)
    is left out when it is None or blank (trust simulator, seed 91001: a remediation-failed
    page read "…(the line that started it was not found) (None)").

    Args:
        value: The optional value (rendered with ``str``).
        template: Where it goes, with one ``{}``: ``" ({})"``, ``"; {}"``.

    Returns:
        The filled template, or "".
    """
    if value is None:
        return ""
    text = str(value)
    return template.format(text) if text.strip() else ""
