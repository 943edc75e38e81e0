"""Origin resolution shared across the jobs below one parent within a scan (issue 34,
item 3): each crontab entry's command is split once, and each entry's last fire time
before a start time is computed once per scan, however many jobs share the ancestor
that is matched; the answers are those of a resolution that shares nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import _FIRED, CronResolver, _entry_tokens
from rogue_watchdog.model import Proc
from rogue_watchdog.sources.procfs import ProcessTable
from tests.unit.test_cron_resolver import HOST, INIT, LEGACY_ARGV, ctx_for, proc


def context(tmp_path: Path) -> ResolveContext:
    # The host's table: start times need its btime; the lineages below are synthetic.
    return dataclasses.replace(ctx_for(HOST, tmp_path), table=ProcessTable())


def jobs_below(parent: Proc, n: int) -> list[list[Proc]]:
    return [[proc(500 + i, parent.pid, ("python3", f"w{i}.py")), parent, INIT] for i in range(n)]


def test_one_resolution_per_parent_same_answers(tmp_path: Path) -> None:
    for parent in (
        proc(400, 1, ("/usr/bin/python3", "/opt/other/run.py"), user="mlops"),  # no line
        proc(401, 1, LEGACY_ARGV, user="mlops"),  # a daemonised cron job
    ):
        shared = context(tmp_path)
        lineages = jobs_below(parent, 16)
        first = CronResolver().resolve(lineages[0], shared)
        fired = dict(shared.cache.get(_FIRED, {}))  # type: ignore[call-overload]
        misses = _entry_tokens.cache_info().misses
        rest = [CronResolver().resolve(lin, shared) for lin in lineages[1:]]
        # Nothing is computed again for the other 15 jobs of the same parent...
        assert shared.cache.get(_FIRED, {}) == fired
        assert _entry_tokens.cache_info().misses == misses
        # ...and each answer is what a context of its own gives.
        alone = [CronResolver().resolve(lin, context(tmp_path)) for lin in lineages]
        assert [first, *rest] == alone


def test_fire_times_are_per_scan(tmp_path: Path) -> None:
    parent = proc(400, 1, ("/usr/bin/python3", "/opt/other/run.py"), user="mlops")
    ctx = context(tmp_path)
    CronResolver().resolve(jobs_below(parent, 1)[0], ctx)
    assert ctx.cache.get(_FIRED)  # the scan's scratch space holds them
    assert not context(tmp_path).cache  # a new scan's context starts empty
