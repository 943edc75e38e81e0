"""``rogue-watchdog allowlist suggest|diff``: learn the allowlist from the recorded runs
(watchdog.policy.learn) and replay the history under a candidate configuration.

Both read the state database read-only (``daemon.state_dir``, or ``--state-dir``), so
they run beside the daemon without writing anything.

Exit codes: 0 done, 1 (``diff``) some recorded run would change verdict, 2 usage error
or no readable history.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from .common import (
    CliError,
    command_daemon,
    config_parent,
    emit,
    history_state_dir,
    resolve_config_path,
)
from .help import command_help

if TYPE_CHECKING:
    from ..config import Paths
    from ..policy.learn import Suggestion
    from ..state import ActionRecord, RunRecord


def _since(text: str) -> float:
    from ..config.daemon import parse_duration_s

    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _min_runs(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of runs, 1 or more")
    return int(text)


def _state_dir(args: argparse.Namespace, config: str | None, *, candidate: bool = False) -> str:
    """The state directory to read history from, said on stderr: ``--state-dir``, else
    that of ``--config`` (it names the instance), else the running daemon's, else
    ``daemon.state_dir`` of the default file.

    With ``--config`` the history is that configuration's instance, never a daemon that
    answers on another socket (issue 33: ``allowlist diff --config candidate.yaml``
    replayed the default socket's daemon's history, another instance's). For ``allowlist
    diff`` (``candidate``) that is the candidate's ``daemon.state_dir``: ``suggest``
    writes the one it read into the file it proposes.

    Raises:
        CliError: No ``--config`` and several daemons run, or one answers unusably.
    """
    from ..config import load_config
    from ..config.daemon import DaemonSettings

    if args.state_dir:
        return history_state_dir(args.state_dir, None, "", "")
    if config is not None:
        loaded = load_config(config)
        source = loaded.source
        if candidate and loaded.daemon.state_dir == DaemonSettings().state_dir:
            source += ": the default; --state-dir names another"
        return history_state_dir(None, None, loaded.daemon.state_dir, source)
    try:
        daemon = command_daemon(acts=True, quiet=True)
    except CliError as exc:
        # Several daemons, or one that answers unusably: whose history is unknown, and a
        # guess (the default state directory) answered a false "no run would change".
        raise CliError(f"{exc}; or pass --state-dir to say whose history to read") from None
    if daemon is not None and daemon.state_dir is not None:
        return history_state_dir(None, daemon, "", "")
    path = daemon.config if daemon else resolve_config_path(None)
    loaded = load_config(path)
    return history_state_dir(None, None, loaded.daemon.state_dir, loaded.source)


def _runs(
    args: argparse.Namespace, state_dir: str
) -> tuple[list[RunRecord], list[ActionRecord], float]:
    """The runs seen in ``--since`` read from ``state_dir``, the actions taken or undone
    in it, and the window's start."""
    from ..state import read_history

    since = time.time() - args.since
    history = read_history(state_dir, since)
    if history is None:
        raise CliError(
            f"no job history in {state_dir}/state.db (no database, unreadable, or written "
            "before runs were recorded); run the daemon with daemon.learn_until first"
        )
    runs, _findings, actions = history
    return runs, actions, since


def _learning_started(state_dir: str) -> float | None:
    """When the learning period began (the daemon's ``meta`` ``learning_started``)."""
    from ..daemon.loop import LEARNING_STARTED
    from ..state import read_meta

    raw = read_meta(state_dir, LEARNING_STARTED)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _write_new(path: str, text: str) -> None:
    """Write ``text`` to a new file (never over an existing one or through a symlink).

    Raises:
        CliError: ``path`` exists or cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640)
    except OSError as exc:
        raise CliError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def wrote_suggestion(found: Suggestion, path: str) -> str:
    """What ``allowlist suggest --output FILE`` says on stderr once FILE is written.

    The command printed nothing after its ``reading ...`` line, so a user could not
    tell whether the file held a rule (first-day report).

    Args:
        found: What :func:`watchdog.policy.learn.suggest` found.
        path: The file written.

    Returns:
        ``rogue-watchdog: wrote 2 rules and 1 ignore entry to FILE; 3 jobs seen, not
        proposed (its comments say why)``, or ``wrote no rule to FILE: ...`` when it
        holds only comments and ``sanctioned: []``.
    """
    from ..render import printable

    kinds = [_plural(len(found.proposed), "rule", "rules")]
    if found.exemptions:
        kinds.append(_plural(len(found.exemptions), "ignore entry", "ignore entries"))
    anything = bool(found.proposed or found.exemptions)
    skipped = len(found.not_proposed) + sum(len(c) for c in found.conflicts)
    text = f"rogue-watchdog: wrote {' and '.join(kinds) if anything else 'no rule'} to {path}"
    if skipped:
        text += f"; {_plural(skipped, 'job', 'jobs')} seen, not proposed (its comments say why)"
    elif not anything:
        text += ": nothing to suggest (its comments say why)"
    return printable(text)


def _paths(config: str | None) -> Paths | None:
    """The host paths of ``--config`` (where its daemon read crontabs and units, and so
    where a recorded origin is read again), or None (the built-in ones) without one."""
    from ..config import load_config

    return load_config(config).paths if config is not None else None


def cmd_suggest(args: argparse.Namespace) -> int:
    """``allowlist suggest``: print (or write) the proposed allowlist."""
    from ..policy.learn import origin_now, render_yaml, source_gone_now, suggest

    state_dir = _state_dir(args, args.config)
    runs, actions, since = _runs(args, state_dir)
    paths = _paths(args.config)
    found = suggest(
        runs, since, min_runs=args.min_runs, prefer=args.prefer or (),
        gone_now=functools.partial(source_gone_now, paths=paths),
        now=functools.partial(origin_now, paths=paths),
        actions=actions, include_acted=args.include_acted,
        learning_started=_learning_started(state_dir),
    )  # fmt: skip
    text = render_yaml(found, state_dir)
    if args.output:
        _write_new(args.output, text)
        print(wrote_suggestion(found, args.output), file=sys.stderr)
        return 0
    emit(text.rstrip("\n"))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    """``allowlist diff --config CFG``: the recorded runs whose verdict would change."""
    from ..config import load_config
    from ..policy.learn import origin_now, render_changes, replay

    config = load_config(args.config)
    runs, actions, _ = _runs(args, _state_dir(args, args.config, candidate=True))
    changes = replay(runs, config, actions)
    # Origins as they stand now: a line disabled then put back by `undo` is live again.
    emit(render_changes(changes, now=functools.partial(origin_now, paths=config.paths)))
    return 1 if changes else 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``allowlist suggest`` and ``allowlist diff`` to the CLI."""
    p = sub.add_parser(
        "allowlist",
        **command_help(
            "learn the allowlist from what ran, and replay history under a config",
            "suggest: from the runs the daemon recorded (daemon.learn_until), propose one "
            "rule per recurring job (per script path), pinned to its origin; jobs started "
            "by hand, orphans, sources already removed and one script run from two origins "
            "(a person's shell included) are listed, not proposed; GPU use that is not "
            "training (notebooks, inference servers, display servers, probes) gets an ignore "
            "entry per user and class, with its evidence. diff: judge the recorded "
            "runs again under a configuration and list those whose verdict would change, "
            "marking each run it would sanction whose script also ran from another origin. "
            "docs/first-week.md.",
            [
                "rogue-watchdog allowlist suggest --since 7d --output /tmp/allowlist.yaml",
                "rogue-watchdog allowlist suggest --prefer /etc/cron.d/pipeline:2",
                "rogue-watchdog allowlist diff --config /tmp/candidate.yaml --since 7d",
            ],
            [
                (0, "done (diff: no run would change verdict)"),
                (1, "diff: some recorded run would change verdict"),
                (2, "usage error, or no readable history"),
            ],
        ),
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True, help="suggest or diff")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        help="state directory whose history is read (default: see the description; said on stderr)",
    )
    common.add_argument(
        "--since", type=_since, default=7 * 86400.0, metavar="DURATION",
        help="runs seen in this window: 7d, 12h, 30m or seconds (default 7d)",
    )  # fmt: skip
    s = verbs.add_parser(
        "suggest",
        parents=[config_parent(), common],
        **command_help(
            "print a proposed allowlist",
            "From the runs the daemon recorded (daemon.learn_until), propose one rule per "
            "recurring job (per script path), pinned to its origin; jobs started by hand, "
            "orphans, sources already removed, jobs rogue-watchdog acted against (said with "
            "the action ids; --include-acted) and one script run from two origins (a "
            "person's shell included) are listed as comments, not proposed. The history "
            "read is --state-dir, else that of --config's daemon.state_dir, else the "
            "running daemon's, else the default file's; the database read is said on "
            "stderr. docs/first-week.md.",
            [
                "rogue-watchdog allowlist suggest --since 7d --output /tmp/allowlist.yaml",
                "rogue-watchdog allowlist suggest --prefer /etc/cron.d/pipeline:2",
                "rogue-watchdog allowlist suggest --min-runs 3 --state-dir /srv/rw/state",
            ],
            [(0, "proposed (printed, or written to --output)"),
             (2, "usage error, --output exists, or no readable history")],
        ),
    )  # fmt: skip
    s.add_argument(
        "--min-runs", type=_min_runs, default=2, metavar="N",
        help="propose only jobs that ran at least N times (default 2)",
    )  # fmt: skip
    s.add_argument(
        "--prefer", action="append", metavar="ORIGIN",
        help="of one script run from several origins, propose this one (FILE:LINE, FILE or "
        "a unit), listing the others as suspects (scheduled ones as suspected ghosts); "
        "repeatable",
    )  # fmt: skip
    s.add_argument(
        "--include-acted", action="store_true",
        help="propose also jobs rogue-watchdog acted against (terminated, their source "
        "disabled...), even when undone since, the actions said above the rule; by "
        "default they are listed, not proposed",
    )  # fmt: skip
    s.add_argument("--output", metavar="FILE", help="write to FILE (must not exist)")
    s.set_defaults(func=cmd_suggest)
    d = verbs.add_parser(
        "diff",
        parents=[common],
        **command_help(
            "replay recorded runs under a configuration",
            "Judge every recorded run again under the candidate --config with the daemon's "
            "own judging code and list the runs whose verdict would change, marking each "
            "run it would sanction whose script also ran from another origin. The history "
            "replayed is --state-dir, else the candidate's daemon.state_dir (allowlist "
            "suggest writes the one it read into the file it proposes), never a daemon "
            "on another socket; the database read is said on stderr. docs/first-week.md.",
            [
                "rogue-watchdog allowlist diff --config /tmp/candidate.yaml --since 7d",
                "rogue-watchdog allowlist diff --config /tmp/cand.yaml --state-dir /srv/rw/state",
            ],
            [(0, "no recorded run would change verdict"),
             (1, "some recorded run would change verdict"),
             (2, "usage error, an invalid candidate, or no readable history")],
        ),
    )  # fmt: skip
    d.add_argument("--config", required=True, help="the candidate configuration")
    d.set_defaults(func=cmd_diff)


