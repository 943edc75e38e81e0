"""``status`` with the daemon up, two checkouts side by side (issue 34): each the installed
``rogue-watchdog status --socket SOCK`` (run_all's row) and ``status --config CFG``
(the daemon's own file, as an installed host runs it) as whole processes against one
real daemon
(``bench/run_all.py``'s: kernel events, the stand-in NVML, state, a log sink), taking
turns with ``ps -eo pid,ppid,user,args`` and ``rogue-watchdog --help`` round by round,
on run_all's population (2,000 sleeping processes, 8 of them on the stand-in NVML).
Prints median wall and CPU seconds, peak RSS, the paired ratios (each the median of
per-round ratios, after/before among them), and whether both checkouts printed the
same status (text and ``--json``, read back to back).

Why beside run_all's ``status`` row: two runs of that row (``--code BASE`` then this
checkout) are minutes apart on a shared host; here both take turns in one run.

Usage (root, as run_all)::

    python bench/status_pair.py --code BASE [--rounds 15] [--procs 2000]

BASE is another checkout (e.g. ``git archive COMMIT | tar -x -C .cache/base``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


# What moves between two reads of one daemon a moment apart: ages, times, tick and
# event counters, CPU and memory figures. Masked so that a difference left is a rendering
# one.
_MOVING = re.compile(r"\d+(\.\d+)?")


def _steady(text: str) -> list[str]:
    return [_MOVING.sub("N", line) for line in text.splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", required=True, help="the checkout to compare against (before)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--procs", type=int, default=2000, help="sleeping processes")
    ap.add_argument(
        "--example",
        action="store_true",
        help="once the daemon runs, rewrite its configuration file as config/example.yaml "
        "with the daemon's socket and state directory (what scripts/install.sh installs: "
        "the --config rows then read and validate that; the daemon keeps what it loaded)",
    )
    args = ap.parse_args(argv)
    import run_all as ra  # bench/ is sys.path[0]
    from codepath import import_path

    exe = shutil.which("rogue-watchdog", path=str(Path(sys.executable).parent))
    if exe is None:
        raise SystemExit("needs rogue-watchdog installed next to this Python")
    envs = {}
    for name, code in (("before", Path(args.code)), ("after", REPO)):
        env = dict(os.environ, PYTHONPATH=import_path(code))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # start-up as installed
        envs[name] = env
    sandbox = Path(tempfile.mkdtemp(prefix="rw-status-pair-"))
    daemon = None
    try:
        with ra.sleepers(args.procs) as pids:
            nvml = ra.fake_nvml(sandbox, pids[:8])
            ctx = types.SimpleNamespace(sandbox=sandbox, exe=exe, env=envs["after"], nvml_dir=nvml)
            daemon = ra.Daemon(ctx, 2.0)  # type: ignore[arg-type]
            sock = str(daemon.socket)
            if args.example:
                import yaml

                text = (REPO / "config" / "example.yaml").read_text()
                doc = yaml.safe_load(text)
                doc["daemon"].update(socket=sock, state_dir=str(daemon.root / "state"))
                daemon.config.write_text(yaml.safe_dump(doc))
            cases = {
                "before": ([exe, "status", "--socket", sock], envs["before"]),
                "after": ([exe, "status", "--socket", sock], envs["after"]),
                # As an installed host runs it: the daemon's configuration file named
                # (or the default one), read for the socket and compared with the
                # answering daemon's.
                "before --config": (
                    [exe, "status", "--config", str(daemon.config)],
                    envs["before"],
                ),
                "after --config": ([exe, "status", "--config", str(daemon.config)], envs["after"]),
                "ps": (ra.ps_argv(), envs["after"]),
                "help": ([exe, "--help"], envs["after"]),
            }
            got = ra.take_turns(cases, args.rounds)
            # Compared after the rounds: by then the daemon has settled (its first ticks
            # still find jobs).
            same: dict[str, str] = {}
            for extra in ([], ["--json"]):
                argv = [exe, "status", "--socket", sock, *extra]
                outs = [
                    subprocess.run(argv, capture_output=True, text=True, env=envs[n], check=False)
                    for n in ("before", "after")
                ]
                a, b = (_steady(o.stdout) for o in outs)
                diff = list(difflib.unified_diff(a, b, lineterm="", n=0))[2:]
                exits = [o.returncode for o in outs]
                verdict = "same output" if not diff and exits[0] == exits[1] else "OUTPUT DIFFERS"
                same[" ".join(argv[1:2] + extra)] = f"{verdict}, exit {exits}" + "".join(
                    f"\n  {x}" for x in diff[:40]
                )
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(sandbox, ignore_errors=True)

    def ratio(a: str, b: str, attr: str) -> float:
        return ra.paired_ratio(
            [getattr(x, attr) for x in got[a]], [getattr(x, attr) for x in got[b]]
        )

    for name, runs in got.items():
        print(
            f"{name:15s} wall {ra.med(runs):.3f} s, CPU {ra.med(runs, 'cpu_s'):.3f} s, "
            f"RSS {ra.med(runs, 'rss_kib') / 1024:.0f} MiB (exit {ra.codes(runs)})"
        )
    for name in ("before", "after", "before --config", "after --config"):
        print(f"{name}: wall {ratio(name, 'ps', 'wall_s'):.2f}x ps")
    for suffix in ("", " --config"):
        a, b = "after" + suffix, "before" + suffix
        print(f"{a}/{b}: wall {ratio(a, b, 'wall_s'):.3f}, CPU {ratio(a, b, 'cpu_s'):.3f}")
    print(f"load average {os.getloadavg()}")
    for what, verdict in same.items():
        print(f"{what} (before, after back to back, ages and counters masked): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
