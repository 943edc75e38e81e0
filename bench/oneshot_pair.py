"""The ``scan`` one-shot of two checkouts side by side (issue 34, item 2): each the
installed ``rogue-watchdog scan --config CFG`` as a whole process, taking turns with
``nvitop --once`` (same stand-in NVML) and ``ps -eo pid,ppid,user,args`` round by round,
on ``bench/run_all.py``'s population (2,000 sleeping processes, 8 of them listed on the
stand-in NVML's 8 GPUs). Prints median wall and CPU seconds, peak RSS, and the paired
ratios (each the median of per-round ratios), after/before among them; then whether both
checkouts answer the same: ``scan --json`` of each, back to back, NVML on and off
(:func:`compare_json`).

Why beside run_all's ``cli`` row: two runs of that row (``--code BASE`` then this
checkout) are minutes apart on a shared host, whose load moves the absolute figures more
than the change does; here both take turns in one run.

Usage (root, as run_all)::

    python bench/oneshot_pair.py --code BASE [--rounds 15] [--procs 2000]

BASE is another checkout (e.g. ``git archive COMMIT | tar -x -C .cache/base``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


# Ages in words ("4.5 s old", "up 3 min") move between two looks a moment apart.
_AGE = re.compile(r"\b\d+(\.\d+)? ?(ms|s|min|h|d)\b")


def _steady(value: object) -> object:
    if isinstance(value, str):
        return _AGE.sub("AGE", value)
    if isinstance(value, list):
        return [_steady(v) for v in value]
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in ("time", "duration_s")}
    return value


def compare_json(before: str, after: str, own: set[int]) -> str:
    """Whether two ``scan --json`` documents say the same, ages in words masked: whole,
    else job by job (keyed by root PID) for this bench's own processes (``own``) and for
    the other processes on the host that both looks saw (they come and go between
    looks on a shared host)."""
    a, b = _steady(json.loads(before)), _steady(json.loads(after))
    assert isinstance(a, dict) and isinstance(b, dict)
    if a == b:
        return f"identical ({len(a['jobs'])} jobs, {len(a['findings'])} findings)"
    ja = {j["root_pid"]: j for j in a["jobs"]}
    jb = {j["root_pid"]: j for j in b["jobs"]}
    mine = [p for p in set(ja) | set(jb) if p in own]
    both = [p for p in set(ja) & set(jb) if p not in own]
    bad_mine = [p for p in mine if ja.get(p) != jb.get(p)]
    bad_both = [p for p in both if ja[p] != jb[p]]
    fa = {(f["kind"], f.get("root_pid")) for f in a["findings"] if f.get("root_pid") in own}
    fb = {(f["kind"], f.get("root_pid")) for f in b["findings"] if f.get("root_pid") in own}
    rest = {k for k in a if k not in ("jobs", "findings") and a[k] != b.get(k)}
    return (
        f"documents differ; this bench's jobs: {len(mine) - len(bad_mine)} of {len(mine)} "
        f"identical{' (differ: ' + str(sorted(bad_mine)) + ')' if bad_mine else ''}, their "
        f"findings {'the same' if fa == fb else 'DIFFER'}; other jobs seen by both: "
        f"{len(both) - len(bad_both)} of {len(both)} identical; other keys differing: "
        f"{sorted(rest) or 'none'}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", required=True, help="the checkout to compare against (before)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--procs", type=int, default=2000, help="sleeping processes")
    args = ap.parse_args(argv)
    import run_all as ra  # bench/ is sys.path[0]
    from codepath import import_path

    exe = shutil.which("rogue-watchdog", path=str(Path(sys.executable).parent))
    nvitop = shutil.which("nvitop", path=str(Path(sys.executable).parent))
    if exe is None or nvitop is None:
        raise SystemExit("needs rogue-watchdog and nvitop installed next to this Python")
    envs = {}
    for name, code in (("before", Path(args.code)), ("after", REPO)):
        env = dict(os.environ, PYTHONPATH=import_path(code))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # start-up as installed
        envs[name] = env
    sandbox = Path(tempfile.mkdtemp(prefix="rw-oneshot-pair-"))
    try:
        with ra.sleepers(args.procs) as pids:
            nvml = ra.fake_nvml(sandbox, pids[:8])
            cfg = sandbox / "config.yaml"
            cfg.write_text(f"nvml: {{library: {nvml / 'libnvidia-ml.so.1'}}}\n")
            cases = {
                "before": ([exe, "scan", "--config", str(cfg)], envs["before"]),
                "after": ([exe, "scan", "--config", str(cfg)], envs["after"]),
                "nvitop": ([nvitop, "--once"], dict(envs["after"], LD_LIBRARY_PATH=str(nvml))),
                "ps": (ra.ps_argv(), envs["after"]),
            }
            got = ra.take_turns(cases, args.rounds)
            answers = {}
            off = sandbox / "nvml-off.yaml"
            off.write_text("nvml: {enabled: false}\n")
            for what, config in (("NVML on", cfg), ("NVML off", off)):
                outs = [
                    subprocess.run(
                        [exe, "scan", "--json", "--config", str(config)],
                        capture_output=True, text=True, env=envs[n], check=False,
                    ).stdout
                    for n in ("before", "after")
                ]  # fmt: skip
                answers[what] = compare_json(*outs, own=set(pids))
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)

    def ratio(a: str, b: str, attr: str) -> float:
        return ra.paired_ratio(
            [getattr(x, attr) for x in got[a]], [getattr(x, attr) for x in got[b]]
        )

    for name, runs in got.items():
        print(
            f"{name:7s} wall {ra.med(runs):.3f} s, CPU {ra.med(runs, 'cpu_s'):.3f} s, "
            f"RSS {ra.med(runs, 'rss_kib') / 1024:.0f} MiB (exit {ra.codes(runs)})"
        )
    for name in ("before", "after"):
        print(
            f"{name}: wall {ratio(name, 'nvitop', 'wall_s'):.2f}x nvitop, "
            f"CPU {ratio(name, 'nvitop', 'cpu_s'):.2f}x nvitop, "
            f"wall {ratio(name, 'ps', 'wall_s'):.2f}x ps"
        )
    print(
        f"after/before: wall {ratio('after', 'before', 'wall_s'):.3f}, "
        f"CPU {ratio('after', 'before', 'cpu_s'):.3f}; load average {os.getloadavg()}"
    )
    for what, verdict in answers.items():
        print(f"scan --json, {what} (before, after back to back): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
