"""``gate``: run a deploy command only when its weights verify as finite.

Every refusal is logged as one structlog JSON event on stderr with stable keys:
``event="weights-refused"``, ``path``, ``reason`` (``"non-finite"`` or
``"not-verified"``), ``detail``, ``counts`` (``tensors``, ``bad_tensors``, ``nan``,
``posinf``, ``neginf``), ``exit_code`` and ``command``. Alert sinks subscribe to
these events (daemon work, not here).

The gate has a window: the command opens the weights again by name after the check, so
a writer in between ships unchecked bytes. ``ship`` (:mod:`watchdog.weights.ship`)
copies the verified bytes themselves and has none.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import structlog

from ..hosttext import safe_text
from .api import verify
from .report import Report, Status
from .scan import ProgressFn


def event_logger(stream: TextIO) -> Any:
    """A structlog logger rendering one JSON object per line to ``stream``.

    Built locally, so the process-wide structlog configuration is left alone.
    """
    return structlog.wrap_logger(
        structlog.PrintLogger(file=stream),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
    )


def log_refusals(
    report: Report, command: Sequence[str], stream: TextIO, reason: str | None = None
) -> None:
    """Emit one ``weights-refused`` event per file that did not pass.

    Args:
        report: The report.
        command: The command line refused (``gate``'s command, or ``ship SRC DST``).
        stream: Where the events go.
        reason: The event's ``reason`` when the file's status is not it
            (``ship``'s ``destination-error``); None: the file's status.
    """
    log = event_logger(stream)
    for f in report.files:
        if f.ok:
            continue
        if f.status is Status.NON_FINITE:
            names = [t.name for t in f.bad_tensors]
            detail = f"non-finite tensors: {', '.join(names[:5])}" + (
                f" and {len(names) - 5} more" if len(names) > 5 else ""
            )
        else:
            detail = f.error or "not verified"
        log.error(
            "weights-refused",
            path=str(f.path),
            reason=reason or f.status.value,
            detail=detail,
            counts=f.totals(),
            exit_code=report.exit_code,
            command=list(command),
        )


#: ``gate``'s own statuses, never the deployed command's (issue 32, case 9: gate's
#: 1 and 2 could not be told from the command's). As env(1) and timeout(1) do, gate
#: takes the top of the range for itself: a deploy command exiting 124-127 itself is
#: the one ambiguity left, and the report on stderr (or ``--json``) settles it.
GATE_REFUSED_NONFINITE = 124  # refused: a value is not finite (verify-weights' 1)
GATE_REFUSED_UNVERIFIED = 125  # refused: not verified (verify-weights' 2), or gate's usage
GATE_CANNOT_RUN = 127  # verified, but the command could not be started
_REFUSED = {1: GATE_REFUSED_NONFINITE, 2: GATE_REFUSED_UNVERIFIED}


def run_gate(
    weights: Sequence[Path],
    command: Sequence[str],
    *,
    json_output: bool = False,
    stream: TextIO | None = None,
    progress: ProgressFn | None = None,
    after_verify: Callable[[], None] | None = None,
) -> int:
    """Verify ``weights``; run ``command`` only if every value is finite.

    Args:
        weights: Files or model directories the command will ship.
        command: The deploy command and its arguments (run without a shell).
        json_output: Write the report as JSON instead of text.
        stream: Where the report and events go (default stderr; stdout is left
            to the command).
        progress: Byte progress callback.
        after_verify: Called once verification is done, before anything is
            written (the CLI ends its progress bar here).

    Returns:
        The command's exit status when it ran; :data:`GATE_REFUSED_NONFINITE` (124)
        or :data:`GATE_REFUSED_UNVERIFIED` (125) when it was refused;
        :data:`GATE_CANNOT_RUN` (127) when it could not be started.

    Raises:
        ValueError: ``command`` or ``weights`` is empty.
    """
    if not command:
        raise ValueError("gate needs a command to run")
    if not weights:
        raise ValueError("gate needs at least one --weights path")
    out = sys.stderr if stream is None else stream
    report = verify(list(weights), progress=progress)
    if after_verify is not None:
        after_verify()
    out.write((report.to_json() if json_output else report.render_text()) + "\n")
    out.flush()
    if report.exit_code != 0:
        code = _REFUSED.get(report.exit_code, GATE_REFUSED_UNVERIFIED)
        if not json_output:  # the JSON stream stays JSON: its events carry `command`
            why = "a NaN or infinity found" if code == GATE_REFUSED_NONFINITE else "not verified"
            out.write(
                f"gate: the command was not run ({why}; exit {code}): "
                f"{safe_text(shlex.join(command))}\n"
            )
        log_refusals(report, command, out)
        return code
    try:
        return subprocess.run(list(command), check=False).returncode
    except OSError as exc:
        if not json_output:  # in words, as every other way gate does not run it
            why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            out.write(
                f"gate: the command was not run (the weights verified, but it could not be "
                f"started: {why}; exit {GATE_CANNOT_RUN}): {safe_text(shlex.join(command))}\n"
            )
        event_logger(out).error(
            "gate-command-failed", command=list(command), error=f"{type(exc).__name__}: {exc}"
        )
        return GATE_CANNOT_RUN
