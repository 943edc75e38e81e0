"""``rogue-watchdog report``: the week (or any window) as one view, from the state database.

Per origin and per user: runs and GPU-hours. The timeline of incidents in order: findings
opened and resolved (rogue and excess jobs, respawns with their interval, ship-gate
refusals, stale deploys, blind GPUs...), actions taken and undone. What is still open.
Three forms: text that fits 80 columns, JSON, and one self-contained HTML file (no
external script, font or style: air-gapped hosts) with a timeline per GPU of which job
held it, coloured by verdict, incidents marked, and the tables below.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .hosttext import command_text, outside_code, replace_outside_code, safe_text
from .model import GpuInfo, origin_from_json
from .render import fit
from .state import ActionRecord, FindingRecord, RunRecord

WIDTH = 80
#: Most characters of a command in a per-origin row's name (longer ones shorten their
#: paths first, :func:`watchdog.hosttext.command_text`).
NAME_MAX = 300
#: The ``meta`` key under which the daemon keeps every GPU it saw (UUID -> index, name,
#: MIG index): runs record UUIDs only, and the report names each row by index and name.
GPU_INVENTORY_KEY = "gpus"


def gpu_inventory(known: dict[str, Any], gpus: Sequence[GpuInfo]) -> dict[str, Any] | None:
    """``known`` with the GPUs of a scan added or updated, or None when nothing changed
    (a GPU that left keeps its entry: last week's runs still name it)."""
    merged = dict(known)
    for g in gpus:
        merged[g.uuid] = {"index": g.index, "name": g.name, "mig_index": g.mig_index}
    return merged if merged != known else None


@dataclass(frozen=True)
class Event:
    """One entry of the timeline.

    Attributes:
        time: POSIX time.
        what: ``opened``, ``resolved``, ``action`` or ``undone``.
        kind: The finding's kind or the action's kind.
        severity: The finding's severity; ``-`` for actions.
        text: One sentence (host text escaped).
        gpus: UUIDs of the GPUs it concerns (the job's), empty when none is known: the
            HTML timeline marks it on those rows only.
    """

    time: float
    what: str
    kind: str
    severity: str
    text: str
    gpus: tuple[str, ...] = ()


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S")


#: Finding kinds about one job's run: the run was rogue (excess) while one was open.
JOB_FINDINGS = {
    "rogue-job": "rogue", "excess-instances": "excess", "respawned": "rogue",
    "remediation-failed": "rogue",
}  # fmt: skip


def run_of(f: FindingRecord, runs: Sequence[RunRecord]) -> RunRecord | None:
    """The run a job finding is about: by the job identity it recorded (root PID and
    start ticks), else the run of its root PID seen when it opened."""
    root = f.details.get("root") if isinstance(f.details, dict) else None
    for r in runs:
        if root == [r.root_pid, r.start_ticks]:
            return r
    if f.root_pid is None:
        return None
    return next(
        (
            r
            for r in runs
            if r.root_pid == f.root_pid and r.started_at - 60 <= f.opened_at <= r.last_seen + 60
        ),
        None,
    )


def finding_gpus(f: FindingRecord, runs: Sequence[RunRecord]) -> tuple[str, ...]:
    """UUIDs of the GPUs a finding concerns: those its details name, else its run's."""
    held = f.details.get("gpus") if isinstance(f.details, dict) else None
    named = [g.get("uuid") for g in held or [] if isinstance(g, dict)]
    if any(isinstance(u, str) for u in named):
        return tuple(sorted({u for u in named if isinstance(u, str)}))
    run = run_of(f, runs) if f.kind in JOB_FINDINGS else None
    return tuple(run.gpus or []) if run is not None else ()


#: The cron file a finding's message names (``from cron FILE:LINE``), in a record that
#: predates ``details.origin_label``.
_CRON_FILE = re.compile(r"\bcron (\S+):\d+\b")
#: How a refreshed message says its cron line was commented out after the run started.
SINCE_DISABLED = ", entry since disabled"


def _cron_file(f: FindingRecord) -> str | None:
    """The crontab ``f``'s job came from, from its details (``origin_kind`` and
    ``origin_label`` ``FILE:LINE``), else from the product's own words in its message
    (never from a quoted command line, which may name any file)."""
    details = f.details if isinstance(f.details, dict) else {}
    kind, label = details.get("origin_kind"), details.get("origin_label")
    if kind is not None:
        if kind != "cron" or not isinstance(label, str):
            return None
        path, _, line = label.rpartition(":")
        return path if path and line.isdigit() else None
    named = _CRON_FILE.search(outside_code(f.message))
    return named.group(1) if named is not None else None


def when_disabled(f: FindingRecord, actions: Sequence[ActionRecord]) -> str:
    """``f``'s message, its ``entry since disabled`` saying when and by what where an
    action did it: ``entry disabled at 13:00:10 (A1)``. The message is refreshed as the
    source changes, and the timeline shows it at the finding's opening: `opened 13:00:01
    ... entry since disabled` read as if the line was already off then (issue 33).

    Only the product's own words count: a command line quoted in the message may read
    ``from cron FILE:1, entry since disabled`` (hostile tester i)."""
    if SINCE_DISABLED not in outside_code(f.message):
        return f.message
    cron_file = _cron_file(f)
    done = [
        a for a in actions
        if a.kind == "disable-source" and a.outcome == "ok" and not a.dry_run
        and (a.finding_id == f.id or (cron_file is not None and a.target == cron_file))
    ]  # fmt: skip
    if not done:
        return f.message
    first = min(done, key=lambda a: a.created_at)
    at = datetime.fromtimestamp(first.created_at).astimezone().strftime("%H:%M:%S")
    said = f", entry disabled at {at} (A{first.id})"
    return replace_outside_code(f.message, SINCE_DISABLED, said)


def timeline(
    findings: Sequence[FindingRecord],
    actions: Sequence[ActionRecord],
    since: float,
    runs: Sequence[RunRecord] = (),
) -> list[Event]:
    """Every finding opened or resolved and every action taken or undone since
    ``since``, oldest first (ties: finding before action, by id), each with the GPUs it
    concerns (:func:`finding_gpus`; an action, its finding's)."""
    out: list[tuple[float, int, int, Event]] = []
    gpus_of = {f.id: finding_gpus(f, runs) for f in findings}
    for f in findings:
        gpus = gpus_of[f.id]
        if f.opened_at >= since:
            text = safe_text(f"F{f.id} {when_disabled(f, actions)}")
            event = Event(f.opened_at, "opened", f.kind, f.severity, text, gpus)
            out.append((f.opened_at, 0, f.id, event))
        if f.resolved_at is not None and f.resolved_at >= since:
            text = safe_text(f"F{f.id} resolved")
            event = Event(f.resolved_at, "resolved", f.kind, f.severity, text, gpus)
            out.append((f.resolved_at, 0, f.id, event))
    for a in actions:
        dry = " (dry run)" if a.dry_run else ""
        gpus = gpus_of.get(a.finding_id, ()) if a.finding_id is not None else ()
        if a.created_at >= since:
            text = safe_text(f"A{a.id} {a.kind} {a.target}: {a.outcome}{dry} by {a.actor}")
            event = Event(a.created_at, "action", a.kind, "-", text, gpus)
            out.append((a.created_at, 1, a.id, event))
        if a.undone_at is not None and a.undone_at >= since:
            text = safe_text(f"A{a.id} undone: {a.kind} {a.target}")
            out.append(
                (a.undone_at, 1, a.id, Event(a.undone_at, "undone", a.kind, "-", text, gpus))
            )
    return [e for *_, e in sorted(out, key=lambda t: (t[0], t[1], t[2]))]


def origin_key(r: RunRecord) -> tuple[object, ...]:
    """What one row of the per-origin table stands for: the source the origin names
    (a cron file and line, a unit, a Slurm account and job name...), whatever else its
    description says at each run (a line since disabled, its schedule); for an origin that
    names none (a shell, an orphan, unknown), the job itself: an inference server and a
    rogue trainer both "started by hand" are two rows, not one."""
    origin = origin_from_json(r.origin)
    key = origin.source_key() if origin.definite else None
    return key if key is not None else ("job", r.signature)


def _origin_name(r: RunRecord) -> str:
    origin = origin_from_json(r.origin)
    # One row holds many runs: named without what differs per run (an orphan's wrapper
    # PID made the row read as if it were one run's).
    name = origin.stable_name()
    if not origin.definite or origin.source_key() is None:
        # The whole command (up to a long one's NAME_MAX): the job is what tells these
        # rows apart (40 rows of `unknown origin · python -S …/train_probe.py` did not).
        name += f" · {command_text(r.cmdline, NAME_MAX)}"
    return safe_text(name)


def usage(runs: Sequence[RunRecord], by: str) -> list[tuple[str, int, float]]:
    """Runs and GPU-hours per origin (``by="origin"``: one row per source,
    :func:`origin_key`, named by its latest run's description), per user (``by="user"``)
    or per workload class (``by="class"``; ``-`` for runs recorded before classes were),
    most GPU-hours first, then by name."""
    return [(n, c, h) for n, c, h, _v in usage_rows(runs, by)]


def _row_key(r: RunRecord, by: str) -> tuple[object, str]:
    if by == "origin":
        return origin_key(r), _origin_name(r)
    value = (r.workload if by == "class" else r.user) or "-"
    return value, safe_text(value)


def usage_rows(runs: Sequence[RunRecord], by: str) -> list[tuple[str, int, float, dict[str, int]]]:
    """:func:`usage` with the runs of each verdict (final verdicts) per row."""
    table: dict[object, list[Any]] = {}
    for r in runs:  # oldest start first: the latest run names the row
        key, name = _row_key(r, by)
        row = table.setdefault(key, [name, 0, 0.0, {}, set()])
        row[0] = name
        row[1] += 1
        row[2] += r.gpu_s / 3600.0
        row[3][r.verdict] = row[3].get(r.verdict, 0) + 1
        row[4].add(r.user or "-")
    named: dict[str, int] = {}
    for v in table.values():
        named[v[0]] = named.get(v[0], 0) + 1
    for v in table.values():
        # Two jobs of one command line by different users: each row says whose.
        if by == "origin" and named[v[0]] > 1:
            v[0] += f" (user {safe_text(', '.join(sorted(v[4])))})"
    return sorted(
        ((str(v[0]), int(v[1]), round(v[2], 3), dict(v[3])) for v in table.values()),
        key=lambda t: (-t[2], t[0]),
    )


def report_json(
    runs: Sequence[RunRecord],
    findings: Sequence[FindingRecord],
    actions: Sequence[ActionRecord],
    since: float,
    now: float,
) -> dict[str, Any]:
    """The report as plain JSON: ``since``, ``until``, ``by_origin``, ``by_user`` and
    ``by_class`` (workload class) (``{name, runs, gpu_hours, verdicts}``, verdicts: runs
    per final verdict), ``timeline`` (``{time, what, kind, severity, text, gpus}``),
    ``open`` (``{id, kind, severity, message, opened_at}``)."""
    return {
        "since": since,
        "until": now,
        **{
            f"by_{by}": [
                {"name": n, "runs": c, "gpu_hours": h, "verdicts": v}
                for n, c, h, v in usage_rows(runs, by)
            ]
            for by in ("origin", "user", "class")
        },
        "timeline": [
            {**e.__dict__, "gpus": list(e.gpus)} for e in timeline(findings, actions, since, runs)
        ],
        "open": [
            {
                "id": f.id, "kind": f.kind, "severity": f.severity,
                "message": safe_text(when_disabled(f, actions)), "opened_at": f.opened_at,
            }
            for f in findings
            if f.resolved_at is None
        ],
    }  # fmt: skip


def _table(title: str, rows: list[tuple[str, int, float, dict[str, int]]], width: int) -> list[str]:
    """A usage table: name, verdict (runs per final verdict, as the HTML page's column),
    runs, GPU-hours. Names wrap at words, never inside one (`/tmp/t` / `mp.5pad…` was
    not a path any more); a word wider than its column starts a line of its own, whole,
    and the row's numbers follow it on the next."""
    verdicts = [_verdicts_text(v) if v else "-" for *_, v in rows]
    verdict_w = max([len("verdict"), *(len(v) for v in verdicts)])
    name_w = max(20, width - 2 - verdict_w - 1 - 7 - 12)
    head = f"  {'':<{name_w}} {'verdict':<{verdict_w}}{'runs':>7} {'GPU-hours':>11}"
    out = [title, head.rstrip()]
    for (name, n, hours, _v), verdict in zip(rows, verdicts, strict=True):
        names = fit(name, name_w, "  ")
        cells = f"{verdict:<{verdict_w}}{n:>7} {hours:>11.2f}"
        if len(names[0]) > name_w:  # a whole word wider than the column: its own line
            names.append("")
            out += [f"  {x}" for x in names[:-1]]
            names = names[-1:]
        out.append(f"  {names[0]:<{name_w}} {cells}")
        out += [f"  {x}" for x in names[1:]]
    if not rows:
        out.append("  (none)")
    return out


def report_text(doc: dict[str, Any], width: int = WIDTH) -> str:
    """The JSON report as text, lines at most ``width`` columns but for a word or a
    command wider than a line, which has a line of its own, whole (never broken inside)."""
    out = [f"rogue-watchdog report: {_when(doc['since'])} to {_when(doc['until'])}", ""]
    tables = (("by_origin", "per origin"), ("by_user", "per user"), ("by_class", "per class"))
    for key, title in tables:
        rows = [
            (r["name"], r["runs"], r["gpu_hours"], r.get("verdicts") or {})
            for r in doc.get(key, [])
        ]
        out += _table(title, rows, width)
        out.append("")
    out.append("timeline")
    for e in doc["timeline"]:
        first = f"  {_when(e['time'])} {e['what']:<8} {e['severity']:<8} "
        out += fit(f"{e['kind']}: {e['text']}", width, " " * 4, first)
    if not doc["timeline"]:
        out.append("  (nothing happened)")
    out += ["", "still open"]
    for f in doc["open"]:
        out += fit(f"F{f['id']} {f['kind']} ({f['severity']}): {f['message']}", width, "    ", "  ")
    if not doc["open"]:
        out.append("  (nothing)")
    return "\n".join(out)


#: Bar colours by verdict; anything else (unknown, a newer verdict) is grey.
COLOURS = {"sanctioned": "#2e7d32", "rogue": "#c62828", "excess": "#ef6c00", "ignored": "#9e9e9e"}
OTHER = "#757575"
#: Incident marks: a finding opened (by severity's weight) and an action.
MARKS = {"opened": "#4a148c", "action": "#1565c0"}
#: Verdicts most in need of a person first (the per-origin verdict column).
VERDICT_ORDER = ("rogue", "excess", "unknown", "ignored", "sanctioned")
#: Timeline geometry (SVG user units; the page scales the whole to its width).
SVG_W, LEFT, RIGHT, TOP, LANE, GAP, PAD = 1200, 210, 20, 58, 18, 3, 8
#: Most lanes of one timeline row (a row at most about 190 units tall); bars beyond
#: them share the last lane, counted (:func:`_more_bar`).
MAX_LANES = 8
#: Width of one character of a bar label (font-size 11, sans-serif), generous: a label
#: drawn beside its bar must not run into the next bar.
LABEL_CHAR_W = 6.5
#: Incident marks of one row and kind closer than this (SVG units, about a count label's
#: width) are one mark that counts them.
MARK_MERGE = 16.0
#: Height of one line of incident marks at the top of a GPU row (SVG units): marks sit
#: in that band, above the lanes, stacked on up to :data:`MARK_LEVELS` lines where one
#: would touch the next.
MARK_ROW = 11
MARK_LEVELS = 3
#: Width of one character of a mark's count (font-size 9), generous.
MARK_CHAR_W = 5.5
#: Space kept between two marks, and between an incident's line and a label (SVG units).
MARK_GAP = 2.0
#: Tick steps the axis chooses from, seconds.
STEPS = (60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400)


@dataclass(frozen=True)
class Segment:
    """A stretch of one run under one verdict (``start``/``end``: POSIX times)."""

    start: float
    end: float
    verdict: str


#: A job finding opened this soon after its run was first seen was about the run from
#: its first sighting (the tick that saw it, or a debounce later).
FIRST_SIGHTING_S = 120.0


def verdict_segments(run: RunRecord, findings: Sequence[FindingRecord]) -> list[Segment]:
    """The run's verdict over time: rogue (excess) while a job finding about it was open
    (from the run's first sighting when the finding opened then), its last verdict
    otherwise. A notebook paged as rogue for 8 minutes and then sanctioned by a new
    rule shows both, not only the final green."""
    end = max(run.last_seen, run.started_at)
    flagged: list[tuple[float, float, str]] = []
    for f in findings:
        verdict = JOB_FINDINGS.get(f.kind)
        if verdict is None or run_of(f, [run]) is None:
            continue
        stop = f.resolved_at if f.resolved_at is not None else end
        opened = f.opened_at
        if opened - run.started_at <= FIRST_SIGHTING_S:
            opened = run.started_at
        a, b = max(run.started_at, opened), min(end, stop)
        if b > a:
            flagged.append((a, b, verdict))
    cuts = sorted({run.started_at, end, *(t for a, b, _ in flagged for t in (a, b))})
    out: list[Segment] = []
    for a, b in itertools.pairwise(cuts):
        mid = (a + b) / 2
        verdict = next((v for s, e, v in flagged if s <= mid < e), run.verdict)
        if out and out[-1].verdict == verdict:
            out[-1] = Segment(out[-1].start, b, verdict)
        else:
            out.append(Segment(a, b, verdict))
    return out or [Segment(run.started_at, end, run.verdict)]


class Span(Protocol):
    """What :func:`lanes` reads of a run (or of a burst of runs)."""

    @property
    def started_at(self) -> float: ...
    @property
    def last_seen(self) -> float: ...
    @property
    def root_pid(self) -> int: ...


def lanes(runs: Sequence[Span]) -> list[int]:
    """A lane for each run (in the order given) so that no two runs that overlap in
    time share one: the first lane free at the run's start (interval partitioning)."""
    order = sorted(range(len(runs)), key=lambda i: (runs[i].started_at, runs[i].root_pid))
    ends: list[float] = []
    out = [0] * len(runs)
    for i in order:
        r = runs[i]
        lane = next((n for n, e in enumerate(ends) if e < r.started_at), len(ends))
        if lane == len(ends):
            ends.append(r.last_seen)
        else:
            ends[lane] = r.last_seen
        out[i] = lane
    return out


@dataclass(frozen=True)
class Burst:
    """Runs of one user and origin that overlap in time (55 copies started at once), or
    one run alone: one bar of the timeline, its label counting them.

    Attributes:
        runs: The runs, oldest start first.
        started_at: The first one's start (POSIX time).
        last_seen: The last one's end (POSIX time).
        root_pid: The first one's root PID (ties of :func:`lanes`).
    """

    runs: tuple[RunRecord, ...]
    started_at: float
    last_seen: float
    root_pid: int


#: Digit runs, folded in :func:`burst_key`: `train_fake_7.py --epochs 7` and
#: `train_fake_12.py --epochs 12` are one command started 30 times over.
_DIGITS = re.compile(r"\d+")


def burst_key(r: RunRecord) -> tuple[object, ...]:
    """What the runs of one burst share: the source the origin names (:func:`origin_key`);
    where it names none (a shell, an orphan, unknown), the origin as described (one tmux
    session, one orphaning) and the command with every number folded. 30 copies from one
    tmux session, each `train_fake_N.py --epochs N`, were 30 bars (5 lanes and "+27
    more run(s)", issue 33); an inference server and a rogue trainer stay two."""
    key = origin_key(r)
    if key[:1] != ("job",):
        return key
    origin = origin_from_json(r.origin)
    # Never a PID or job id: each run of a shell loop whose wrapper was adopted names
    # its own PID, and would be a bar of its own.
    return ("burst", origin.stable_name(), _DIGITS.sub("#", " ".join(r.cmdline)))


def bursts(runs: Sequence[RunRecord]) -> list[Burst]:
    """``runs`` as bars: overlapping runs of one user and one origin (:func:`burst_key`:
    the source, or the origin and the command up to its numbers where the origin names
    no source) make one; the others one each. A burst of 55 copies is one bar that says
    55, not 55 lanes that make one GPU's row a thousand pixels tall; an inference server
    and a rogue trainer both orphans stay two bars."""
    open_: dict[tuple[str, tuple[object, ...]], list[RunRecord]] = {}
    done: list[list[RunRecord]] = []
    for r in sorted(runs, key=lambda r: (r.started_at, r.root_pid)):
        key = (r.user or "-", burst_key(r))
        group = open_.get(key)
        if group is not None and r.started_at <= max(x.last_seen for x in group):
            group.append(r)
            continue
        group = [r]
        open_[key] = group
        done.append(group)
    return [
        Burst(tuple(g), g[0].started_at, max(x.last_seen for x in g), g[0].root_pid) for g in done
    ]


def axis_ticks(t0: float, t1: float, most: int = 12) -> tuple[float, list[float]]:
    """The tick step and the tick times between ``t0`` and ``t1``, on local-time
    boundaries of the step (a day step at local midnight)."""
    span = max(t1 - t0, 1.0)
    step = next(
        (s for s in STEPS if span / s <= most), STEPS[-1] * (1 + int(span // (STEPS[-1] * most)))
    )
    offset = datetime.fromtimestamp(t0).astimezone().utcoffset()
    shift = offset.total_seconds() if offset is not None else 0.0
    first = ((t0 + shift) // step + 1) * step - shift
    ticks = []
    t = first
    while t <= t1:
        ticks.append(t)
        t += step
    return step, ticks


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().strftime("%a %Y-%m-%d")


def _hm(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().strftime("%H:%M")


def _verdicts_text(verdicts: dict[str, int]) -> str:
    order = sorted(verdicts, key=lambda v: (VERDICT_ORDER.index(v) if v in VERDICT_ORDER else 2, v))
    if len(order) == 1:
        return order[0]
    return ", ".join(f"{v} {verdicts[v]}" for v in order)


def _gpu_rows(
    runs: Sequence[RunRecord], events: Sequence[dict[str, Any]], inventory: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """``(uuid, label, sublabel)`` per timeline row: each GPU by index (names from the
    daemon's inventory), then ``host`` for runs that held no GPU and incidents of none."""
    uuids = {g for r in runs for g in r.gpus or []} | {
        g for ev in events for g in ev.get("gpus") or []
    }
    rows = []
    for uuid in uuids:
        found = inventory.get(uuid)
        info: dict[str, Any] = found if isinstance(found, dict) else {}
        index = info.get("index")
        mig = info.get("mig_index")
        label = f"GPU {index if index is not None else '?'}" + (
            f" MIG {mig}" if mig is not None else ""
        )
        name = str(info.get("name") or "")
        rows.append(((index is None, index or 0, mig or 0, uuid), uuid, f"{label}  {name}".strip()))
    out = [(uuid, label, uuid) for _k, uuid, label in sorted(rows)]
    if any(not r.gpus for r in runs) or any(
        not ev.get("gpus") for ev in events if ev["what"] in ("opened", "action")
    ):
        out.append(("", "host", "no GPU held"))
    return out


def report_html(
    doc: dict[str, Any],
    runs: Sequence[RunRecord],
    title: str = "rogue-watchdog report",
    *,
    findings: Sequence[FindingRecord] = (),
    inventory: dict[str, Any] | None = None,
) -> str:
    """The report as one self-contained HTML page: an inline SVG timeline and the tables.

    The timeline has one row per GPU (its index and name; the UUID under it) and a
    ``host`` row for runs that held no GPU; a lane per concurrent run so none hides
    another; a time axis with ticks and dates over the span that holds data (the
    window's start is said when it is earlier); a legend; each run's bar coloured by its
    verdict over time (:func:`verdict_segments`) and labelled with its user and origin;
    incidents marked on the rows of the GPUs they concern only. Every host text is
    HTML-escaped; nothing is loaded from anywhere (no script, font or style file).

    Args:
        doc: :func:`report_json`'s document.
        runs: The runs in the window.
        title: The page's title.
        findings: The window's findings (the verdict of each run over time).
        inventory: GPUs by UUID (``index``, ``name``, ``mig_index``), as the daemon
            recorded them (``meta`` key ``gpus``); GPUs it lacks are ``GPU ?``.
    """
    inventory = _with_finding_gpus(inventory, findings)
    since, until = float(doc["since"]), float(doc["until"])
    events = [ev for ev in doc["timeline"] if ev["what"] in ("opened", "action")]
    t0, t1 = _axis_span(doc, runs, since, until)
    x = _TimeScale(t0, t1)
    rows = _gpu_rows(runs, events, inventory)
    placed = _place_marks(events, {uuid for uuid, _l, _s in rows}, x)
    bands = {g: MARK_ROW * (max(m.level for m in ms) + 1) for g, ms in placed.items() if ms}
    tags: dict[str, str] = {}
    parts, bars, geometry, bottom = _rows_and_bars(rows, runs, findings, x, bands, tags)
    legend, axis = _legend_svg(), _axis_svg(x, bottom)
    marks = _incident_marks(placed, geometry)
    svg = (
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SVG_W} '
        f'{bottom + 4}" width="100%" preserveAspectRatio="xMinYMin meet">'
        + "".join(legend + axis + parts + bars + marks)
        + "</svg>"
    )
    later = (
        f"; the report's window starts {_when(since)} (nothing recorded before the axis starts)"
        if t0 > since
        else ""
    )
    e = html.escape
    window = f'<p class="span">Time axis {e(_when(t0))} to {e(_when(t1))}{e(later)}.</p>'
    return _page(doc, title, since, until, svg + window + _key_html(tags))


def _key_html(tags: dict[str, str]) -> str:
    """The key of the bars too narrow for their label: each tag and the label it
    stands for (whole: a label is never cut)."""
    if not tags:
        return ""
    e = html.escape
    items = "".join(
        f'<li><b class="tag">{e(tag)}</b> {e(label)}</li>' for label, tag in tags.items()
    )
    return (
        '<p class="key-intro">Bars too narrow for their label carry a letter:</p>'
        f'<ul id="bar-key">{items}</ul>'
    )


#: Rows of a per-origin, per-user or per-class table in view; the rest fold under a
#: ``<details>`` (one click away, still in the page and its text search).
TABLE_ROWS = 25


def _tag(n: int) -> str:
    """``A`` … ``Z``, ``AA``, ``AB`` …: the ``n``-th (from 0) tag of the bar key."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


def _with_finding_gpus(
    inventory: dict[str, Any] | None, findings: Sequence[FindingRecord]
) -> dict[str, Any]:
    """``inventory`` and the GPUs the findings name that it lacks (their index only)."""
    known = dict(inventory or {})
    for f in findings:  # job findings name the index of each GPU held
        for g in (f.details.get("gpus") if isinstance(f.details, dict) else None) or []:
            if isinstance(g, dict) and isinstance(g.get("uuid"), str):
                known.setdefault(g["uuid"], {"index": g.get("index")})
    return known


def _axis_span(
    doc: dict[str, Any], runs: Sequence[RunRecord], since: float, until: float
) -> tuple[float, float]:
    """The time axis' start and end (POSIX seconds): the span that holds data, a little
    before the first run or event, at least a minute long."""
    starts = [r.started_at for r in runs] + [float(ev["time"]) for ev in doc["timeline"]]
    t0 = since
    if starts:
        first = min(starts)
        t0 = max(since, first - 0.03 * max(until - first, 60.0))
    return t0, max(until, t0 + 60.0)


@dataclass(frozen=True)
class _TimeScale:
    """Maps a time on the axis ``t0``..``t1`` to its x coordinate in the SVG."""

    t0: float
    t1: float

    def __call__(self, ts: float) -> float:
        inner = SVG_W - LEFT - RIGHT
        t0, t1 = self.t0, self.t1
        return round(LEFT + (max(t0, min(ts, t1)) - t0) / (t1 - t0) * inner, 1)


@dataclass(frozen=True)
class _Box:
    """A rectangle of the timeline (SVG units): a bar's label, an incident mark."""

    x0: float
    x1: float
    y0: float
    y1: float


@dataclass
class _RowGeometry:
    """Where a GPU row is: its top and bottom, where its lanes start, and the boxes of
    its bar labels (an incident's line goes around them)."""

    top: float
    bottom: float
    lanes_top: float
    labels: list[_Box] = field(default_factory=list)


def _rows_and_bars(
    rows: Sequence[tuple[str, str, str]],
    runs: Sequence[RunRecord],
    findings: Sequence[FindingRecord],
    x: _TimeScale,
    bands: Mapping[str, float],
    tags: dict[str, str],
) -> tuple[list[str], list[str], dict[str, _RowGeometry], float]:
    """The GPU rows (one lane per concurrent bar, at most :data:`MAX_LANES`) and the
    run bars on them (:func:`bursts`); bars beyond the lanes are drawn together in one
    more lane that counts them. A row with incidents keeps a band of ``bands[uuid]``
    units above its lanes for their marks (:func:`_place_marks`).

    Returns:
        The rows' SVG, the bars' SVG, each row's geometry by GPU UUID (``""``: the host
        row) and the y below the last row.
    """
    e = html.escape
    parts: list[str] = []
    bars: list[str] = []
    geometry: dict[str, _RowGeometry] = {}
    y: float = TOP
    for uuid, label, sub in rows:
        held = bursts([r for r in runs if (uuid in (r.gpus or [])) or (not uuid and not r.gpus)])
        lane_of = lanes(held)
        more = [b for b, lane in zip(held, lane_of, strict=True) if lane >= MAX_LANES - 1]
        if max(lane_of, default=0) < MAX_LANES:
            more = []
        n_lanes = min(max(lane_of, default=0) + 1, MAX_LANES)
        band = bands.get(uuid, 0)
        height = PAD * 2 + band + n_lanes * LANE + (n_lanes - 1) * GAP
        row = geometry[uuid] = _RowGeometry(y, y + height, y + PAD + band)
        parts.append(
            f'<g class="gpu-row" data-gpu="{e(uuid)}" data-lanes="{n_lanes}">'
            f'<rect x="0" y="{y}" width="{SVG_W}" height="{height}" fill="#fafafa" '
            f'stroke="#e0e0e0"/><text x="6" y="{y + 17}" font-size="13" font-weight="bold">'
            f'{e(label)}</text><text x="6" y="{y + 31}" font-size="9" fill="#616161">'
            f"{e(sub)}</text></g>"
        )
        # Where the next bar of each lane starts: a label too long for its bar goes
        # beside it when the lane is free that far.
        starts: dict[int, list[float]] = {}
        for b, lane in zip(held, lane_of, strict=True):
            starts.setdefault(lane, []).append(x(b.started_at))
        for b, lane in zip(held, lane_of, strict=True):
            if more and lane >= MAX_LANES - 1:
                continue
            top = row.lanes_top + lane * (LANE + GAP)
            x1 = x(b.last_seen)
            free = min((s for s in starts[lane] if s > x1), default=float(SVG_W - RIGHT))
            svg, box = _run_bar(b, uuid, lane, top, findings, x, tags, free)
            bars.append(svg)
            if box is not None:
                row.labels.append(box)
        if more:
            top = row.lanes_top + (MAX_LANES - 1) * (LANE + GAP)
            svg, box = _more_bar(more, uuid, top, x)
            bars.append(svg)
            row.labels.append(box)
        y += height + 4
    return parts, bars, geometry, y


def _more_bar(more: Sequence[Burst], uuid: str, top: float, x: _TimeScale) -> tuple[str, _Box]:
    """The last lane of a row with more concurrent bars than lanes: each grey, and a
    label that counts the runs (the tables below list them); the label's box."""
    e = html.escape
    n = sum(len(b.runs) for b in more)
    tip = f"{n} more run(s) at once than this row has lanes for: the tables below list them"
    out = [f'<g class="more" data-gpu="{e(uuid)}" data-runs="{n}"><title>{e(tip)}</title>']
    for b in more:
        x0, x1 = x(b.started_at), x(b.last_seen)
        out.append(
            f'<rect x="{x0}" y="{top}" width="{max(x1 - x0, 2)}" height="{LANE}" '
            f'fill="{OTHER}" fill-opacity="0.35"/>'
        )
    x0 = min(x(b.started_at) for b in more)
    text = f"+{n} more run(s)"
    out.append(
        f'<text class="more-label" x="{x0 + 3}" y="{top + 13}" font-size="11">{text}</text></g>'
    )
    return "".join(out), _Box(x0 + 3, x0 + 3 + LABEL_CHAR_W * len(text), top, top + LANE)


#: Verdicts drawn last (on top) where the runs of one burst overlap: the one a person
#: must see wins.
_DRAW_ORDER = {"sanctioned": 0, "ignored": 1, "unknown": 2, "excess": 3, "rogue": 4}


def _run_bar(
    b: Burst,
    uuid: str,
    lane: int,
    top: float,
    findings: Sequence[FindingRecord],
    x: _TimeScale,
    tags: dict[str, str],
    free: float = SVG_W - RIGHT,
) -> tuple[str, _Box | None]:
    """One bar: a run (or a burst of runs) coloured by verdict over time, labelled with
    its user and origin (and how many runs), its tooltip the whole story (host text
    escaped). A label is never cut (a cut one reads ``root · cr``: issue 33): it is
    drawn in the bar when it fits, else beside it, dark, when its lane is free up to
    ``free`` (x); else the bar carries the label's tag from ``tags`` (a letter, given
    at first use; the key under the timeline spells it out) in the same places, or
    nothing where even that does not fit (its tooltip and the key still name it).
    Returns the SVG and the box the label takes (None: none drawn)."""
    e = html.escape
    r = b.runs[0]
    x0, x1 = x(b.started_at), x(b.last_seen)
    x1 = max(x1, x0 + 3)
    said = origin_from_json(r.origin)
    # A burst's label names what its runs share, not its first run's PID or job id.
    origin = safe_text(said.describe() if len(b.runs) == 1 else said.stable_name())
    user = safe_text(r.user or "-")
    segs = [(run, s) for run in b.runs for s in verdict_segments(run, findings)]
    if len(b.runs) == 1:
        held_b = f", up to {r.max_gpu_bytes / 2**30:.1f} GiB" if r.max_gpu_bytes else ""
        story = "; ".join(f"{s.verdict} {_hm(s.start)}-{_hm(s.end)}" for _run, s in segs)
        tip = safe_text(
            f"PID {r.root_pid} {r.verdict}{held_b}, user {user}, {origin}: "
            f"{command_text(r.cmdline, 160)} ({story})"
        )
        count = ""
    else:
        pids = ", ".join(str(run.root_pid) for run in b.runs[:12])
        pids += f" and {len(b.runs) - 12} more" if len(b.runs) > 12 else ""
        verdicts = _verdicts_text(_tally(run.verdict for run in b.runs))
        tip = safe_text(
            f"{len(b.runs)} runs at once ({verdicts}), user {user}, {origin}, "
            f"{_hm(b.started_at)}-{_hm(b.last_seen)}: PIDs {pids}; first "
            f"{command_text(r.cmdline, 160)}"
        )
        count = f" ×{len(b.runs)}"
    seen: list[str] = []
    for _run, s in sorted(segs, key=lambda t: t[1].start):
        if s.verdict not in seen:
            seen.append(s.verdict)
    bar = [
        f'<g class="run" data-gpu="{e(uuid)}" data-lane="{lane}" data-x0="{x0}" '
        f'data-x1="{x1}" data-user="{e(user)}" data-origin="{e(origin)}" '
        f'data-runs="{len(b.runs)}" data-verdicts="{e(" ".join(seen))}">'
        f"<title>{e(tip)}</title>"
    ]
    for run, s in sorted(segs, key=lambda t: _DRAW_ORDER.get(t[1].verdict, 2)):
        # A verdict the run left (8 minutes as rogue in a day) stays visible.
        least = 3 if s.verdict != run.verdict else 1
        sx0, sx1 = x(s.start), min(max(x(s.end), x(s.start) + least), x1)
        bar.append(
            f'<rect class="seg {e(s.verdict)}" x="{sx0}" y="{top}" width="{sx1 - sx0}" '
            f'height="{LANE}" fill="{COLOURS.get(s.verdict, OTHER)}"/>'
        )
    label = f"{user} · {origin}{count}"
    texts = [label]
    if LABEL_CHAR_W * len(label) + 6 > max(x1 - x0, free - 2 - x1):
        tag = tags.setdefault(f"{user} · {origin}", _tag(len(tags)))
        texts.append(f"{tag}{count}")
    for text in texts:
        wide = LABEL_CHAR_W * len(text) + 6
        if wide <= x1 - x0:
            bar.append(
                f'<text class="bar-label" x="{x0 + 3}" y="{top + 13}" font-size="11" '
                f'fill="#fff">{e(text)}</text></g>'
            )
            return "".join(bar), _Box(x0 + 3, x0 + wide - 3, top, top + LANE)
        if text is not label and wide - 4 <= x1 - x0:  # a tag, centred, fits with 1 each side
            mid = round((x0 + x1) / 2, 1)
            half = LABEL_CHAR_W * len(text) / 2
            bar.append(
                f'<text class="bar-label" x="{mid}" y="{top + 13}" font-size="11" '
                f'text-anchor="middle" fill="#fff">{e(text)}</text></g>'
            )
            return "".join(bar), _Box(mid - half, mid + half, top, top + LANE)
        if x1 + wide <= free - 2:
            bar.append(
                f'<text class="bar-label" x="{x1 + 3}" y="{top + 13}" font-size="11" '
                f'fill="#212121">{e(text)}</text></g>'
            )
            return "".join(bar), _Box(x1 + 3, x1 + wide, top, top + LANE)
    bar.append("</g>")
    return "".join(bar), None


def _tally(verdicts: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in verdicts:
        out[v] = out.get(v, 0) + 1
    return out


@dataclass
class _Mark:
    """One incident mark on a GPU row: the incidents it counts, where its triangle is
    (``x``), how far right its count reaches, and which line of the row's band."""

    what: str
    x: float
    last_x: float
    level: int
    events: list[dict[str, Any]]
    seq: int = 0  # the order marks were made in: the page lists them in time order

    @property
    def right(self) -> float:
        """The right end of the triangle and its count (SVG units)."""
        n = len(self.events)
        count = 5 + MARK_CHAR_W * len(f"×{n}") if n > 1 else 4
        return max(self.x + count, self.last_x + 4)

    def box(self, top: float) -> _Box:
        """The mark's box, its row's band starting at ``top``."""
        y = top + 2 + self.level * MARK_ROW
        return _Box(self.x - 4, self.right, y, y + MARK_ROW - 1)


def _place_marks(
    events: Sequence[dict[str, Any]], rows: set[str], x: _TimeScale
) -> dict[str, list[_Mark]]:
    """Each row's incident marks, laid out of each other's way: a mark per incident on
    the row of each GPU it concerns (the host row for one that names none); incidents
    of one kind closer than :data:`MARK_MERGE` are one mark that counts them (55
    findings of one burst are not a wall of 55 lines); a mark that would touch the last
    one on its line goes on the next line of the row's band (at most
    :data:`MARK_LEVELS`, then it joins the rightmost mark of its kind, counted)."""
    placed: dict[str, list[_Mark]] = {}
    for ev in sorted(events, key=lambda ev: float(ev["time"])):
        where = [g for g in ev.get("gpus") or [] if g in rows] or (
            [""] if "" in rows and not ev.get("gpus") else []
        )
        xi = x(float(ev["time"]))
        what = "action" if ev["what"] == "action" else "opened"
        for g in where:
            marks = placed.setdefault(g, [])
            last: dict[int, _Mark] = {}
            for m in marks:  # in x order: the last of each line is the rightmost
                last[m.level] = m
            # One instant (closer than MARK_MERGE) is one mark; else the first line of
            # the band where it touches nothing; else the touching mark of its kind.
            near = [m for m in last.values() if m.what == what and xi - m.x < MARK_MERGE]
            free = [
                lv for lv in range(MARK_LEVELS)
                if lv not in last or last[lv].right + MARK_GAP <= xi - 4
            ]  # fmt: skip
            if not near and not free:
                near = sorted(
                    last.values(), key=lambda m: (m.what != what, -m.right)
                )  # fmt: skip
            if near:
                near[0].events.append(ev)
                near[0].last_x = xi
                continue
            seq = sum(len(ms) for ms in placed.values())
            marks.append(_Mark(what, xi, xi, free[0], [ev], seq))
    return placed


def _line_around(
    xi: float, y0: float, y1: float, boxes: Sequence[_Box]
) -> list[tuple[float, float]]:
    """The stretches of the vertical line at ``xi`` from ``y0`` to ``y1`` that cross none
    of ``boxes`` (each widened by :data:`MARK_GAP`)."""
    cuts = sorted(
        (b.y0 - MARK_GAP, b.y1 + MARK_GAP)
        for b in boxes
        if b.x0 - MARK_GAP <= xi <= b.x1 + MARK_GAP
    )
    out, at = [], y0
    for a, b in cuts:
        if a > at + 1:
            out.append((at, min(a, y1)))
        at = max(at, b)
        if at >= y1:
            break
    if at < y1 - 1:
        out.append((at, y1))
    return [(a, b) for a, b in out if b - a >= 1]


def _incident_marks(
    placed: Mapping[str, Sequence[_Mark]], geometry: Mapping[str, _RowGeometry]
) -> list[str]:
    """The marks (:func:`_place_marks`) in their rows' bands, each with its count and a
    dashed line down through the row's lanes that goes around every bar label and every
    other mark (no label is ever crossed by a line); tooltips name each incident (the
    first 20)."""
    e = html.escape
    out: list[tuple[int, str]] = []
    for g, marks in placed.items():
        row = geometry[g]
        boxes = [m.box(row.top) for m in marks]
        for m, own in zip(marks, boxes, strict=True):
            evs, xi, colour = m.events, m.x, MARKS[m.what]
            tip = "\n".join(
                f"{_when(float(ev['time']))} {ev['kind']}: {ev['text']}" for ev in evs[:20]
            ) + (f"\nand {len(evs) - 20} more" if len(evs) > 20 else "")
            a = own.y0
            others = [b for b in boxes if b is not own] + row.labels
            lines = "".join(
                f'<line x1="{xi}" x2="{xi}" y1="{round(y0, 1)}" y2="{round(y1, 1)}" '
                f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="3,2"/>'
                for y0, y1 in _line_around(xi, a + 6, row.bottom - 2, others)
            )
            count = (
                f'<text class="mark-count" x="{xi + 5}" y="{a + 8}" font-size="9" '
                f'fill="{colour}">×{len(evs)}</text>'
                if len(evs) > 1
                else ""
            )
            svg = (
                f'<g class="incident {e(evs[0]["what"])}" data-gpu="{e(g)}" data-x="{xi}" '
                f'data-count="{len(evs)}" data-level="{m.level}" data-box="{own.x0} '
                f'{own.y0} {own.x1} {own.y1}"><title>{e(tip)}</title>{lines}'
                f'<path d="M{xi - 4},{a} L{xi + 4},{a} L{xi},{a + 6} Z" fill="{colour}"/>'
                f"{count}</g>"
            )
            out.append((m.seq, svg))
    return [svg for _seq, svg in sorted(out)]


def _axis_svg(x: _TimeScale, bottom: float) -> list[str]:
    """The time axis: ticks down to ``bottom``, and each new day's date."""
    e = html.escape
    t0, t1 = x.t0, x.t1
    _step, ticks = axis_ticks(t0, t1)
    axis = [f'<g class="axis"><line x1="{LEFT}" x2="{SVG_W - RIGHT}" y1="{TOP - 4}" '
            f'y2="{TOP - 4}" stroke="#9e9e9e"/>']  # fmt: skip
    day = _day(t0)
    # The axis' start names its date, unless the first new day's label would sit on it.
    first_new = next((x(t) for t in ticks if _day(t) != day), SVG_W)
    if first_new - LEFT > 150:
        axis.append(
            f'<text class="date" x="{LEFT}" y="{TOP - 24}" font-size="10" font-weight="bold">'
            f"{e(day)} {_hm(t0)}</text>"
        )
    for t in ticks:
        xt = x(t)
        axis.append(
            f'<line class="tick" x1="{xt}" x2="{xt}" y1="{TOP - 8}" y2="{bottom}" '
            f'stroke="#e0e0e0"/><text class="tick-label" x="{xt}" y="{TOP - 11}" '
            f'font-size="10" text-anchor="middle">{_hm(t)}</text>'
        )
        if _day(t) != day:
            day = _day(t)
            axis.append(
                f'<text class="date" x="{xt}" y="{TOP - 24}" font-size="10" font-weight="bold" '
                f'text-anchor="middle">{e(day)}</text>'
            )
    axis.append("</g>")
    return axis


def _legend_svg() -> list[str]:
    """The legend: a swatch per verdict, a mark per incident kind."""
    legend = ['<g id="legend">']
    lx = LEFT
    for name, colour in [*COLOURS.items(), ("other", OTHER)]:
        legend.append(
            f'<rect x="{lx}" y="4" width="12" height="12" fill="{colour}"/>'
            f'<text x="{lx + 16}" y="14" font-size="11">{name}</text>'
        )
        lx += 30 + 7 * len(name)
    for what, text in (("opened", "finding opened"), ("action", "action taken")):
        legend.append(
            f'<path d="M{lx},4 L{lx + 10},4 L{lx + 5},12 Z" fill="{MARKS[what]}"/>'
            f'<text x="{lx + 14}" y="14" font-size="11">{text}</text>'
        )
        lx += 30 + 7 * len(text)
    legend.append("</g>")
    return legend


def _page(doc: dict[str, Any], title: str, since: float, until: float, timeline: str) -> str:
    """The HTML page: ``timeline`` (finished HTML) and the tables of ``doc``."""
    e = html.escape

    def rows_html(key: str) -> list[str]:
        return [
            f"<tr><td>{e(r['name'])}</td><td>{e(_verdicts_text(r.get('verdicts') or {}))}</td>"
            f"<td>{r['runs']}</td><td>{r['gpu_hours']:.2f}</td></tr>"
            for r in doc.get(key, [])
        ]

    def table(key: str, ident: str, what: str) -> str:
        head = f"<tr><th>{what}</th><th>verdict</th><th>runs</th><th>GPU-hours</th></tr>"
        rows = rows_html(key)
        if len(rows) <= TABLE_ROWS:
            return f'<table id="{ident}">{head}{"".join(rows)}</table>'
        # A busy host's week has hundreds of origins (fresh user F: about 800 rows); the
        # first ones (the doc's order: most GPU-hours and runs first) stay in view.
        shown, more = "".join(rows[:TABLE_ROWS]), rows[TABLE_ROWS:]
        return (
            f'<table id="{ident}">{head}{shown}</table><details class="more-rows">'
            f"<summary>{len(more)} more row(s)</summary><table>{head}{''.join(more)}</table>"
            "</details>"
        )

    events_html = "".join(
        f"<tr><td>{e(_when(ev['time']))}</td><td>{e(ev['what'])}</td><td>{e(ev['severity'])}</td>"
        f"<td>{e(ev['kind'])}</td><td>{e(ev['text'])}</td></tr>"
        for ev in doc["timeline"]
    )
    open_rows = "".join(
        f"<tr><td>F{f['id']}</td><td>{e(f['kind'])}</td><td>{e(f['severity'])}</td>"
        f"<td>{e(f['message'])}</td></tr>"
        for f in doc["open"]
    )
    style = (
        "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #bbb;padding:2px 6px;font-size:13px;text-align:left}"
        "svg{max-width:100%;height:auto}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{e(title)}</title>'
        f"<style>{style}</style></head><body>"
        f"<h1>{e(title)}</h1><p>{e(_when(since))} to {e(_when(until))}</p>"
        f"<h2>GPUs</h2>{timeline}"
        f"<h2>Per origin</h2>{table('by_origin', 'by-origin', 'origin')}"
        f"<h2>Per user</h2>{table('by_user', 'by-user', 'user')}"
        f"<h2>Per class</h2>{table('by_class', 'by-class', 'class')}"
        '<h2>Timeline</h2><table id="events"><tr><th>time</th><th>event</th>'
        f"<th>severity</th><th>kind</th><th>what</th></tr>{events_html}</table>"
        '<h2>Still open</h2><table id="open"><tr><th>id</th><th>kind</th>'
        f"<th>severity</th><th>message</th></tr>{open_rows}</table>"
        "</body></html>\n"
    )