def cmd_report(args: argparse.Namespace) -> int:
    """``report``: the window as text, JSON or one HTML file."""
    import json

    from ..policy.learn import origin_now, runs_now
    from ..report import report_html, report_json, report_text
    from ..state import read_history

    state_dir = _state_dir(args, args.config)
    now = time.time()
    since = now - args.since
    history = read_history(state_dir, since)
    if history is None:
        raise CliError(f"no readable history in {state_dir}/state.db")
    runs, findings, actions = history
    # Origins as they stand now, read as `allowlist diff` reads them: a crontab line put
    # back by `undo` is no longer said to be "since disabled".
    runs = runs_now(runs, functools.partial(origin_now, paths=_paths(args.config)))
    doc = report_json(runs, findings, actions, since, now)
    if args.format == "json":
        text = json.dumps(doc, indent=2, sort_keys=True)
    elif args.format == "html":
        text = report_html(doc, runs, findings=findings, inventory=_gpu_inventory(state_dir))
    else:
        text = report_text(doc)
    if args.output:
        _write_new(args.output, text if text.endswith("\n") else text + "\n")
        # Said, as allowlist suggest does: nothing after the "reading" line looked like
        # nothing done.
        from ..render import printable

        print(printable(f"rogue-watchdog: wrote {args.output}"), file=sys.stderr)
        return 0
    emit(text.rstrip("\n"))
    return 0


