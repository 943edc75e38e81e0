"""Benchmark: the idle tick's non-scan stages that issue 34's session h changed, before
and after, in one process (taking turns, so the host's load moves both alike).

Builds the daemon of ``bench/run_all.py``'s row (N sleepers, 8 of them on the stand-in
NVML, a log sink, 2 s interval; kernel events off: the stages below do not read them),
ticks it until its 8 findings are open, then times, in turns, each stage with the old
code and the new:

- ``tracker.update`` with the last scan's jobs and findings, with ``safe_text``'s old
  per-character check (a generator over ``_unsafe``) and its one regex search;
- ``Daemon._record_slurm_members`` with the slurmstepd filter over every record (the
  old code: the kept answer dropped first) and kept between ticks.

Usage: sudo python bench/idle_stages_ab.py [--procs 2000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))


def old_safe_text(hosttext: Any) -> Any:
    """``safe_text`` as it was before: the per-character check (the escaping, which
    did not change, is the new function's)."""
    new = hosttext.safe_text
    unsafe = hosttext._unsafe

    def safe_text(text: str) -> str:
        if text.isascii() and text.isprintable():
            return text
        if not any(unsafe(ch) for ch in text):
            return text
        return str(new(text))

    return safe_text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    from run_all import fake_nvml, sleepers

    with tempfile.TemporaryDirectory(prefix="rw-stages-ab-") as name, sleepers(args.procs) as pids:
        root = Path(name)
        nvml_dir = fake_nvml(root, pids[:8])
        from rogue_watchdog import hosttext
        from rogue_watchdog.config import parse_config
        from rogue_watchdog.daemon.loop import Daemon
        from rogue_watchdog.state import table as state_table

        cfg = parse_config(
            f"nvml: {{library: {nvml_dir / 'libnvidia-ml.so.1'}}}\n"
            f"daemon: {{interval_s: 2, events: off, state_dir: {root / 'state'}}}\n"
            f"alerts:\n  sinks: [{{type: log, path: {root / 'alerts.log'}}}]\n",
            "<bench>",
        )
        d = Daemon(cfg, None)
        now = time.time()
        for i in range(4):
            d.tick(now + 2 * i)
        now += 8
        last = d.last
        assert last is not None and last.result is not None
        result, findings = last.result, list(last.findings)
        print(f"{len(result.jobs)} jobs, {len(d.db.open_findings())} open findings, "
              f"{len(d.scanner.table.procs)} processes; load {os.getloadavg()[0]:.2f}")  # fmt: skip
        new_safe, old_safe = hosttext.safe_text, old_safe_text(hosttext)

        def track() -> None:
            d.tracker.update(
                result.jobs, findings, now, d.scanner.table.start_time_s, gpu_lists=True
            )

        def set_safe(fn: Any) -> None:
            hosttext.safe_text = fn
            state_table.safe_text = fn  # clean() calls the name it imported

        def slurm_whole() -> None:
            d._stepd_candidates = (None, -1, set())
            d._record_slurm_members(now)

        def slurm_kept() -> None:
            d._record_slurm_members(now)

        cases = {
            "tracker.update, old safe_text": (lambda: set_safe(old_safe), track),
            "tracker.update, new safe_text": (lambda: set_safe(new_safe), track),
            "_record_slurm_members, whole filter": (lambda: None, slurm_whole),
            "_record_slurm_members, kept filter": (lambda: None, slurm_kept),
        }
        spent: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for key, (setup, fn) in cases.items():
                setup()
                now += 2.0
                t0 = time.thread_time()
                fn()
                spent[key].append(time.thread_time() - t0)
        set_safe(new_safe)
        for key, xs in spent.items():
            print(f"  {key:40s} median {statistics.median(xs) * 1000:6.3f} ms  "
                  f"mean {statistics.fmean(xs) * 1000:6.3f} ms")  # fmt: skip
        print(f"load {os.getloadavg()[0]:.2f} at the end")
        d.db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
