"""The status document the daemon serves on its socket (docs/status.md)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from watchdog.lineage.describe import describe_origin
from watchdog.render import gpu_json

if TYPE_CHECKING:
    from watchdog.daemon.loop import Daemon


def build_status(daemon: Daemon) -> dict[str, Any]:
    """Everything ``rogue-watchdog status`` shows, as plain JSON.

    Returns:
        Keys: ``pid``, ``started_at``, ``config`` {path, checksum}, ``last_scan`` {time,
        duration_s} or None, ``nvml``, ``gpus``, ``jobs``, ``findings`` (open, with
        ``age_s``), ``alerts`` (delivery health), ``degraded`` (component → error).
    """
    from watchdog.daemon.loop import config_checksum

    now = time.time()
    last = daemon.last
    result = last.result if last else None
    doc: dict[str, Any] = {
        "pid": os.getpid(),
        "host": daemon.scanner.host,
        "started_at": daemon.started_at,
        "config": {"path": daemon.config_path, "checksum": config_checksum(daemon.config_path)},
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
        "findings": [
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
        ],
        "alerts": daemon.db.delivery_health(),
        "degraded": dict(daemon.degraded),
    }
    return doc
