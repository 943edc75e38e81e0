"""The ``jobs`` table (one row per job signature: when it was first and last seen) and
``job_runs`` (one row per run, i.e. per root process, for the learning period).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..model import UnreadableRecord
from ..records import JobRecord, RunRecord
from .table import Table, _loads, clean


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        row["signature"], row["summary"], row["user"], row["verdict"],
        _loads(row["origin_json"], dict, UnreadableRecord), row["first_seen"], row["last_seen"],
        row["root_pid"], row["start_ticks"], _loads(row["pids_json"], list, []), row["gone_at"],
        row["sightings"],
    )  # fmt: skip


def _run(row: sqlite3.Row | tuple[Any, ...]) -> RunRecord:
    cmdline = _loads(row[4], list, [])
    gpus = _loads(row[11], list, [])
    return RunRecord(
        str(row[0]), int(row[1]), int(row[2]), row[3],
        [str(c) for c in cmdline], _loads(row[5], dict, UnreadableRecord), str(row[6]),
        row[7], float(row[8]), float(row[9]), float(row[10]), [str(g) for g in gpus],
        row[12] if isinstance(row[12], int) else None,
        row[13] if isinstance(row[13], str) else None,
        [str(e) for e in _loads(row[14], list, [])] if row[14] is not None else None,
    )  # fmt: skip


_RUN_COLUMNS = (
    "signature, root_pid, start_ticks, user, cmdline_json, origin_json, verdict, rule,"
    " started_at, last_seen, gpu_s, gpus_json, max_gpu_bytes, workload, workload_evidence_json"
)


class JobTable(Table):
    """Jobs by signature, and their runs."""

    def job(self, signature: str) -> JobRecord | None:
        """The record of one job signature, or None."""
        row = self.conn.execute("SELECT * FROM jobs WHERE signature=?", (signature,)).fetchone()
        return _job(row) if row else None

    def present_jobs(self) -> list[JobRecord]:
        """Jobs not marked gone."""
        rows = self.conn.execute("SELECT * FROM jobs WHERE gone_at IS NULL ORDER BY first_seen")
        return [_job(r) for r in rows]

    def run_signature(self, root_pid: int, start_ticks: int) -> str | None:
        """The signature a run was first recorded under (the tracker keeps a running
        job's first one for its life), or None for a run never recorded.

        Args:
            root_pid: The run's root PID.
            start_ticks: Its start time, in clock ticks since boot.
        """
        row = self.conn.execute(
            "SELECT signature FROM job_runs WHERE root_pid=? AND start_ticks=?"
            " ORDER BY rowid LIMIT 1",
            (root_pid, start_ticks),
        ).fetchone()
        return str(row[0]) if row else None

    def present_run_origins(self) -> dict[tuple[int, int], dict[str, Any]]:
        """The recorded origin of every run of a present job seen at the job's last
        sighting: ``(root PID, start ticks) -> origin JSON``. The ``jobs`` row holds one
        root per signature; copies of one job (an excess run beside the sanctioned one)
        each have their own run, and a restart must not re-attribute any of them."""
        rows = self.conn.execute(
            "SELECT r.root_pid, r.start_ticks, r.origin_json FROM job_runs r"
            " JOIN jobs j ON j.signature = r.signature"
            " WHERE j.gone_at IS NULL AND r.last_seen >= j.last_seen"
            " ORDER BY r.started_at, r.root_pid"
        )
        return {
            (int(pid), int(start)): _loads(origin, dict, UnreadableRecord)
            for pid, start, origin in rows
        }

    def upsert_job(self, rec: JobRecord) -> None:
        """Insert or replace a job record (by signature)."""
        self.conn.execute(
            "INSERT INTO jobs(signature, summary, user, verdict, origin_json, first_seen,"
            " last_seen, root_pid, start_ticks, pids_json, gone_at, sightings)"
            " VALUES (:signature, :summary, :user, :verdict, :origin_json, :first_seen,"
            " :last_seen, :root_pid, :start_ticks, :pids_json, :gone_at, :sightings)"
            " ON CONFLICT(signature) DO UPDATE SET summary=excluded.summary,"
            " user=excluded.user, verdict=excluded.verdict, origin_json=excluded.origin_json,"
            " first_seen=excluded.first_seen, last_seen=excluded.last_seen,"
            " root_pid=excluded.root_pid, start_ticks=excluded.start_ticks,"
            " pids_json=excluded.pids_json, gone_at=excluded.gone_at,"
            " sightings=excluded.sightings",
            {
                "signature": rec.signature,
                "summary": clean(rec.summary),
                "user": clean(rec.user),
                "verdict": rec.verdict,
                # Kept exactly (JSON escapes non-UTF-8 bytes losslessly): disable-source
                # acts on the recorded origin of a job that has exited.
                "origin_json": json.dumps(rec.origin),
                "first_seen": rec.first_seen,
                "last_seen": rec.last_seen,
                "root_pid": rec.root_pid,
                "start_ticks": rec.start_ticks,
                "pids_json": json.dumps(rec.pids),
                "gone_at": rec.gone_at,
                "sightings": rec.sightings,
            },
        )

    def record_run(
        self,
        rec: RunRecord,
        now: float,
    ) -> None:
        """Insert a run, or update its last sighting: verdict, rule, GPUs held, and
        GPU-seconds grown by the time since its last sighting times the GPUs it holds."""
        gpus = sorted(rec.gpus or [])
        self.conn.execute(
            f"INSERT INTO job_runs({_RUN_COLUMNS})"
            " VALUES (:signature, :root_pid, :start_ticks, :user, :cmdline_json,"
            " :origin_json, :verdict, :rule, :now, :now, 0, :gpus_json, :gpu_bytes,"
            " :workload, :workload_evidence)"
            " ON CONFLICT(root_pid, start_ticks, signature) DO UPDATE SET"
            " verdict=excluded.verdict, rule=excluded.rule, origin_json=excluded.origin_json,"
            " gpu_s=job_runs.gpu_s + MAX(0, :now - job_runs.last_seen) * :n_gpus,"
            " last_seen=:now, gpus_json=:gpus_union,"
            " max_gpu_bytes=CASE WHEN :gpu_bytes IS NULL THEN job_runs.max_gpu_bytes"
            " ELSE MAX(COALESCE(job_runs.max_gpu_bytes, 0), :gpu_bytes) END,"
            " workload=COALESCE(excluded.workload, job_runs.workload),"
            " workload_evidence_json=COALESCE(excluded.workload_evidence_json,"
            " job_runs.workload_evidence_json)",
            {
                "signature": rec.signature,
                "root_pid": rec.root_pid,
                "start_ticks": rec.start_ticks,
                "user": clean(rec.user),
                "cmdline_json": json.dumps(rec.cmdline),
                "origin_json": json.dumps(rec.origin),
                "verdict": rec.verdict,
                "rule": rec.rule,
                "now": now,
                "gpus_json": json.dumps(gpus),
                "n_gpus": len(gpus),
                "gpus_union": json.dumps(sorted(set(gpus) | set(self._run_gpus(rec)))),
                "gpu_bytes": rec.max_gpu_bytes,
                "workload": rec.workload,
                "workload_evidence": (
                    None
                    if rec.workload_evidence is None
                    else json.dumps([clean(e) for e in rec.workload_evidence])
                ),
            },
        )

    def last_runs(self, signature: str, last_seen: float) -> list[RunRecord]:
        """The runs of one signature last seen at or after ``last_seen`` (the job's
        ``last_seen``: the instances that ran when it was last seen), oldest first."""
        rows = self.conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE signature=? AND last_seen>=?"
            " ORDER BY started_at, root_pid",
            (signature, last_seen),
        )
        return [_run(r) for r in rows]

    def _run_gpus(self, rec: RunRecord) -> list[str]:
        row = self.conn.execute(
            "SELECT gpus_json FROM job_runs WHERE root_pid=? AND start_ticks=? AND signature=?",
            (rec.root_pid, rec.start_ticks, rec.signature),
        ).fetchone()
        return [str(g) for g in _loads(row[0], list, [])] if row else []

    def run(self, root_pid: int, start_ticks: int, signature: str) -> RunRecord | None:
        """The record of one run (its root's identity and signature), or None."""
        row = self.conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM job_runs"
            " WHERE root_pid=? AND start_ticks=? AND signature=?",
            (root_pid, start_ticks, signature),
        ).fetchone()
        return _run(row) if row else None

    def runs(self, since: float = 0.0) -> list[RunRecord]:
        """Runs last seen at or after ``since``, oldest start first."""
        rows = self.conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE last_seen>=? ORDER BY started_at, root_pid",
            (since,),
        )
        return [_run(r) for r in rows]

    def mark_gone(self, signature: str, now: float) -> None:
        """Record that a job signature is no longer seen."""
        self.conn.execute("UPDATE jobs SET gone_at=? WHERE signature=?", (now, signature))
