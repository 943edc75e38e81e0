"""The fleet's picture from Prometheus (for ``rogue-watchdog fleet --prometheus URL``).

No server of our own: the command asks the Prometheus that scrapes every host's
``/metrics`` through its HTTP API (``GET /api/v1/query``, an instant query;
https://prometheus.io/docs/prometheus/latest/querying/api/) and prints the hosts, the
rogue and excess jobs per host with GPU, user and origin, and the hosts whose watchdog
stopped ticking. Exit codes: 0 nothing to report, 1 rogue jobs or hosts not ticking,
2 usage error, 4 Prometheus unreachable or answering with an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

# What "stopped ticking" means; the shipped RogueWatchdogNotTicking rule uses the same.
DEFAULT_STALE_AFTER_S = 300.0
# How far back a host that stopped answering is still remembered.
LOOKBACK = "1h"
Q_HOSTS = f"last_over_time(rogue_watchdog_info[{LOOKBACK}])"
Q_TICK_AGE = f"time() - max_over_time(rogue_watchdog_last_tick_timestamp_seconds[{LOOKBACK}])"
Q_JOBS = 'rogue_watchdog_jobs_by_gpu{verdict=~"rogue|excess"} > 0'
Q_UP = "up"


class FleetError(Exception):
    """Prometheus could not be asked, or answered with an error (exit 4)."""


@dataclass
class Host:
    """One watchdog as Prometheus last saw it.

    Attributes:
        host: The watchdog's host name (its ``host`` label).
        instance: The scrape target (``instance`` label).
        job: The scrape job (``job`` label).
        version: rogue-watchdog version on the host.
        last_tick_age_s: Seconds since its last scan; None when unknown.
        up: Whether the last scrape succeeded; None when Prometheus no longer knows.
        rogue_jobs: Rogue and excess jobs on the host (summed over its GPUs, a job on
            two GPUs counts twice).
    """

    host: str
    instance: str
    job: str
    version: str
    last_tick_age_s: float | None = None
    up: bool | None = None
    rogue_jobs: int = 0

    def ticking(self, stale_after_s: float) -> bool:
        """True when the last scan is younger than ``stale_after_s``."""
        return self.last_tick_age_s is not None and self.last_tick_age_s <= stale_after_s


@dataclass
class RogueJob:
    """Rogue or excess jobs with one label set on one GPU of one host."""

    host: str
    gpu: str
    gpu_uuid: str
    verdict: str
    user: str
    origin_kind: str
    origin: str
    jobs: int


@dataclass
class Picture:
    """The fleet at one instant."""

    prometheus: str
    time: float
    stale_after_s: float
    hosts: list[Host] = field(default_factory=list)
    rogue: list[RogueJob] = field(default_factory=list)

    @property
    def not_ticking(self) -> list[Host]:
        """Hosts whose watchdog has not scanned for ``stale_after_s``."""
        return [h for h in self.hosts if not h.ticking(self.stale_after_s)]

    def exit_code(self) -> int:
        """1 when there are rogue jobs or hosts not ticking, else 0."""
        return 1 if self.rogue or self.not_ticking else 0


def query(client: httpx.Client, base: str, expr: str) -> tuple[float, list[dict[str, Any]]]:
    """One instant query.

    Returns:
        ``(evaluation time, vector)``; each element has ``metric`` (labels) and
        ``value`` (``[time, "text"]``).

    Raises:
        FleetError: Connection failure, a non-2xx answer, a non-vector result.
    """
    import httpx  # here, not at import: `--help` and `status` must not pay for it

    url = base.rstrip("/") + "/api/v1/query"
    try:
        resp = client.get(url, params={"query": expr})
    except httpx.HTTPError as exc:
        raise FleetError(
            f"cannot reach Prometheus at {base}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        doc = resp.json()
    except ValueError:
        doc = None
    if resp.status_code != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else resp.text[:200]
        raise FleetError(f"Prometheus at {base} refused {expr!r}: HTTP {resp.status_code}: {err}")
    data = doc.get("data") or {}
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise FleetError(f"Prometheus at {base} answered {expr!r} with no instant vector")
    result = data["result"]
    when = float(result[0]["value"][0]) if result else math.nan
    return when, result


def _value(sample: dict[str, Any]) -> float:
    try:
        return float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def picture(
    base: str, *, stale_after_s: float = DEFAULT_STALE_AFTER_S, timeout_s: float = 10.0
) -> Picture:
    """Ask Prometheus for the fleet's picture.

    Args:
        base: Prometheus base URL (``http://prometheus:9090``, or with its route prefix).
        stale_after_s: A host whose last scan is older than this is "not ticking".
        timeout_s: Per-request timeout.

    Raises:
        FleetError: Prometheus unreachable or answering with an error.
    """
    import httpx

    with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
        t, hosts = query(client, base, Q_HOSTS)
        _, ages = query(client, base, Q_TICK_AGE)
        _, jobs = query(client, base, Q_JOBS)
        _, ups = query(client, base, Q_UP)
    pic = Picture(prometheus=base, time=t, stale_after_s=stale_after_s)
    by_target: dict[tuple[str, str], Host] = {}
    for s in hosts:
        m = s.get("metric", {})
        h = Host(
            host=str(m.get("host", "")),
            instance=str(m.get("instance", "")),
            job=str(m.get("job", "")),
            version=str(m.get("version", "")),
        )
        by_target[(h.instance, h.job)] = h
        pic.hosts.append(h)
    for s in ages:
        m = s.get("metric", {})
        target = by_target.get((str(m.get("instance", "")), str(m.get("job", ""))))
        if target is not None and not math.isnan(_value(s)):
            target.last_tick_age_s = _value(s)
    for s in ups:
        m = s.get("metric", {})
        target = by_target.get((str(m.get("instance", "")), str(m.get("job", ""))))
        if target is not None:
            target.up = _value(s) == 1
    hosts_by_name = {h.host: h for h in pic.hosts}
    for s in jobs:
        m = s.get("metric", {})
        n = _value(s)
        rj = RogueJob(
            host=str(m.get("host", "")),
            gpu=str(m.get("gpu", "")),
            gpu_uuid=str(m.get("gpu_uuid", "")),
            verdict=str(m.get("verdict", "")),
            user=str(m.get("user", "")),
            origin_kind=str(m.get("origin_kind", "")),
            origin=str(m.get("origin", "")),
            jobs=0 if math.isnan(n) else int(n),
        )
        pic.rogue.append(rj)
        if rj.host in hosts_by_name:
            hosts_by_name[rj.host].rogue_jobs += rj.jobs
    pic.hosts.sort(key=lambda h: (h.host, h.instance))
    pic.rogue.sort(key=lambda r: (r.host, r.gpu, r.verdict, r.user, r.origin_kind, r.origin))
    return pic


def picture_json(pic: Picture) -> dict[str, Any]:
    """The ``--json`` document (docs/fleet.md)."""
    return {
        "prometheus": pic.prometheus,
        "time": None if math.isnan(pic.time) else pic.time,
        "stale_after_s": pic.stale_after_s,
        "hosts": [
            {
                "host": h.host,
                "instance": h.instance,
                "job": h.job,
                "version": h.version,
                "up": h.up,
                "last_tick_age_s": h.last_tick_age_s,
                "ticking": h.ticking(pic.stale_after_s),
                "rogue_jobs": h.rogue_jobs,
            }
            for h in pic.hosts
        ],
        "rogue_jobs": [vars(r) for r in pic.rogue],
        "not_ticking": [h.host for h in pic.not_ticking],
    }


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = max(0, round(seconds))
    if s < 120:
        return f"{s}s ago"
    if s < 7200:
        return f"{s // 60}m ago"
    return f"{s // 3600}h ago"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def picture_text(pic: Picture) -> str:
    """Tables for people; every label from the hosts is made printable first."""
    from .render import printable

    p = printable
    lines = [f"{len(pic.hosts)} hosts in {p(pic.prometheus)}"]
    if pic.hosts:
        rows = [["HOST", "LAST SCAN", "SCRAPE", "ROGUE", "VERSION"]]
        for h in pic.hosts:
            scrape = "up" if h.up else ("down" if h.up is False else "gone")
            rows.append([p(h.host), _age(h.last_tick_age_s), scrape, str(h.rogue_jobs),
                         p(h.version)])  # fmt: skip
        lines += _table(rows)
    lines.append("")
    if pic.rogue:
        lines.append("Rogue and excess jobs:")
        rows = [["HOST", "GPU", "GPU UUID", "VERDICT", "USER", "ORIGIN", "JOBS"]]
        for r in pic.rogue:
            origin = f"{r.origin_kind} {r.origin}".strip()
            rows.append([p(r.host), p(r.gpu) or "-", p(r.gpu_uuid) or "-", p(r.verdict),
                         p(r.user), p(origin), str(r.jobs)])  # fmt: skip
        lines += _table(rows)
    else:
        lines.append("No rogue or excess jobs.")
    stale = pic.not_ticking
    if stale:
        lines.append("")
        lines.append(f"Not ticking (no scan for {pic.stale_after_s:g} s):")
        lines += [f"  {p(h.host)} ({p(h.instance)}): last scan {_age(h.last_tick_age_s)}"
                  for h in stale]  # fmt: skip
    return "\n".join(lines)
