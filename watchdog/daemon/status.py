"""The status document the daemon serves on its socket, and its text form (docs/status.md)."""

from __future__ import annotations

import os
import time
import weakref
from datetime import datetime
from typing import TYPE_CHECKING, Any

from watchdog import __version__
from watchdog.lineage.describe import describe_origin
from watchdog.model import REPORTED_SEVERITIES
from watchdog.render import gpu_json, printable

if TYPE_CHECKING:
    from watchdog.config import Config
    from watchdog.daemon.loop import Daemon

SCHEMA_VERSION = 1

# The checksum of the configuration IN FORCE, taken when a Config object is first seen
# (at start and on the tick after a reload). The file on disk may differ: a reload with a
# broken file is refused and the old configuration stays in force.
_stamps: weakref.WeakKeyDictionary[Daemon, tuple[Config, str | None]] = weakref.WeakKeyDictionary()


def note_config(daemon: Daemon) -> str | None:
    """Record the checksum of ``daemon.config`` the first time this Config is seen.

    Call it right after the configuration is loaded (start, and the tick hook after a
    reload). Returns the checksum in force.
    """
    from watchdog.daemon.loop import config_checksum

    stamp = _stamps.get(daemon)
    if stamp is not None and stamp[0] is daemon.config:
        return stamp[1]
    checksum = config_checksum(daemon.config_path)
    _stamps[daemon] = (daemon.config, checksum)
    return checksum


def build_status(daemon: Daemon) -> dict[str, Any]:
    """Everything ``rogue-watchdog status`` shows, as plain JSON.

    Safe to call from the status socket's thread while the loop ticks: it reads the last
    tick's immutable summary, its own thread's database connection, and copies of the
    mutable dicts.

    Returns:
        Keys (docs/status.md): ``schema_version``, ``version``, ``now``, ``pid``, ``host``,
        ``started_at``, ``interval_s``, ``config`` {path, checksum (in force),
        file_checksum (on disk now), changed_on_disk}, ``last_scan`` {time, duration_s} or
        None, ``nvml``, ``gpus``, ``jobs``, ``findings`` (open, with ``age_s``), ``alerts``
        (delivery health), ``degraded`` (component → error).
    """
    from watchdog.daemon.events import events_status
    from watchdog.daemon.loop import config_checksum

    now = time.time()
    last = daemon.last
    result = last.result if last else None
    on_disk = config_checksum(daemon.config_path)
    stamp = _stamps.get(daemon)
    in_force = stamp[1] if stamp is not None and stamp[0] is daemon.config else on_disk
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "version": __version__,
        "now": now,
        "pid": os.getpid(),
        "host": daemon.scanner.host,
        "started_at": daemon.started_at,
        "interval_s": daemon.config.daemon.interval_s,
        "config": {
            "path": daemon.config_path,
            "checksum": in_force,
            "file_checksum": on_disk,
            "changed_on_disk": in_force != on_disk,
        },
        "last_scan": {"time": last.time, "duration_s": round(last.duration_s, 4)} if last else None,
        "nvml": (
            {
                "available": result.nvml.available,
                "driver_version": result.nvml.driver_version,
                "error": result.nvml.error,
            }
            if result
            else None
        ),
        "gpus": [gpu_json(g) for g in result.gpus] if result else [],
        "jobs": [
            {
                "root_pid": j.root_pid,
                "pids": j.pids,
                "user": j.user,
                "cmdline": list(j.cmdline),
                "verdict": j.verdict,
                "rule": j.rule,
                "origin": describe_origin(j.origin),
                "origin_kind": j.origin.kind,
                "gpu_memory_bytes": j.gpu_memory_bytes,
            }
            for j in (result.jobs if result else [])
        ],
        "degraded": _copy(daemon.degraded),
        "events": events_status(daemon),
    }
    # The state database may be unreadable (overwritten, disk gone): each section that
    # reads it degrades on its own, and the answer carries what the daemon knows in
    # memory (the last scan's findings), so `status` never turns into an error.
    try:
        doc["findings"] = [
            {
                "id": f.id,
                "kind": f.kind,
                "severity": f.severity,
                "message": f.message,
                "root_pid": f.root_pid,
                "opened_at": f.opened_at,
                "age_s": round(now - f.opened_at, 1),
                "seen_count": f.seen_count,
            }
            for f in daemon.db.open_findings()
        ]
    except Exception as exc:  # sqlite3.DatabaseError and whatever a broken file raises
        doc["degraded"]["state"] = f"open findings unreadable: {type(exc).__name__}: {exc}"
        doc["findings"] = [
            {
                "id": None,
                "kind": f.kind,
                "severity": f.severity,
                "message": f.message,
                "root_pid": f.root_pid,
                "opened_at": None,
                "age_s": None,
                "seen_count": None,
            }
            for f in (result.findings if result else [])
        ]
    try:
        doc["alerts"] = daemon.db.delivery_health()
    except Exception as exc:
        doc["degraded"].setdefault("state", f"alert spool unreadable: {type(exc).__name__}: {exc}")
        doc["alerts"] = {}
    return doc


