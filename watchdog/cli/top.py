"""``rogue-watchdog top`` (also ``status --watch``): a live view for the person at the terminal.

Every refresh asks the daemon over its status socket (docs/status.md); when no daemon runs
it scans this host itself, and says which. The screen is laid out to the terminal, as
nvitop and htop do: the title, the keys and the GPUs with the memory sanctioned and
unsanctioned jobs hold stay at the top, the job list scrolls under them with the selected
job always on screen (its origin and command whole under the list), then the open findings
and a status line. Keys scroll (j/k, arrows, PgUp/PgDn, Home/End), sort (M GPU memory,
U user, A age, V verdict, P PID, I invert), filter (``/``) and act on the selected job
through the ordinary commands, so every guard of ``terminate`` and ``disable-source``
applies and both show their dry run and ask for ``y`` first. ``e`` opens the explanation
in a pane that scrolls with the same keys.

The terminal is put in cbreak mode (no echo, keys one at a time) and drawn with plain ANSI
sequences on the alternate screen; it is restored on exit, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shlex
import sys
import termios
import time
import tty
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import command
from ..hosttext import code_span
from ..lineage.base import is_interpreter, script_argument
from ..render import (
    fit,
    paint,
    printable,
    shorten_command,
    shorten_path_words,
    use_colour,
)
from ..sources.procfs import boot_time_s
from ..spelling import finding_ref
from .common import configure_logging, resolve_config_path, socket_path

#: The keys line of the list (wrapped to the terminal's width).
KEYS = (
    "↑/↓ or j/k select  PgUp/PgDn Home/End  / filter  sort: M mem U user A age V verdict "
    "P pid I invert  e explain  t terminate  d disable-source  r refresh  q quit"
)
#: The keys line on a terminal too narrow for :data:`KEYS` on one line.
KEYS_SHORT = "↑↓ jk PgUp/Dn Home/End  /filter  sort M U A V P I  e explain t term d disable q"
#: The keys line while a pane (an explanation, a command's output) is shown.
PANE_KEYS = (
    "q/Esc: back to the list  ↑/↓ or j/k scroll  ←/→ or h/l wide lines  PgUp/PgDn Home/End  "
    "t terminate  d disable-source"
)
#: The question under a dry run's plan.
CONFIRM = "press y to do what the dry run above says, any other key to cancel"
#: Sort orders: the key that picks each, and the words the list header shows.
SORTS = {"M": "GPU memory", "U": "user", "A": "age", "V": "verdict", "P": "PID"}
#: Verdicts from most to least in need of a person (the verdict sort).
VERDICT_RANK = {"rogue": 0, "excess": 1, "unknown": 2, "ignored": 3, "sanctioned": 4}
#: Escape sequences of the keys the view knows (xterm, tmux/screen and VT forms).
SEQUENCES = {
    "\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down",
    "\x1b[5~": "pgup", "\x1b[6~": "pgdn",
    "\x1b[H": "home", "\x1bOH": "home", "\x1b[1~": "home", "\x1b[7~": "home",
    "\x1b[F": "end", "\x1bOF": "end", "\x1b[4~": "end", "\x1b[8~": "end",
    "\x1b[D": "left", "\x1bOD": "left", "\x1b[C": "right", "\x1bOC": "right",
}  # fmt: skip
#: Columns ←/→ scroll a pane's wide lines by.
SIDE_STEP = 20
#: The list's columns (after the 2-column mark): verdict, PID, user, GPU, memory, age.
_HEAD = f"{'VERDICT':<10} {'PID':>7} {'USER':<10} {'GPU':<5} {'GPU MEM':>8} {'AGE':>6}"

# The installed import name (rogue_watchdog), for `python -m`: never written out
# (docs/dependencies.md).
_PACKAGE = __name__.rsplit(".", 2)[0]


def local_doc(config_path: str | None) -> dict[str, Any]:
    """A status-shaped document from one local scan (no daemon running).

    Raises:
        ConfigError: The configuration does not validate.
    """
    from ..config import load_config
    from ..render import gpu_json
    from ..scan import Scanner

    config = load_config(config_path)
    result = Scanner(config).scan()
    return {
        "host": result.host,
        "nvml": {"available": result.nvml.available, "error": result.nvml.error},
        "gpus": [gpu_json(g) for g in result.gpus],
        "jobs": [
            {
                "root_pid": j.root_pid,
                "pids": list(j.pids),
                "user": j.user,
                "cmdline": list(j.cmdline),
                "verdict": j.verdict,
                "origin": j.origin.describe(),
                "gpu_memory_bytes": j.gpu_memory_bytes,
                "gpus": [g.to_json() for g in j.gpus],
                "start_ticks": j.start_ticks,
                "stop": j.advice.stop_line(j.root_pid) if j.unsanctioned else None,
                "restarts": (
                    j.advice.restarts.line() if j.unsanctioned and j.advice.restarts else None
                ),
            }
            for j in result.jobs
        ],
        "findings": [
            {
                "id": None,
                "severity": f.severity,
                "kind": f.kind,
                "message": f.message,
                "root_pid": f.root_pid,
            }
            for f in result.findings
        ],
    }


def fetch(socket: str, config_path: str | None, timeout_s: float) -> tuple[dict[str, Any], str]:
    """The daemon's status document, else a local scan's; and where it came from."""
    from ..daemon.ipc import StatusError, query_status

    try:
        return query_status(socket, timeout_s=timeout_s), f"daemon ({socket})"
    except StatusError as exc:
        if exc.exit_code != 3:
            raise
    return local_doc(config_path), "local scan (no daemon running)"


# -- the view's state --------------------------------------------------------------------


@dataclass
class Pane:
    """Text shown instead of the list (an explanation, a plan, a command's output).

    Attributes:
        title: Its first line (what it is and how to leave it).
        text: The text, lines not yet wrapped.
        top: First wrapped line shown.
        left: First column shown (a command wider than the pane is never wrapped inside
            itself: it is cut with ``»`` and ←/→ scroll to its rest).
        confirm: The command ``y`` runs (a dry run's plan is shown), else None.
        what: What ``y`` would do, in words, for the question.
    """

    title: str
    text: str
    top: int = 0
    left: int = 0
    confirm: list[str] | None = None
    what: str = ""


@dataclass
class View:
    """What the person chose: the selected job (by root PID, so a refresh or a new sort
    keeps it), the first row shown, the sort, the filter and an open pane.

    Attributes:
        selected: Root PID of the selected job (None: the first one).
        top: Index of the first job row shown.
        sort: A key of :data:`SORTS`.
        reverse: The sort inverted (``I``).
        query: The filter (case-insensitive words: a job shows when it holds each).
        typing: The filter is being typed (keys go to it).
        pane: The pane shown, if any.
        note: A line for the status line (a command's outcome, a cancel).
        page: Rows of the last list or pane drawn (PgUp/PgDn move by it).
    """

    selected: int | None = None
    top: int = 0
    sort: str = "M"
    reverse: bool = False
    query: str = ""
    typing: bool = False
    pane: Pane | None = None
    note: str = ""
    page: int = 10
    btime_s: float | None = field(default=None, repr=False)


def keys_of(data: str) -> list[str]:
    """The keys in what one read returned: a known escape sequence is one key named in
    :data:`SEQUENCES`, an unknown one is dropped whole, a lone Esc is ``esc``."""
    out: list[str] = []
    i = 0
    ordered = sorted(SEQUENCES, key=len, reverse=True)
    while i < len(data):
        if data[i] != "\x1b":
            out.append(data[i])
            i += 1
            continue
        seq = next((s for s in ordered if data.startswith(s, i)), None)
        if seq is not None:
            out.append(SEQUENCES[seq])
            i += len(seq)
        elif data[i + 1 : i + 2] in ("[", "O"):
            j = i + 2
            while j < len(data) and not "@" <= data[j] <= "~":
                j += 1
            i = j + 1  # an unknown sequence (F1, a mouse report): ignored whole
        else:
            out.append("esc")
            i += 1
    return out


def job_age_s(job: dict[str, Any], now: float, btime_s: float | None) -> float | None:
    """Seconds since the job's root started (``start_ticks`` after boot), or None."""
    ticks = job.get("start_ticks")
    if btime_s is None or not isinstance(ticks, int):
        return None
    return max(0.0, now - (btime_s + ticks / os.sysconf("SC_CLK_TCK")))


def _words(job: dict[str, Any]) -> str:
    gpus = " ".join(f"gpu{h.get('index')}" for h in job.get("gpus") or [])
    parts = [str(job.get("root_pid")), str(job.get("user") or ""), str(job.get("verdict"))]
    parts += [str(job.get("origin") or ""), " ".join(map(str, job.get("cmdline") or [])), gpus]
    return " ".join(parts).lower()


def shown_jobs(doc: dict[str, Any], view: View, now: float) -> list[dict[str, Any]]:
    """The jobs the list shows: those matching the filter, in the chosen order (ties by
    root PID, so rows do not jump between refreshes)."""
    jobs = [j for j in doc.get("jobs") or [] if isinstance(j, dict)]
    words = view.query.lower().split()
    if words:
        jobs = [j for j in jobs if all(w in _words(j) for w in words)]

    def key(j: dict[str, Any]) -> tuple[Any, ...]:
        pid = j.get("root_pid") if isinstance(j.get("root_pid"), int) else 0
        if view.sort == "U":
            return (str(j.get("user") or "~"), pid)
        if view.sort == "A":
            age = job_age_s(j, now, view.btime_s)
            return (-(age if age is not None else -1.0), pid)  # oldest first
        if view.sort == "V":
            return (VERDICT_RANK.get(str(j.get("verdict")), 2), pid)
        if view.sort == "P":
            return (pid,)
        mem = j.get("gpu_memory_bytes")
        return (-(mem if isinstance(mem, int) else -1), pid)  # most GPU memory first

    return sorted(jobs, key=key, reverse=view.reverse)


def _index(jobs: list[dict[str, Any]], view: View) -> int:
    for i, j in enumerate(jobs):
        if j.get("root_pid") == view.selected:
            return i
    return 0


def move(view: View, jobs: list[dict[str, Any]], key: str) -> None:
    """Apply a movement key to the selection (list) or the scroll position (pane)."""
    if view.pane is not None:
        step = {"up": -1, "k": -1, "down": 1, "j": 1, "pgup": -view.page, "pgdn": view.page}
        if key in step:
            view.pane.top = max(0, view.pane.top + step[key])
        elif key in ("home", "g"):
            view.pane.top = 0
        elif key in ("end", "G"):
            view.pane.top = 1 << 30  # clamped when drawn
        elif key in ("left", "h"):
            view.pane.left = max(0, view.pane.left - SIDE_STEP)
        elif key in ("right", "l"):
            view.pane.left += SIDE_STEP  # clamped when drawn
        return
    if not jobs:
        return
    i = _index(jobs, view)
    step = {"up": -1, "k": -1, "down": 1, "j": 1, "pgup": -view.page, "pgdn": view.page}
    if key in step:
        i += step[key]
    elif key in ("home", "g"):
        i = 0
    elif key in ("end", "G"):
        i = len(jobs) - 1
    i = max(0, min(i, len(jobs) - 1))
    view.selected = jobs[i].get("root_pid")


MOVES = frozenset(
    {"up", "down", "j", "k", "pgup", "pgdn", "home", "end", "g", "G", "left", "right", "h", "l"}
)


# -- the screen ----------------------------------------------------------------------------


def _age_text(age_s: float | None) -> str:
    if age_s is None:
        return "-"
    s = int(age_s)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _mem_text(n: object) -> str:
    if not isinstance(n, int):
        return "-"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return "-"


def _status_cmd(doc: dict[str, Any]) -> str:
    """``rogue-watchdog status`` as it finds this daemon when pasted (its ``--config``)."""
    from ..hostpaths import config_args

    path = (doc.get("config") or {}).get("path")
    return f"rogue-watchdog status{config_args(path if isinstance(path, str) else None)}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def side_cut(line: str, left: int, width: int) -> str:
    """``line`` from column ``left``, at most ``width`` columns: ``«`` first where columns
    are hidden to the left, ``»`` last where more follow (a pane's command wider than the
    terminal, shown whole by scrolling instead of wrapped inside itself)."""
    if left > 0 and line:
        line = "«" + line[left + 1 :] if len(line) > left else ""
    return line if len(line) <= width else line[: max(0, width - 1)] + "»"


def _gpu_block(doc: dict[str, Any], width: int, budget: int) -> list[str]:
    """The GPUs: their full lines (memory split, UUID whole) when they fit in ``budget``
    rows, else one line per GPU, else as many as fit and how many more there are."""
    from ..daemon.status import status_gpu_lines

    gpus = [g for g in doc.get("gpus") or [] if isinstance(g, dict)]
    if not gpus:
        nvml = doc.get("nvml") or {}
        return fit(printable(f"  no GPUs listed (NVML: {nvml.get('error') or 'none'})"), width)[
            : max(1, budget)
        ]
    full = status_gpu_lines(doc, width)
    if len(full) <= budget:
        return full
    jobs = doc.get("jobs") or []
    lines = []
    for g in gpus:
        bad = sum(
            h.get("memory_bytes") or 0
            for j in jobs
            if j.get("verdict") not in ("sanctioned", "ignored")
            for h in j.get("gpus") or []
            if h.get("uuid") == g.get("uuid")
        )
        mig = f" MIG {g['mig_index']}" if g.get("mig_index") is not None else ""
        used, total = g.get("memory_used_bytes"), g.get("memory_total_bytes")
        text = printable(
            f"  GPU {g.get('index')}{mig} {g.get('name') or '-'}  {_mem_text(used)}/"
            f"{_mem_text(total)}  unsanctioned {_mem_text(bad)}"
        )
        uuid = printable(str(g.get("uuid") or "-"))
        # A cut UUID identifies nothing: whole, or left to `status`.
        lines.append(f"{text}  {uuid}" if len(text) + 2 + len(uuid) <= width else _cut(text, width))
    if len(lines) <= budget:
        return lines
    # The command on a line of its own when the line is narrow: never wrapped inside.
    tail = fit(f"… {len(lines)} more GPU(s): `{_status_cmd(doc)}` lists all", width, "    ", "  ")
    keep = max(1, budget - len(tail))
    more = f"… {len(lines) - keep} more GPU(s): `{_status_cmd(doc)}` lists all"
    return [*lines[:keep], *fit(more, width, "    ", "  ")]


def _row(
    j: dict[str, Any],
    mark: str,
    width: int,
    colour: bool,
    now: float,
    view: View,
    *,
    shared: bool = False,
) -> str:
    """One job's line of the list; ``shared``: another listed job has the same origin
    (then a row too narrow for both shows the command beside a cut origin)."""
    verdict = str(j.get("verdict") or "-")
    user = printable(str(j.get("user") or "-"))
    on = ",".join(str(h.get("index")) for h in j.get("gpus") or []) or "-"
    age = _age_text(job_age_s(j, now, view.btime_s))
    cells = (
        f"{mark} {verdict:<10} {j.get('root_pid')!s:>7} {user:<10} {on:<5} "
        f"{_mem_text(j.get('gpu_memory_bytes')):>8} {age:>6} "
    )
    room = width - len(cells)
    origin = printable(str(j.get("origin") or "-"))
    # Path words keep their last part (`cron …/ghost:1`): cut from the right, two cron
    # lines of one directory read the same (`cron /work/fresh-try/cron…`).
    rest = shorten_path_words(origin, room)
    cmdline = j.get("cmdline") or []
    if room > len(origin) + 8:
        rest = f"{origin} · {shorten_command(cmdline, room - len(origin) - 3)}"
    elif shared and cmdline and room >= 24:
        # Too narrow for both, and the origin tells it from no other listed job: half
        # each, the command by what tells runs apart (the script an interpreter runs,
        # else the program): thirty runs from one tmux session read the same (the new
        # user's hour, issue 33).
        argv = [str(a) for a in cmdline]
        script = script_argument(argv) if is_interpreter(argv[0]) else None
        start = argv.index(script) if script is not None else 0
        words = " ".join(printable(a) for a in [argv[start].rsplit("/", 1)[-1], *argv[start + 1 :]])
        head = _cut(shorten_path_words(origin, room // 2), room // 2)
        rest = f"{head} · {_cut(words, room - len(head) - 3)}"
    line = _cut(cells + rest, width)
    if colour and len(line) >= 12:  # the verdict cell, padded, never cut
        line = line[:2] + paint(line[2:12], verdict, colour) + line[12:]
    return line


def _detail(j: dict[str, Any], width: int) -> list[str]:
    """The selected job, whole: its origin (identifiers are never cut), its command and
    what restarts it."""
    origin = printable(str(j.get("origin") or "-"))
    lines = fit(origin, width, "    ", f"  PID {j.get('root_pid')} from ")
    lines.append("    " + shorten_command(j.get("cmdline") or [], max(20, width - 4)))
    if j.get("restarts"):  # what starts it again: terminate alone will not keep it away
        lines += fit(printable(str(j["restarts"])), width, "    ", "    ")
    return lines


#: Severities from most to least urgent (the findings under the list).
SEVERITY_RANK = {"critical": 0, "high": 1, "warning": 2, "info": 3}


def _finding_pids(f: dict[str, Any]) -> set[int]:
    pids = {p for p in f.get("root_pids") or [] if isinstance(p, int)}
    return pids | ({f["root_pid"]} if isinstance(f.get("root_pid"), int) else set())


def shown_findings(
    doc: dict[str, Any], view: View, jobs: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], int]:
    """The open findings under the list, and how many there are in all.

    They follow the list: with a filter, only the findings about a job it shows or whose
    own text holds each word. Critical ones first (a selection never pushes one off the
    screen: fresh user F, issue 33), then those about the selected job, then by severity,
    then as the daemon lists them.

    Args:
        doc: The status document.
        view: The person's choices (the filter, the selected job).
        jobs: The jobs the list shows (:func:`shown_jobs`).
    """
    found = [f for f in doc.get("findings") or [] if isinstance(f, dict)]
    words = view.query.lower().split()
    if words:
        listed = {j.get("root_pid") for j in jobs}

        def matches(f: dict[str, Any]) -> bool:
            text = f"{finding_ref(f.get('id'))} {f.get('kind')} {f.get('message')}".lower()
            return bool(_finding_pids(f) & listed) or all(w in text for w in words)

        shown = [f for f in found if matches(f)]
    else:
        shown = found
    order = sorted(
        range(len(shown)),
        key=lambda i: (
            shown[i].get("severity") != "critical",
            view.selected not in _finding_pids(shown[i]),
            SEVERITY_RANK.get(str(shown[i].get("severity")), 4),
            i,
        ),
    )
    return [shown[i] for i in order], len(found)


def _findings(
    doc: dict[str, Any],
    width: int,
    budget: int,
    colour: bool,
    view: View,
    jobs: list[dict[str, Any]],
) -> list[str]:
    """The findings block: a head line, then one line per finding (``*`` marks those
    about the selected job) while ``budget`` lasts."""
    found, total = shown_findings(doc, view, jobs)
    shown = found[: max(0, budget - 1)]
    head = f"  open findings: {len(found)}"
    if view.query:
        head += f" matching '{printable(view.query)}' (of {total})"
    if len(shown) < len(found):
        head += f" ({len(shown)} shown; `{_status_cmd(doc)}` lists all)"
    lines = fit(head, width, "    ")[:2]
    # The id column as wide as its widest (F12345 kept the severities in line too).
    ref_w = max([5, *(len(finding_ref(f.get("id"))) for f in shown)])
    for f in shown:
        sev = str(f.get("severity") or "-")
        ref = finding_ref(f.get("id"))
        mark = "*" if view.selected is not None and view.selected in _finding_pids(f) else " "
        room = max(10, width - 12 - ref_w)
        text = _cut(printable(f"{f.get('kind')}: {f.get('message')}"), room)
        lines.append(f"{mark} {ref:<{ref_w}} {paint(f'{sev:<8}', sev, colour)} {text}")
    return lines


def layout(
    doc: dict[str, Any],
    source: str,
    view: View,
    width: int,
    rows: int,
    colour: bool = False,
    now: float | None = None,
) -> list[str]:
    """The screen for one refresh: at most ``rows`` lines of at most ``width`` columns.

    The title and keys (wrapped, never cut: the socket path identifies the daemon), the
    GPUs and the status line are always there; the list (or the pane) gets the rest and
    scrolls so the selected job is on screen. Updates ``view.top``, ``view.page`` and
    ``view.selected`` (a selection that left the list moves to the nearest row).

    Args:
        doc: The status document shown.
        source: Where it came from (the daemon's socket, or a local scan).
        view: The person's choices (changed as said above).
        width: Terminal columns.
        rows: Terminal rows.
        colour: Colour verdicts and severities.
        now: POSIX time for the jobs' age (default: now).
    """
    now = time.time() if now is None else now
    width = max(20, width)
    title = printable(
        f"rogue-watchdog top  host {doc.get('host') or '-'}  {time.strftime('%H:%M:%S')}"
        f"  from {source}"
    )
    keys = PANE_KEYS if view.pane else KEYS if len(KEYS) <= width else KEYS_SHORT
    head = [*fit(title, width, "  "), *fit(keys, width, "  ")]
    left = rows - len(head) - 1
    gpus = _gpu_block(doc, width, max(1, min(left // 3, 16)))
    left -= len(gpus)
    if view.pane is not None:
        status = _status_line(view, width, "")
        return [*head, *gpus, *_pane(view, width, max(1, left)), status][: max(0, rows)]
    jobs = shown_jobs(doc, view, now)
    total = len(doc.get("jobs") or [])
    order = ("inverted " if view.reverse else "") + SORTS.get(view.sort, "GPU memory")
    where = f"job {_index(jobs, view) + 1} of {len(jobs)}" if jobs else "no job"
    filt = f" matching '{printable(view.query)}' (of {total})" if view.query else ""
    status = _status_line(view, width, f"{where}{filt}, by {order}")
    header = _cut(f"  {_HEAD} ORIGIN · COMMAND", width)
    chosen = jobs[_index(jobs, view)] if jobs else None
    detail = _detail(chosen, width) if chosen is not None and left >= 12 else []
    if chosen is not None:
        view.selected = chosen.get("root_pid")  # the findings follow the selection
    budget = max(1, min(left // 5, 8))
    # Rows the job list does not need go to the findings (at 200x50, 33 blank rows sat
    # under a short list while 7 of 221 findings were shown: fresh user F).
    spare = left - 1 - len(detail) - (1 + max(1, len(jobs))) - 2
    budget = max(budget, spare)
    findings = _findings(doc, width, budget, colour, view, jobs) if left >= 8 else []
    room = max(1, left - 1 - len(detail) - len(findings))
    view.page = max(1, room - 1)
    body: list[str] = [header]
    if not jobs:
        body.append("  no training jobs" + (" match the filter" if view.query else ""))
    else:
        i = _index(jobs, view)
        view.selected = jobs[i].get("root_pid")
        view.top = max(0, min(view.top, i, len(jobs) - room))
        if i >= view.top + room:
            view.top = i - room + 1
        origins = Counter(str(j.get("origin") or "-") for j in jobs)
        for n in range(view.top, min(len(jobs), view.top + room)):
            shared = origins[str(jobs[n].get("origin") or "-")] > 1
            mark = ">" if n == i else " "
            body.append(_row(jobs[n], mark, width, colour, now, view, shared=shared))
    body = body[: 1 + room]
    body += [""] * (1 + room - len(body))  # the findings stay where they are
    screen = [*head, *gpus, *body, *detail, *findings, status][: max(0, rows)]
    # A line wider than the terminal would wrap there and push the frame down.
    return [x if "\x1b" in x else side_cut(x, 0, width) for x in screen]


def _pane(view: View, width: int, room: int) -> list[str]:
    pane = view.pane
    assert pane is not None
    lines: list[str] = []
    for x in pane.text.splitlines():
        x = printable(x)
        # At word boundaries, under the line's own indent (an explanation's tree); a
        # command or a word longer than the line keeps a line of its own, whole: cut
        # visibly at the edge, ←/→ show the rest (a wrapped half pasted did not run).
        lead = x[: len(x) - len(x.lstrip())][: width // 2]
        lines += fit(x.lstrip(), width, lead + "  ", lead) if x.strip() else [""]
    room_text = max(1, room - 1)
    view.page = max(1, room_text - 1)
    pane.top = max(0, min(pane.top, len(lines) - room_text))
    wide = max((len(x) for x in lines), default=0)
    pane.left = max(0, min(pane.left, wide - width + 1)) if wide > width else 0
    shown = [side_cut(x, pane.left, width) for x in lines[pane.top : pane.top + room_text]]
    where = f"lines {pane.top + 1}-{pane.top + len(shown)} of {len(lines)}"
    if wide > width:
        where += f", columns {pane.left + 1}-{min(wide, pane.left + width)} of {wide}: ←/→"
    bar = _cut(f"── {pane.title} ({where}) ──", width)
    return [bar, *shown, *[""] * (room_text - len(shown))]


def _status_line(view: View, width: int, where: str) -> str:
    """The last line: the filter being typed, the question under a plan, else where the
    selection is (and the sort, the filter), and a command's outcome."""
    if view.typing:
        return _cut(f"/ filter: {printable(view.query)}_  (Enter: keep, Esc: clear)", width)
    if view.pane is not None and view.pane.confirm is not None:
        return _cut(CONFIRM, width)
    note = printable(view.note)
    return _cut(f"{where}  {note}" if where and note else where or note, width)


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        sys.stdout.write("\x1b[?1049h\x1b[?25l")  # alternate screen, hide the cursor
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
        sys.stdout.write("\x1b[?25h\x1b[?1049l")
        sys.stdout.flush()


def _read_keys(fd: int, timeout_s: float) -> list[str]:
    ready, _, _ = select.select([fd], [], [], timeout_s)
    if not ready:
        return []
    return keys_of(os.read(fd, 64).decode(errors="replace"))


def _draw(lines: list[str]) -> None:
    # Each line overwrites the last frame's and clears its rest; no full clear (flicker).
    sys.stdout.write("\x1b[H" + "\x1b[K\r\n".join(lines) + "\x1b[K\x1b[J")
    sys.stdout.flush()


def _run(argv: list[str]) -> tuple[int, str]:
    """Run one of our commands: its exit status, and its output for the screen."""
    # Its stderr is a pipe here but its reader is a person: human log lines. Its stdin
    # is /dev/null: the terminal's keys are the live view's.
    done = command.run([sys.executable, "-m", _PACKAGE, "--log-format", "human", *argv], 120)
    text = (done.stdout + done.stderr).rstrip()
    return done.returncode, f"exit {done.returncode}: rogue-watchdog {shlex.join(argv)}\n{text}"


def handle(view: View, key: str, jobs: list[dict[str, Any]], common: list[str]) -> bool:
    """Apply one key; False to quit. Commands run here (they block the screen briefly)."""
    if view.typing:
        if key in ("\r", "\n"):
            view.typing = False
        elif key == "esc":
            view.query, view.typing = "", False
        elif key in ("\x7f", "\x08"):
            view.query = view.query[:-1]
        elif len(key) == 1 and key.isprintable():
            view.query += key
        view.top = 0
        return True
    if view.pane is not None:
        if key in MOVES:
            move(view, jobs, key)
        elif view.pane.confirm is not None and key == "y":
            argv = view.pane.confirm
            _code, out = _run(argv)
            view.pane = Pane(f"{view.pane.what}: output (q/Esc: back)", out)
        elif view.pane.confirm is not None:
            view.note = f"{view.pane.what}: cancelled"
            view.pane = None
        elif key in ("q", "esc"):
            view.pane = None
        elif key in ("e", "t", "d"):  # act on the job explained, as from the list
            view.pane = None
            return handle(view, key, jobs, common)
        return True
    if key in ("q", "\x03"):
        return False
    if key in MOVES:
        move(view, jobs, key)
    elif key in SORTS:
        # As nvitop: the key of the sort in force inverts it; another key sorts by that,
        # in its own order (an inversion kept across keys read "by inverted GPU memory"
        # after M: the new user's hour, issue 33).
        view.reverse = not view.reverse if key == view.sort else False
        view.sort, view.top = key, 0
    elif key == "I":
        view.reverse = not view.reverse
    elif key == "/":
        view.typing = True
    elif key == "r":
        view.note = ""
    elif key in ("e", "t", "d") and jobs:
        job = jobs[_index(jobs, view)]
        pid = str(job.get("root_pid"))
        if key == "e":
            _code, out = _run(["explain", pid, *common])
            view.pane = Pane(f"explanation of PID {pid} (q/Esc: back)", out)
            return True
        verb = "terminate" if key == "t" else "disable-source"
        what = shorten_command(job.get("cmdline") or [], 60)
        # The plan first, from the command itself (the one guard decides): a refusal
        # is shown and nothing is asked; else the plan is what `y` does.
        code, plan = _run([verb, pid, "--dry-run", *common])
        if code != 0:
            view.pane = Pane(f"{verb} PID {pid} refused (q/Esc: back)", plan)
            return True
        question = printable(f"{verb} the {job.get('verdict')} job PID {pid} {code_span(what)}?")
        view.pane = Pane(
            f"{verb} PID {pid}: the dry run", f"{plan}\n\n{question}",
            confirm=[verb, pid, *common],
            what=f"{verb} PID {pid}",
        )  # fmt: skip
    return True


def run(args: argparse.Namespace) -> int:
    """The live view's loop; returns the exit code (0 on ``q``, 2 without a terminal)."""
    from ..daemon.ipc import StatusError

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("rogue-watchdog: the live view needs a terminal; use `status`", file=sys.stderr)
        return 2
    socket = socket_path(args)
    # A local scan's log events would scribble over the screen; what matters is drawn.
    configure_logging(open(os.devnull, "w"))  # noqa: SIM115 - for the process's lifetime
    config_path = resolve_config_path(args.config)
    common = [*(["--config", config_path] if config_path else [])]
    fd = sys.stdin.fileno()
    view = View(btime_s=boot_time_s())
    colour = use_colour()
    doc: dict[str, Any] = {}
    source = ""
    next_fetch = 0.0
    with _cbreak(fd):
        while True:
            if time.monotonic() >= next_fetch:
                try:
                    doc, source = fetch(socket, config_path, args.timeout)
                except StatusError as exc:
                    doc, source = {}, f"nowhere: {exc}"
                if config_path is None:
                    # The daemon's own file, named: the commands judge under it, as they
                    # would after asking the daemon, without saying so on the screen.
                    daemon_path = (doc.get("config") or {}).get("path")
                    common = ["--config", daemon_path] if daemon_path else []
                next_fetch = time.monotonic() + args.interval
            size = os.get_terminal_size(sys.stdout.fileno())
            _draw(layout(doc, source, view, size.columns, size.lines, colour))
            keys = _read_keys(fd, max(0.05, next_fetch - time.monotonic()))
            for key in keys:
                jobs = shown_jobs(doc, view, time.time())
                if not handle(view, key, jobs, common):
                    return 0
                if key == "r":
                    next_fetch = 0.0
