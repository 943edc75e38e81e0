"""``rogue-watchdog fleet --prometheus URL``: the fleet's picture (watchdog.fleet) printed.

Exit codes: 0 nothing to report, 1 rogue jobs or hosts not ticking, 2 usage error,
4 Prometheus unreachable or answering with an error.
"""

from __future__ import annotations

import argparse
import json
import sys

from .common import emit
from .help import command_help

#: watchdog.fleet.DEFAULT_STALE_AFTER_S, spelled here: importing watchdog.fleet to build
#: the parser cost every `--help` and `status` its dataclasses (tests/unit/test_fleet_cli.py
#: keeps the two equal).
DEFAULT_STALE_AFTER_S = 300.0


def cmd_fleet(args: argparse.Namespace) -> int:
    """``fleet``: print the picture; exit 0/1, 4 when Prometheus cannot be asked."""
    if not args.prometheus.startswith(("http://", "https://")):
        print(f"rogue-watchdog: --prometheus must be an http(s) URL, got {args.prometheus!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    from ..fleet import FleetError, picture, picture_json, picture_text

    try:
        pic = picture(args.prometheus, stale_after_s=args.stale_after, timeout_s=args.timeout)
    except FleetError as exc:
        print(f"rogue-watchdog: {exc}", file=sys.stderr)
        return 4
    if args.json:
        emit(json.dumps(picture_json(pic), indent=2, sort_keys=True))
    else:
        emit(picture_text(pic))
    return pic.exit_code()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``fleet`` to the CLI."""
    p = sub.add_parser(
        "fleet",
        **command_help(
            "the fleet's picture from Prometheus (hosts, rogue jobs)",
            "Ask Prometheus (its HTTP API, which scrapes every host's /metrics) for the "
            "fleet's current picture: the hosts whose watchdog reports, the rogue and excess "
            "jobs per host with GPU, user and origin, and the hosts whose watchdog stopped "
            "ticking. No server of our own: docs/fleet.md.",
            [
                "rogue-watchdog fleet --prometheus http://prometheus:9090",
                "rogue-watchdog fleet --prometheus http://prometheus:9090 --json | jq .rogue",
            ],
            [
                (0, "nothing to report"),
                (1, "rogue jobs, or hosts whose watchdog is not ticking"),
                (2, "usage error"),
                (4, "Prometheus unreachable or answering with an error"),
            ],
        ),
    )
    p.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://prom:9090")
    p.add_argument("--json", action="store_true", help="print JSON (docs/fleet.md)")
    p.add_argument(
        "--stale-after", type=float, default=DEFAULT_STALE_AFTER_S, metavar="SECONDS",
        help=f"no scan for this long: not ticking (default {DEFAULT_STALE_AFTER_S:g})",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=10.0, help="per-request timeout, seconds")
    p.set_defaults(func=cmd_fleet)
