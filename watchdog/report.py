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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchdog.hosttext import safe_text
from watchdog.model import Origin
from watchdog.render import fit
from watchdog.state import ActionRecord, FindingRecord, RunRecord

WIDTH = 80


@dataclass(frozen=True)
class Event:
    """One entry of the timeline.

    Attributes:
        time: POSIX time.
        what: ``opened``, ``resolved``, ``action`` or ``undone``.
        kind: The finding's kind or the action's kind.
        severity: The finding's severity; ``-`` for actions.
        text: One sentence (host text escaped).
    """

    time: float
    what: str
    kind: str
    severity: str
    text: str


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def timeline(
    findings: Sequence[FindingRecord], actions: Sequence[ActionRecord], since: float
) -> list[Event]:
    """Every finding opened or resolved and every action taken or undone since
    ``since``, oldest first (ties: finding before action, by id)."""
    out: list[tuple[float, int, int, Event]] = []
    for f in findings:
        if f.opened_at >= since:
            text = safe_text(f"F{f.id} {f.message}")
            out.append(
                (f.opened_at, 0, f.id, Event(f.opened_at, "opened", f.kind, f.severity, text))
            )
        if f.resolved_at is not None and f.resolved_at >= since:
            text = safe_text(f"F{f.id} resolved")
            out.append(
                (f.resolved_at, 0, f.id, Event(f.resolved_at, "resolved", f.kind, f.severity, text))
            )
    for a in actions:
        dry = " (dry run)" if a.dry_run else ""
        if a.created_at >= since:
            text = safe_text(f"A{a.id} {a.kind} {a.target}: {a.outcome}{dry} by {a.actor}")
            out.append((a.created_at, 1, a.id, Event(a.created_at, "action", a.kind, "-", text)))
        if a.undone_at is not None and a.undone_at >= since:
            text = safe_text(f"A{a.id} undone: {a.kind} {a.target}")
            out.append((a.undone_at, 1, a.id, Event(a.undone_at, "undone", a.kind, "-", text)))
    return [e for *_, e in sorted(out, key=lambda t: (t[0], t[1], t[2]))]


def usage(runs: Sequence[RunRecord], by: str) -> list[tuple[str, int, float]]:
    """Runs and GPU-hours per origin (``by="origin"``: its one-line description), per
    user (``by="user"``) or per workload class (``by="class"``; ``-`` for runs recorded
    before classes were), most GPU-hours first, then by name."""
    table: dict[str, list[float]] = {}
    for r in runs:
        if by == "origin":
            key = Origin.from_json(r.origin).describe()
        elif by == "class":
            key = r.workload or "-"
        else:
            key = r.user or "-"
        row = table.setdefault(safe_text(key), [0, 0.0])
        row[0] += 1
        row[1] += r.gpu_s / 3600.0
    return sorted(
        ((k, int(v[0]), round(v[1], 3)) for k, v in table.items()), key=lambda t: (-t[2], t[0])
    )


def report_json(
    runs: Sequence[RunRecord],
    findings: Sequence[FindingRecord],
    actions: Sequence[ActionRecord],
    since: float,
    now: float,
) -> dict[str, Any]:
    """The report as plain JSON: ``since``, ``until``, ``by_origin``, ``by_user`` and
    ``by_class`` (workload class; ``{name, runs, gpu_hours}``), ``timeline`` (``{time,
    what, kind, severity, text}``), ``open`` (``{id, kind, severity, message, opened_at}``)."""
    return {
        "since": since,
        "until": now,
        "by_origin": [{"name": n, "runs": c, "gpu_hours": h} for n, c, h in usage(runs, "origin")],
        "by_user": [{"name": n, "runs": c, "gpu_hours": h} for n, c, h in usage(runs, "user")],
        "by_class": [
            {"name": n, "runs": c, "gpu_hours": h} for n, c, h in usage(runs, "class")
        ],
        "timeline": [e.__dict__ for e in timeline(findings, actions, since)],
        "open": [
            {
                "id": f.id, "kind": f.kind, "severity": f.severity,
                "message": safe_text(f.message), "opened_at": f.opened_at,
            }
            for f in findings
            if f.resolved_at is None
        ],
    }  # fmt: skip


def _table(title: str, rows: list[tuple[str, int, float]], width: int) -> list[str]:
    name_w = width - 22
    out = [title, f"  {'':<{name_w}}{'runs':>7} {'GPU-hours':>11}"]
    for name, n, hours in rows:
        shown = name if len(name) <= name_w else name[: name_w - 1] + "…"
        out.append(f"  {shown:<{name_w}}{n:>7} {hours:>11.2f}")
    if not rows:
        out.append("  (none)")
    return out


