"""Scan results as JSON (the documented contract) and as a table for people.

The JSON shape is specified in docs/scan-json-schema.md; its key names are a contract.
"""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING, Any

from watchdog.lineage.describe import describe_origin
from watchdog.model import Finding, GpuInfo, Job
from watchdog.policy.findings import fmt_bytes

if TYPE_CHECKING:
    from watchdog.scan import ScanResult

SCHEMA_VERSION = 1


def gpu_json(gpu: GpuInfo) -> dict[str, Any]:
    """One ``gpus[]`` entry."""
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "memory_total_bytes": gpu.memory_total_bytes,
        "memory_used_bytes": gpu.memory_used_bytes,
        "mig_index": gpu.mig_index,
    }


def job_json(job: Job) -> dict[str, Any]:
    """One ``jobs[]`` entry."""
    return {
        "root_pid": job.root_pid,
        "pids": list(job.pids),
        "user": job.user,
        "cmdline": list(job.cmdline),
        "gpu_memory_bytes": job.gpu_memory_bytes,
        "gpu_uuids": list(job.gpu_uuids),
        "devices": list(job.devices),
        "listening": list(job.listening),
        "verdict": job.verdict,
        "rule": job.rule,
        "reason": job.reason,
        "evidence": list(job.evidence),
        "origin": job.origin.to_json(),
        "lineage": [{"pid": p.pid, "exe": p.exe, "cmdline": list(p.cmdline)} for p in job.lineage],
    }


def finding_json(f: Finding) -> dict[str, Any]:
    """One ``findings[]`` entry."""
    return {
        "kind": f.kind,
        "severity": f.severity,
        "message": f.message,
        "root_pid": f.root_pid,
        "details": f.details,
    }


def result_json(result: ScanResult) -> dict[str, Any]:
    """The whole ``scan --json`` document."""
    return {
        "schema_version": SCHEMA_VERSION,
        "host": result.host,
        "time": result.time.isoformat(timespec="seconds"),
        "duration_s": round(result.duration_s, 4),
        "nvml": {
            "available": result.nvml.available,
            "driver_version": result.nvml.driver_version,
            "error": result.nvml.error,
        },
        "gpus": [gpu_json(g) for g in result.gpus],
        "jobs": [job_json(j) for j in result.jobs],
        "findings": [finding_json(f) for f in result.findings],
    }


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """Make text safe for a terminal or a log line.

    Command lines are attacker-controlled bytes: non-UTF-8 bytes (kept as surrogates by
    ``surrogateescape``) become ``\\xNN`` and control characters (newlines that would
    forge table rows, terminal escapes) become backslash escapes.
    """
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(_ESCAPES.get(ch) or f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def result_table(result: ScanResult) -> str:
    """The human view of a scan: header, GPUs, one row per job, findings."""
    # Clip to the terminal; piped output (logs, mail) keeps whole command lines.
    tty = sys.stdout is not None and sys.stdout.isatty()
    width = shutil.get_terminal_size((120, 24)).columns if tty else 100_000
    lines = [
        f"rogue-watchdog scan  host {result.host}  {result.time.isoformat(timespec='seconds')}"
    ]
    if result.nvml.available:
        lines.append(f"NVML: driver {result.nvml.driver_version}, {len(result.gpus)} GPU(s)")
        for g in result.gpus:
            mig = f" MIG {g.mig_index}" if g.mig_index is not None else ""
            lines.append(
                f"  GPU {g.index}{mig}  {g.name}  {fmt_bytes(g.memory_used_bytes)} / "
                f"{fmt_bytes(g.memory_total_bytes)}  {g.uuid}"
            )
    else:
        lines.append(f"NVML: unavailable ({result.nvml.error}); OS sources only")
    lines.append("")
    if not result.jobs:
        lines.append("No training jobs found.")
    else:
        head = (
            f"{'VERDICT':<10} {'PID':>7} {'USER':<10} {'PROCS':>5} {'GPU MEM':>9}  "
            f"{'ORIGIN':<38} COMMAND"
        )
        lines.append(head)
        for j in result.jobs:
            origin = _clip(describe_origin(j.origin), 38)
            row = (
                f"{j.verdict:<10} {j.root_pid:>7} {_clip(j.user or '?', 10):<10} {len(j.pids):>5} "
                f"{fmt_bytes(j.gpu_memory_bytes) if j.gpu_memory_bytes is not None else '-':>9}  "
                f"{origin:<38} "
            )
            lines.append(row + _clip(" ".join(j.cmdline), max(20, width - len(row))))
    lines.append("")
    if result.findings:
        lines.append(f"Findings ({len(result.findings)}):")
        for f in result.findings:
            lines.append(f"  [{f.severity}] {f.kind}: {f.message}")
    else:
        lines.append("No findings.")
    return "\n".join(printable(line) for line in lines)