def _gpu_inventory(state_dir: str) -> dict[str, Any]:
    """The GPUs the daemon saw, by UUID (``meta`` key ``gpus``); empty when unknown."""
    import json

    from ..report import GPU_INVENTORY_KEY
    from ..state import read_meta

    raw = read_meta(state_dir, GPU_INVENTORY_KEY)
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def register_report(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``report`` to the CLI."""
    p = sub.add_parser(
        "report",
        parents=[config_parent()],
        **command_help(
            "the week at a glance: usage per origin and user, incidents in order, what is open",
            "From the state database (read-only): runs and GPU-hours per origin and per "
            "user, the timeline of findings opened and resolved and of actions taken and "
            "undone, and the findings still open. Text fits 80 columns; html is one "
            "self-contained file (no external scripts, fonts or styles). docs/first-week.md.",
            [
                "rogue-watchdog report --since 7d",
                "rogue-watchdog report --since 7d --format html --output /tmp/week.html",
            ],
            [(0, "done"), (2, "usage error, or no readable history")],
        ),
    )
    p.add_argument(
        "--state-dir",
        help="state directory (default: --config's daemon.state_dir, else the running daemon's)",
    )
    p.add_argument(
        "--since", type=_since, default=7 * 86400.0, metavar="DURATION",
        help="the window: 7d, 12h, 30m or seconds (default 7d)",
    )  # fmt: skip
    p.add_argument("--format", choices=("text", "json", "html"), default="text",
                   help="output form (default text)")  # fmt: skip
    p.add_argument("--output", metavar="FILE", help="write to FILE (must not exist)")
    p.set_defaults(func=cmd_report)
