"""Retention: history older than the configured windows is deleted a bounded batch at
a time, across the tables that keep history (findings, deliveries, jobs, runs).
"""

from __future__ import annotations

from .table import Table


class Retention(Table):
    """Deletes old history from every table that keeps it."""

    def prune(
        self,
        now: float,
        *,
        findings_s: float,
        alerts_s: float,
        jobs_s: float,
        limit: int = 5000,
    ) -> dict[str, int]:
        """Delete history older than the retention windows, at most ``limit`` rows per
        table per call (so one call never stalls a tick; the next call goes on).

        - resolved findings resolved before ``now - findings_s`` that have no alert
          still waiting to be sent;
        - delivered and dead-lettered alerts spooled before ``now - alerts_s``;
        - jobs gone before ``now - jobs_s`` (a respawn after that is a new job), and
          runs last seen before then (``job_runs``: the learning period's history).

        Open findings, queued alerts, jobs still present and the actions audit trail are
        never deleted. A window of 0 keeps that history forever. Freed pages are reused,
        so the file stops growing once the windows are full.

        Returns:
            Rows deleted per table: ``{"findings": N, "deliveries": N, "jobs": N,
            "runs": N}``.
        """
        out = {"findings": 0, "deliveries": 0, "jobs": 0, "runs": 0}
        with self.transaction() as conn:
            if alerts_s > 0:
                out["deliveries"] = conn.execute(
                    "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
                    " WHERE (delivered_at IS NOT NULL OR dead_at IS NOT NULL)"
                    " AND created_at<? LIMIT ?)",
                    (now - alerts_s, limit),
                ).rowcount
            if findings_s > 0:
                cutoff = now - findings_s
                out["findings"] = conn.execute(
                    "DELETE FROM findings WHERE id IN (SELECT f.id FROM findings f"
                    " WHERE f.resolved_at IS NOT NULL AND f.resolved_at<? AND NOT EXISTS"
                    " (SELECT 1 FROM deliveries d WHERE d.finding_id=f.id"
                    " AND d.delivered_at IS NULL AND d.dead_at IS NULL) LIMIT ?)",
                    (cutoff, limit),
                ).rowcount
            if jobs_s > 0:
                out["jobs"] = conn.execute(
                    "DELETE FROM jobs WHERE signature IN (SELECT signature FROM jobs"
                    " WHERE gone_at IS NOT NULL AND gone_at<? LIMIT ?)",
                    (now - jobs_s, limit),
                ).rowcount
                out["runs"] = conn.execute(
                    "DELETE FROM job_runs WHERE rowid IN (SELECT rowid FROM job_runs"
                    " WHERE last_seen<? LIMIT ?)",
                    (now - jobs_s, limit),
                ).rowcount
        return out
