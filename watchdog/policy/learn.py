"""Learn the allowlist from what ran: ``allowlist suggest`` and ``allowlist diff``.

The state database records every run of every job with its origin (``job_runs``). From
that history :func:`suggest` proposes one rule per recurring job, pinned to its origin
with the strongest pin the origin offers, and :func:`replay` judges the recorded runs
again under a configuration with the daemon's own judging code
(:func:`watchdog.policy.allowlist.judge`).

Learning must not enshrine the ghost: the seed's ghost was a retired cron file running
the pipeline's own script, the same program from two origins. Such a program is never
proposed silently twice: none of its origins is proposed, and each is shown with its
evidence, unless the admin names the one to keep (``prefer``); the others are then
listed as suspected ghosts.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from watchdog.config import Config, ConfigError, parse_config
from watchdog.hosttext import safe_text
from watchdog.model import Job, Origin
from watchdog.policy.allowlist import judge
from watchdog.state import RunRecord

# Interpreters and launchers whose first non-option argument is the script that names
# the job (the rest of the line is the run's arguments).
_INTERPRETERS = re.compile(
    r"(python[0-9.]*|pypy[0-9.]*|bash|sh|dash|zsh|perl|ruby|julia|node|Rscript"
    r"|torchrun|deepspeed|accelerate|lightning|srun|mpirun|uv|conda)"
)
# An argument ending so is the script, wherever it stands before the run's arguments.
_SCRIPT_SUFFIXES = (".py", ".sh", ".pl", ".rb", ".jl", ".js", ".R")
_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
# python(1) options whose value is the next argument.
_PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_REGEX_META = re.compile(r"([\\.^$|?*+()\[\]{}])")


def program_and_script(cmdline: Sequence[str]) -> tuple[str, ...]:
    """The part of a command line that names the job: the program, the options before
    the script, and the script (or ``-m module``); never the run's arguments.

    A Python interpreter's script is its first argument that is not an option or an
    option's value (python(1): ``-W``, ``-X`` take one), whatever its name; for another
    program, the first argument with a script suffix, else (for an interpreter or
    launcher) its first non-option argument.

    Args:
        cmdline: The root process's argv.

    Returns:
        A prefix of ``cmdline``: ``("/usr/bin/python3", "/opt/p/train.py")`` for
        ``python3 /opt/p/train.py --lr 3e-4``; the program alone when no script is found.
    """
    if not cmdline:
        return ()
    if _PYTHON.fullmatch(os.path.basename(cmdline[0])):
        i = 1
        while i < len(cmdline):
            arg = cmdline[i]
            if arg in _PYTHON_VALUE_OPTIONS:
                i += 2
            elif arg == "-m":
                return tuple(cmdline[: i + 2])
            elif arg in ("-c", "-") or (arg.startswith("-m") and not arg.startswith("--")):
                return tuple(cmdline[: i + 1])  # code, stdin, or -mMODULE
            elif arg.startswith("-"):
                i += 1
            else:
                return tuple(cmdline[: i + 1])
        return (cmdline[0],)
    for i, arg in enumerate(cmdline[1:], start=1):
        if arg.endswith(_SCRIPT_SUFFIXES) and not arg.startswith("-"):
            return tuple(cmdline[: i + 1])
        if arg == "-m" and i + 1 < len(cmdline):
            return tuple(cmdline[: i + 2])
    base = os.path.basename(cmdline[0])
    if _INTERPRETERS.fullmatch(base):
        for i, arg in enumerate(cmdline[1:], start=1):
            if not arg.startswith("-"):
                return tuple(cmdline[: i + 1])
    return (cmdline[0],)


def head_regex(head: Sequence[str]) -> str:
    """An RE2 pattern matching a command line that starts with ``head`` (joined with
    spaces), followed by arguments or nothing."""
    return "^" + _REGEX_META.sub(r"\\\1", " ".join(head)) + "( |$)"


def glob_literal(text: str) -> str:
    """``text`` as an fnmatch glob matching exactly it: ``*``, ``?`` and ``[`` bracketed
    (a Slurm job name ``train*`` is the user's choice, not a pattern)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def strongest_pin(origin: Origin) -> dict[str, object] | None:
    """The origin keys of a rule that name this origin exactly
    (:meth:`~watchdog.model.Origin.pin`), each string a glob matching only itself."""
    pin = origin.pin()
    if pin is None:
        return None
    return {k: glob_literal(v) if isinstance(v, str) else v for k, v in pin.items()}


def not_sanctionable(origin: Origin) -> str | None:
    """Why a job of this origin is never proposed, or None when it may be."""
    why = origin.unproposable()
    if why is not None:
        return why
    if origin.alternatives():
        others = ", ".join(o.label() or o.describe() for o in origin.alternatives())
        return (
            f"two origins could explain it ({origin.label()} and {others}); no pin separates them"
        )
    if strongest_pin(origin) is None:
        return f"{origin.describe()} offers no pin"
    return None


def max_concurrent(runs: Sequence[RunRecord]) -> int:
    """The most runs seen at once: runs overlap when one started before another's last
    sighting. 0 for no runs."""
    ends: list[float] = []
    most = 0
    for run in sorted(runs, key=lambda r: r.started_at):
        while ends and ends[0] < run.started_at:
            heapq.heappop(ends)
        heapq.heappush(ends, run.last_seen)
        most = max(most, len(ends))
    return most


@dataclass
class Group:
    """The runs of one job: one origin (by its pin), one user, one program and script.

    Attributes:
        origin: The origin of its latest run.
        user: The runs' user.
        head: :func:`program_and_script` of the runs.
        runs: The runs, oldest first.
        why_not: Why it is not proposed, or None.
        rule: The rule name it would get.
        ghost_of: For a suspected ghost (a rule sanctions, or ``--prefer`` chose, another
            origin of the same script), the label of that origin.
    """

    origin: Origin
    user: str | None
    head: tuple[str, ...]
    runs: list[RunRecord] = field(default_factory=list)
    why_not: str | None = None
    rule: str = ""
    ghost_of: str | None = None

    @property
    def gpu_hours(self) -> float:
        """GPU-hours held over all runs."""
        return sum(r.gpu_s for r in self.runs) / 3600.0

    @property
    def gpus(self) -> list[str]:
        """Every GPU any run held, sorted."""
        return sorted({g for r in self.runs for g in (r.gpus or [])})


@dataclass
class Suggestion:
    """What :func:`suggest` found: the groups it proposes and those it does not."""

    proposed: list[Group]
    not_proposed: list[Group]
    conflicts: list[list[Group]]
    since: float


def _origin_key(origin: Origin) -> tuple[object, ...]:
    pin = strongest_pin(origin)
    return (origin.kind, tuple(sorted((pin or {}).items())), origin.label() or origin.describe())


def _rule_name(group: Group, taken: set[str]) -> str:
    base = group.origin.rule_stem()
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:48] or "job"
    out, n = name, 2
    while out in taken:
        out, n = f"{name}-{n}", n + 1
    taken.add(out)
    return out


def _matches(group: Group, prefer: str) -> bool:
    return prefer in group.origin.names()


def job_identity(head: Sequence[str]) -> str:
    """What two origins must share to run "the same job", erring towards "the same".

    The script's name without folder or suffix, or the last part of a ``-m`` module,
    whatever interpreter path, options or folder run it; when no script is named (a
    launcher whose options take values, a suffix-less script of another interpreter),
    the program's file name. Two unrelated jobs may share it: then neither is proposed
    silently and the admin names both with ``--prefer``, the safe way to be wrong here.

    Args:
        head: :func:`program_and_script` of a run.

    Returns:
        ``train`` for ``/usr/bin/python3 /opt/p/train.py``, ``python -u ./train.py``,
        ``python3 /srv/train`` and ``python3 -m pipeline.train``; ``torchrun`` for
        ``torchrun --nproc_per_node 8 run_x``.
    """
    if not head:
        return ""
    program, last = os.path.basename(head[0]), head[-1]
    module = None
    if len(head) >= 2 and head[-2] == "-m":
        module = last
    elif len(head) >= 2 and last.startswith("-m") and not last.startswith("--"):
        module = last[2:]
    if module:
        return module.rsplit(".", 1)[-1]
    named = last.endswith(_SCRIPT_SUFFIXES) or (
        _PYTHON.fullmatch(program) is not None and not last.startswith("-")
    )
    if len(head) >= 2 and named:
        program = os.path.basename(os.path.normpath(last))
    # A script run by its shebang is its own program: /opt/p/train.py is "train" too.
    return program.rsplit(".", 1)[0] if program.endswith(_SCRIPT_SUFFIXES) else program


def _ghosts(groups: Iterable[Group], prefer: Sequence[str]) -> list[list[Group]]:
    """Mark every scheduler origin that runs a job another origin runs too.

    Learning must not enshrine a ghost, so the comparison takes every group but those
    started by hand in a shell or tmux: also one a rule sanctions already, one that ran
    too rarely to be proposed (a weekly ghost runs once in a week's window), and one
    whose origin offers no pin or cannot be told (supervisord, ``at``, an orphan, an
    unconfirmed Slurm claim: any of them may be the ghost). For each job identity
    (:func:`job_identity`) run from two or more origins: the origins rules sanction win
    and the others are suspected ghosts of them; else the ones ``prefer`` names win; else
    none is proposed and the group goes into the returned conflicts.

    Args:
        groups: Every group, ``why_not`` already set by the per-group checks.
        prefer: Origins the admin chose (``--prefer``).

    Returns:
        The groups of each job run from several origins with no winner.
    """
    by_job: dict[str, list[Group]] = {}
    for g in groups:
        if not g.origin.by_hand:
            by_job.setdefault(job_identity(g.head), []).append(g)
    conflicts: list[list[Group]] = []
    for same in by_job.values():
        if len({_origin_key(g.origin) for g in same}) < 2:
            continue
        sanctioned = [g for g in same if g.why_not and g.why_not.startswith("already sanctioned")]
        chosen = sanctioned or [g for g in same if any(_matches(g, p) for p in prefer)]
        winners = {_origin_key(g.origin) for g in chosen}
        if winners:
            for g in same:
                if _origin_key(g.origin) not in winners:
                    g.ghost_of = chosen[0].origin.label()
                    how = "sanctioned" if sanctioned else "preferred"
                    g.why_not = (
                        f"suspected ghost: runs the same script as the {how} "
                        f"{chosen[0].origin.describe()}"
                    )
            continue
        for g in same:
            g.why_not = "the same script runs from another origin: choose one with --prefer"
        conflicts.append(same)
    return conflicts


def suggest(
    runs: Sequence[RunRecord],
    since: float,
    *,
    min_runs: int = 2,
    prefer: Sequence[str] = (),
) -> Suggestion:
    """Group the recorded runs into jobs and decide which to propose.

    A group is proposed when its origin may be sanctioned (:func:`not_sanctionable`),
    it ran at least ``min_runs`` times, no rule sanctioned it already, no origin but a
    person's shell runs the same job too (:func:`_ghosts`: all of them go into
    ``conflicts``, unless a rule sanctions one or ``prefer`` names some: then the others
    are suspected ghosts), and its rule loads (:func:`_unloadable`).

    Args:
        runs: Recorded runs (:func:`watchdog.state.read_runs`).
        since: Start of the window the runs were read from (POSIX time).
        min_runs: Fewest runs a proposed job has.
        prefer: Origins (``FILE``, ``FILE:LINE``, a unit) the admin chose.
    """
    groups: dict[tuple[object, ...], Group] = {}
    for run in runs:
        if run.verdict == "ignored":
            continue
        origin = Origin.from_json(run.origin)
        head = program_and_script(run.cmdline)
        key = (_origin_key(origin), run.user, head)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(origin, run.user, head)
        g.origin = origin
        g.runs.append(run)
        # Any run its origin could not pin (two identical lines could have started it)
        # keeps the whole group from being proposed, not only when it is the latest.
        g.why_not = g.why_not or not_sanctionable(origin)
    for g in groups.values():
        g.why_not = g.why_not or not_sanctionable(g.origin)
        if g.why_not is None and all(r.verdict == "sanctioned" for r in g.runs):
            rules = sorted({r.rule or "?" for r in g.runs})
            g.why_not = f"already sanctioned by rule {', '.join(rules)}"
        if g.why_not is None and len(g.runs) < min_runs:
            g.why_not = f"ran {len(g.runs)} time(s), fewer than --min-runs {min_runs}"
    conflicts = _ghosts(groups.values(), prefer)
    taken: set[str] = set()
    ordered = sorted(groups.values(), key=lambda g: (g.runs[0].started_at, g.head))
    for g in ordered:
        if g.why_not is None:
            g.rule = _rule_name(g, taken)
            g.why_not = _unloadable(g)
    proposed = [g for g in ordered if g.why_not is None]
    in_conflict = {id(g) for c in conflicts for g in c}
    not_proposed = [g for g in ordered if g.why_not is not None and id(g) not in in_conflict]
    return Suggestion(proposed, not_proposed, conflicts, since)


def _unloadable(g: Group) -> str | None:
    """Why the rule proposed for ``g`` would not load (host text no YAML or regex can
    carry, such as undecodable bytes), or None when ``check-config`` accepts it."""
    try:
        text = yaml.safe_dump({"sanctioned": [rule_of(g)]}, allow_unicode=False, width=1 << 16)
        parse_config(text, "suggested rule")
    except (ConfigError, yaml.YAMLError, UnicodeError) as exc:
        return f"its rule would not load ({safe_text(str(exc))[:200]})"
    return None


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _comment(text: str) -> str:
    """One YAML comment line; host text escaped (no newline can end the comment)."""
    return "# " + safe_text(text)


def _evidence(g: Group) -> str:
    text = (
        f"runs: {len(g.runs)}, first seen {_when(g.runs[0].started_at)}, last seen "
        f"{_when(g.runs[-1].last_seen)}, GPU-hours {g.gpu_hours:.2f}"
    )
    gpus = g.gpus
    return text + (f", GPUs: {', '.join(gpus)}" if gpus else ", GPUs: none")


def _origin_evidence(g: Group) -> list[str]:
    o = g.origin
    lines = [f"  {o.describe()}, user {g.user}: {_evidence(g)}"]
    path, detail = o.source_file(), o.source_detail()
    if path is not None:
        try:
            edited = _when(os.stat(path).st_mtime)
        except OSError:
            edited = "file gone"
        lines.append(f"    {detail or f'file {path}'}, last edit {edited}")
    return lines


def rule_of(g: Group) -> dict[str, Any]:
    """The allowlist rule proposed for a group (a ``sanctioned:`` entry)."""
    rule: dict[str, Any] = {"name": g.rule, "cmdline_regex": head_regex(g.head)}
    if g.user is not None:
        rule["user"] = g.user
    rule["origin"] = strongest_pin(g.origin)
    rule["max_instances"] = max(1, max_concurrent(g.runs))
    return rule


def render_yaml(s: Suggestion) -> str:
    """The suggestion as a YAML allowlist ``check-config`` accepts, with the evidence
    and what was not proposed as comments."""
    out = [
        _comment(f"rogue-watchdog allowlist suggest: runs seen since {_when(s.since)}"),
        _comment("Review every rule before enforcing it (docs/first-week.md)."),
    ]
    if not (s.proposed or s.conflicts or s.not_proposed):
        out.append(
            _comment(
                "no training job was recorded in this window (the daemon records the "
                "runs it sees; widen --since, or run the daemon longer)"
            )
        )
    if s.proposed:
        out.append("sanctioned:")
    else:
        out.append("sanctioned: []")
    for g in s.proposed:
        out.append(_comment(f"{g.origin.describe()}: {_evidence(g)}"))
        text = yaml.safe_dump([rule_of(g)], sort_keys=False, allow_unicode=False, width=1 << 16)
        out.extend("  " + line for line in text.rstrip("\n").splitlines())
    for same in s.conflicts:
        out.append(
            _comment(f"not proposed: {' '.join(same[0].head)} runs from {len(same)} origins:")
        )
        for g in same:
            out.extend(_comment(line) for line in _origin_evidence(g))
        out.append(_comment("  choose the legitimate one: --prefer FILE:LINE (or the unit)"))
    for g in s.not_proposed:
        out.append(
            _comment(
                f"seen, not proposed: {' '.join(g.head)} (user {g.user}, "
                f"{g.origin.describe()}): {g.why_not}; {_evidence(g)}"
            )
        )
    return "\n".join(out) + "\n"


def candidate_count(runs: Sequence[RunRecord], since: float) -> int:
    """How many rules :func:`suggest` would propose now (default options)."""
    return len(suggest(runs, since).proposed)


@dataclass(frozen=True)
class Change:
    """A recorded run whose verdict a configuration would change."""

    run: RunRecord
    was: str
    would: str
    reason: str


def _job(run: RunRecord) -> Job:
    return Job(
        root_pid=run.root_pid, pids=[run.root_pid], user=run.user, cmdline=tuple(run.cmdline),
        start_ticks=run.start_ticks, gpu_memory_bytes=None, gpu_uuids=list(run.gpus or []),
        lineage=[], origin=Origin.from_json(run.origin),
    )  # fmt: skip


def replay(runs: Sequence[RunRecord], config: Config) -> list[Change]:
    """Judge each recorded run again under ``config`` (with the daemon's
    :func:`~watchdog.policy.allowlist.judge`, beside the runs that were running when it
    started, oldest first, so ``max_instances`` counts as it would have), and list the
    runs whose verdict would differ from the recorded one.

    The ignore list is not replayed (a run does not record its process's exe); ignored
    runs are left out.
    """
    ordered = sorted((r for r in runs if r.verdict != "ignored"), key=lambda r: r.started_at)
    out = []
    for i, run in enumerate(ordered):
        running = [r for r in ordered[:i] if r.last_seen >= run.started_at]
        mine = judge([_job(r) for r in [*running, run]], config)[-1]
        if mine.verdict != run.verdict:
            out.append(Change(run, run.verdict, mine.verdict, mine.reason))
    return out


def render_changes(changes: Sequence[Change]) -> str:
    """One line per changed run (host text escaped)."""
    if not changes:
        return "no recorded run would change verdict"
    lines = []
    for c in changes:
        o = Origin.from_json(c.run.origin)
        lines.append(
            safe_text(
                f"{_when(c.run.started_at)} PID {c.run.root_pid} {c.was} -> {c.would}: "
                f"{' '.join(c.run.cmdline)} (user {c.run.user}, {o.describe()}): {c.reason}"
            )
        )
    lines.append(f"{len(changes)} run(s) would change verdict")
    return "\n".join(lines)