def report_text(doc: dict[str, Any], width: int = WIDTH) -> str:
    """The JSON report as text, every line at most ``width`` columns."""
    out = [f"rogue-watchdog report: {_when(doc['since'])} to {_when(doc['until'])}", ""]
    tables = (("by_origin", "per origin"), ("by_user", "per user"), ("by_class", "per class"))
    for key, title in tables:
        rows = [(r["name"], r["runs"], r["gpu_hours"]) for r in doc.get(key, [])]
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
    return "\n".join(line[:width] for line in out)


_COLOURS = {"sanctioned": "#2e7d32", "rogue": "#c62828", "excess": "#ef6c00"}


def report_html(
    doc: dict[str, Any], runs: Sequence[RunRecord], title: str = "rogue-watchdog report"
) -> str:
    """The report as one self-contained HTML page: an inline SVG timeline per GPU (one
    bar per run that held it, coloured by verdict, incidents as marks) and the tables.
    Every host text is HTML-escaped; nothing is loaded from anywhere."""
    e = html.escape
    since, until = float(doc["since"]), float(doc["until"])
    span = max(until - since, 1.0)
    width, left = 900, 160
    gpus = sorted({g for r in runs for g in (r.gpus or [])})

    def x(ts: float) -> float:
        return round(left + (max(since, min(ts, until)) - since) / span * (width - left - 10), 1)

    svg = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{40 + 30 * max(1, len(gpus))}">']  # fmt: skip
    for i, gpu in enumerate(gpus):
        y = 20 + 30 * i
        svg.append(f'<text x="4" y="{y + 15}" font-size="12">{e(gpu[:22])}</text>')
        for r in runs:
            if gpu not in (r.gpus or []):
                continue
            x0, x1 = x(r.started_at), x(r.last_seen)
            colour = _COLOURS.get(r.verdict, "#757575")
            held = (
                f", up to {r.max_gpu_bytes / 2**30:.1f} GiB" if r.max_gpu_bytes is not None else ""
            )
            label = e(safe_text(f"PID {r.root_pid} {r.verdict}{held}: {' '.join(r.cmdline)}"))
            svg.append(
                f'<rect class="run {e(r.verdict)}" x="{x0}" y="{y}" width="{max(x1 - x0, 2)}" '
                f'height="20" fill="{colour}"><title>{label}</title></rect>'
            )
    for ev in doc["timeline"]:
        if ev["what"] in ("opened", "action"):
            xi = x(ev["time"])
            svg.append(
                f'<line class="incident" x1="{xi}" x2="{xi}" y1="10" '
                f'y2="{30 + 30 * max(1, len(gpus))}" stroke="#212121" stroke-dasharray="3,2">'
                f"<title>{e(ev['kind'])}: {e(ev['text'])}</title></line>"
            )
    svg.append("</svg>")

    def rows(key: str) -> str:
        return "".join(
            f"<tr><td>{e(r['name'])}</td><td>{r['runs']}</td><td>{r['gpu_hours']:.2f}</td></tr>"
            for r in doc.get(key, [])
        )

    events = "".join(
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
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{e(title)}</title>'
        f"<style>{style}</style></head><body>"
        f"<h1>{e(title)}</h1><p>{e(_when(since))} to {e(_when(until))}</p>"
        f"<h2>GPUs</h2>{''.join(svg)}"
        '<h2>Per origin</h2><table id="by-origin"><tr><th>origin</th><th>runs</th>'
        f"<th>GPU-hours</th></tr>{rows('by_origin')}</table>"
        '<h2>Per user</h2><table id="by-user"><tr><th>user</th><th>runs</th>'
        f"<th>GPU-hours</th></tr>{rows('by_user')}</table>"
        '<h2>Per class</h2><table id="by-class"><tr><th>class</th><th>runs</th>'
        f"<th>GPU-hours</th></tr>{rows('by_class')}</table>"
        '<h2>Timeline</h2><table id="events"><tr><th>time</th><th>event</th>'
        f"<th>severity</th><th>kind</th><th>what</th></tr>{events}</table>"
        '<h2>Still open</h2><table id="open"><tr><th>id</th><th>kind</th>'
        f"<th>severity</th><th>message</th></tr>{open_rows}</table>"
        "</body></html>\n"
    )
