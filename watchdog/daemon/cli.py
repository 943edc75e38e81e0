"""``rogue-watchdog run`` (and, with the status socket, ``status``)."""

from __future__ import annotations

import argparse
import logging
import sys

import structlog

from watchdog.config import load_config
from watchdog.daemon.loop import Daemon
from watchdog.daemon.state import StateError


def configure_logging() -> None:
    """structlog JSON lines on stdout (journald under systemd): stable keys per event."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )


def cmd_run(args: argparse.Namespace) -> int:
    """``run``: the daemon in the foreground (what systemd wants)."""
    from watchdog.cli import resolve_config_path

    path = resolve_config_path(args.config)
    config = load_config(path)
    configure_logging()
    try:
        daemon = Daemon(config, path)
    except StateError as exc:
        print(f"rogue-watchdog: {exc}", file=sys.stderr)
        return 2
    daemon.install_signal_handlers()
    daemon.run_forever()
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``run`` to the CLI."""
    p = sub.add_parser("run", help="run the watchdog daemon in the foreground")
    p.add_argument("--config", help="configuration file (default /etc/rogue-watchdog/config.yaml)")
    p.set_defaults(func=cmd_run)