def _copy(d: dict[str, str]) -> dict[str, str]:
    # The loop thread may change the dict while this thread copies it.
    for _ in range(10):
        try:
            return dict(d)
        except RuntimeError:
            continue
    return {}


def exit_code(doc: dict[str, Any]) -> int:
    """``status`` exit code for a daemon that answered: 1 with open findings of
    severity warning or above, or with any degraded part (a warning too: e.g. findings
    cannot be stored), else 0 (docs/status.md)."""
    if doc.get("degraded"):
        return 1
    open_ = doc.get("findings") or []
    return 1 if any(f.get("severity") in REPORTED_SEVERITIES for f in open_) else 0


def _when(ts: float | None) -> str:
    if ts is None:
        return "never"
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f}"


def render_status(doc: dict[str, Any]) -> str:
    """The at-a-glance text of ``rogue-watchdog status`` (command lines made printable)."""
    now = float(doc.get("now") or time.time())
    out: list[str] = []

    def line(text: str) -> None:
        out.append(printable(text))

    started = doc.get("started_at")
    line(
        f"rogue-watchdog {doc.get('version', '?')} on {doc.get('host')}: running since "
        f"{_when(started)} (up {_age(now - started) if started else '?'}, pid {doc.get('pid')})"
    )
    cfg = doc.get("config") or {}
    text = f"config: {cfg.get('path') or '(built-in defaults)'} sha256:{cfg.get('checksum')}"
    if cfg.get("changed_on_disk"):
        text += (
            f" (the file on disk is now sha256:{cfg.get('file_checksum')}: "
            "reload pending or refused, see the log)"
        )
    line(text)
    scan = doc.get("last_scan")
    if scan:
        line(
            f"last scan: {_when(scan['time'])} ({_age(now - scan['time'])} ago), took "
            f"{scan['duration_s']:.2f}s, every {doc.get('interval_s')}s"
        )
    else:
        line("last scan: none yet")
    events = doc.get("events")
    if isinstance(events, dict):
        if events.get("mode") == "events":
            counts = events.get("events") or {}
            line(
                f"process events: kernel proc connector ({counts.get('exec', 0)} execs, "
                f"{events.get('lost', 0)} losses, {events.get('full_sweeps', 0)} full sweeps)"
            )
        else:
            line(f"process events: unavailable, polling only ({events.get('reason')})")
    nvml = doc.get("nvml")
    if nvml is None:
        line("NVML: not probed yet")
    elif nvml.get("available"):
        line(f"NVML: ok, driver {nvml.get('driver_version') or '?'}")
    else:
        line(f"NVML: unavailable ({nvml.get('error') or 'disabled'})")
    gpus = doc.get("gpus") or []
    line(f"GPUs: {len(gpus)}")
    for g in gpus:
        line(
            f"  {g.get('index')}  {g.get('name')}  {_gib(g.get('memory_used_bytes'))}/"
            f"{_gib(g.get('memory_total_bytes'))} GiB  {g.get('uuid')}"
        )
    jobs = doc.get("jobs") or []
    line(f"jobs: {len(jobs)}")
    for j in jobs:
        cmd = " ".join(j.get("cmdline") or [])
        line(
            f"  {j.get('verdict'):<10} pid {j.get('root_pid'):<7} {j.get('user') or '?':<10} "
            f"{_gib(j.get('gpu_memory_bytes'))} GiB  origin: {j.get('origin')}"
        )
        line(f"    {cmd[:160]}")
    findings = doc.get("findings") or []
    line(f"open findings: {len(findings)}")
    for f in findings:
        line(
            f"  #{f.get('id')} {f.get('severity'):<8} {f.get('kind')} "
            f"(open {_age(float(f.get('age_s') or 0))}, seen {f.get('seen_count')}x): "
            f"{f.get('message')}"
        )
    alerts = doc.get("alerts") or {}
    line(
        f"alerts: {alerts.get('queued', 0)} queued, {alerts.get('failed_attempts', 0)} "
        f"retrying, last error: {alerts.get('last_error') or 'none'}"
    )
    degraded = doc.get("degraded") or {}
    if degraded:
        line("degraded:")
        for part, error in sorted(degraded.items()):
            line(f"  {part}: {error}")
    else:
        line("degraded: none")
    return "\n".join(out)
