"""Benchmark: pages per hour on the busy shared GPU box of issue 35.

Runs the scenario of tests/system/busybox.py (two users, a notebook kernel, a vLLM-shaped
server, an Xorg-like graphics process, a CUDA probe every 5 s from a tmux loop, editors
and viewers on training files, the sanctioned cron pipeline with overlapping runs, a
nohup'd rogue and a cron ghost) for ``--duration-s`` seconds under two real daemons with
the shipped config/example.yaml plus only the box's paths, and prints what their webhook
received:

* pages (``open`` and ``remind`` alerts; a ``resolve`` asks nobody to act), per hour;
* true pages (the two rogues, the pipeline's excess runs) and false ones (everything
  else in the box), high (``high``/``critical``) and otherwise;
* repeats: pages for an incident already paged (a rogue's second run, a reminder...);
* counts per finding kind and per part of the box, and the webhook posts.

``paging`` is the daemon with the pipeline's rule; ``learning`` the one in its learning
period (``daemon.learn_until``), whose history ``allowlist suggest`` reads: its proposal
is printed too. Alerts about processes outside the box (other jobs on a shared host)
are counted apart as ``foreign``.

Needs root, cron, tmux, gcc, vim, less, watch (scripts/setup.sh --test). It creates two
throwaway users and removes them, and never touches the host's crontabs.

Usage: python bench/busy_box.py [--duration-s 180] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.system.busybox import Outcome, busy_box  # noqa: E402


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def report(out: Outcome, duration_s: float) -> dict[str, Any]:
    """The numbers, as printed by ``--json``."""
    proposed = [str(r.get("name")) for r in out.proposed()]
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        # The product measured: the last commit that changed the daemon or its config.
        "product_commit": _git("log", "-1", "--format=%h", "--", "watchdog", "config"),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": duration_s,
        "paging": out.stats("paging"),
        "learning": out.stats("learning"),
        "suggest": {"rc": out.suggest_rc, "rules_for_the_box": proposed},
        # Parts of the box stopped by someone else (a shared host): the numbers then lie.
        "disturbed": out.signals + [f"{r} not running at the end" for r in out.lost],
    }


def _text(doc: dict[str, Any]) -> str:
    lines = [
        f"busy box, {doc['duration_s']:.0f} s, commit {doc['commit']} "
        f"(product {doc['product_commit']})"
    ]
    for name in ("paging", "learning"):
        s = doc[name]
        p, h, r = s["pages"], s["pages_per_hour"], s["repeats"]
        lines += [
            f"{name} daemon: {s['webhook_posts']} webhook posts, {s['alerts']} alerts, "
            f"{p['all']} pages ({h['all']}/h) over {s['window_s']:.0f} s",
            f"  high {p['high']} ({h['high']}/h): true {p['true_high']} ({h['true_high']}/h),"
            f" false {p['false_high']} ({h['false_high']}/h)",
            f"  other {p['other']} ({h['other']}/h); true {p['true']}, false {p['false']}",
            f"  repeats {r['all']} (high {r['high']}); incidents paged: "
            + ", ".join(s["incidents_paged"]),
            "  per kind: "
            + "; ".join(
                f"{k} " + " ".join(f"{sev} {n}" for sev, n in c.items())
                for k, c in s["by_kind"].items()
            ),
            "  per part: "
            + "; ".join(
                f"{k}: " + ", ".join(f"{what} {n}" for what, n in c.items())
                for k, c in s["by_role"].items()
            ),
            f"  foreign alerts (not the box's, not counted): {s['foreign_alerts']}",
        ]
    sug = doc["suggest"]
    rules = ", ".join(sug["rules_for_the_box"]) or "nothing"
    lines.append(f"allowlist suggest (rc {sug['rc']}) for the box: {rules}")
    for what in doc["disturbed"]:
        lines.append(f"DISTURBED: {what}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=180.0, help="how long the box runs")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--verbose", action="store_true", help="also print every page")
    ap.add_argument("--dump", type=Path, help="write every alert, finding and log here (JSON)")
    args = ap.parse_args()
    with busy_box() as box:
        out = box.run(args.duration_s)
    if args.dump:
        out.dump(args.dump)
    doc = report(out, args.duration_s)
    if args.verbose:
        for name in ("paging", "learning"):
            for p in out.mine(name):
                print(f"{name} {p.event} {p.severity} {p.kind} [{p.role}] {p.message[:160]}")
        print(out.suggest)
    print(json.dumps(doc, indent=2) if args.json else _text(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
