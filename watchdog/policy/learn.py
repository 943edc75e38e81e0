"""Learn the allowlist from what ran: ``allowlist suggest`` and ``allowlist diff``.

The state database records every run of every job with its origin (``job_runs``). From
that history :func:`suggest` proposes one rule per recurring job, pinned to its origin
with the strongest pin the origin offers, and :func:`replay` judges the recorded runs
again under a configuration with the daemon's own judging code
(:func:`watchdog.policy.allowlist.judge`).

Learning must not enshrine the ghost: the seed's ghost was a retired cron file running
the pipeline's own script, the same program from two origins. A job is its script's
path, resolved as far as the record allows (:func:`script_of`); two runs are rivals when
they run the same script from two origins, a person's shell or tmux included. An origin
with a rival is never proposed silently: none is proposed, and each is shown with its
evidence, unless the admin names the one to keep (``prefer``); the proposal then lists
its rivals as suspects and the other scheduler origins as suspected ghosts. A script of
the same name in another folder is another job, only warned about. An origin whose
source is gone (its crontab line removed or commented out, its unit file deleted) is
never proposed.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from ..config import Config, ConfigError, Paths, parse_config
from ..hosttext import code_span, plain_or_code, safe_text
from ..model import (
    NON_TRAINING_CLASSES,
    WORKLOAD_CLASSES,
    Job,
    Origin,
    Proc,
    UnreadableRecord,
    origin_from_json,
)
from ..state import ActionRecord, RunRecord
from .allowlist import judge

if TYPE_CHECKING:
    from ..lineage.base import ResolveContext

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


def _module(head: Sequence[str]) -> str | None:
    """The module a ``-m`` head runs (``-m pkg.mod`` or ``-mpkg.mod``), or None."""
    if len(head) >= 2 and head[-2] == "-m":
        return head[-1]
    last = head[-1] if head else ""
    if len(head) >= 2 and last.startswith("-m") and not last.startswith("--"):
        return last[2:]
    return None


def _names_script(head: Sequence[str]) -> bool:
    """True when the head's last word is the script (not a launcher option's value)."""
    last = head[-1]
    return len(head) >= 2 and (
        last.endswith(_SCRIPT_SUFFIXES)
        or (_PYTHON.fullmatch(os.path.basename(head[0])) is not None and not last.startswith("-"))
    )


def job_identity(head: Sequence[str]) -> str:
    """The bare name of a run's script: what warns of "the same script elsewhere", and
    what two runs share when one of their scripts cannot be resolved (:func:`script_of`).

    The script's name without folder or suffix, or the last part of a ``-m`` module,
    whatever interpreter path, options or folder run it; when no script is named (a
    launcher whose options take values, a suffix-less script of another interpreter),
    the program's file name.

    Args:
        head: :func:`program_and_script` of a run.

    Returns:
        ``train`` for ``/usr/bin/python3 /opt/p/train.py``, ``python -u ./train.py``,
        ``python3 /srv/train`` and ``python3 -m pipeline.train``; ``torchrun`` for
        ``torchrun --nproc_per_node 8 run_x``.
    """
    if not head:
        return ""
    module = _module(head)
    if module:
        return module.rsplit(".", 1)[-1]
    program = os.path.basename(head[0])
    if _names_script(head):
        program = os.path.basename(os.path.normpath(head[-1]))
    # A script run by its shebang is its own program: /opt/p/train.py is "train" too.
    return program.rsplit(".", 1)[0] if program.endswith(_SCRIPT_SUFFIXES) else program


@dataclass(frozen=True)
class Script:
    """The script a run names, resolved as far as its record allows.

    Attributes:
        name: Its bare name (:func:`job_identity`).
        path: Its absolute, normalised path; None when the record cannot tell it.
        unresolved: Why ``path`` is None, in words; None when it is known.
    """

    name: str
    path: str | None
    unresolved: str | None = None

    def same_job(self, other: Script) -> bool:
        """True when both may be one script: equal paths, or equal names when either
        path is unknown (the safe way to be wrong: a rival too many, never one missed)."""
        if self.path is not None and other.path is not None:
            return self.path == other.path
        return self.name == other.name


# ``cd DIR &&`` or ``cd DIR;`` in a crontab line: the folder its command runs in.
_CRON_CD = re.compile(r"(?:^|[\s;&|(])cd\s+(/[^\s;&|<>()$`'\"\\]*)\s*(?:&&|;)")


def _normpath(path: str) -> str:
    # POSIX keeps a leading "//" (implementation-defined); Linux reads it as "/".
    norm = os.path.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def _cron_cwd(origin: Origin, relative: str) -> str | None:
    """The folder a crontab line ``cd``s into before running ``relative``, or None.

    Only one absolute ``cd`` target, with ``relative`` written after it: a line that
    runs a wrapper which changes folder itself is not resolved."""
    entry = origin.fields.get("entry") if origin.kind == "cron" else None
    if not isinstance(entry, str):
        return None
    found = list(_CRON_CD.finditer(entry))
    if len({m.group(1) for m in found}) != 1:
        return None
    rest = entry[found[-1].end() :]
    if re.search(r"(^|\s)" + re.escape(relative) + r"(\s|$)", rest) is None:
        return None
    return found[0].group(1)


def script_of(head: Sequence[str], origin: Origin) -> Script:
    """The script a run names, resolved with what its record holds.

    A run records its command line and origin, not its working directory: an absolute
    script path is normalised (``//opt/./p/x.py`` is ``/opt/p/x.py``; symbolic links are
    not followed: the file may have changed since); a relative one is resolved only
    against a crontab line's own ``cd /DIR &&``. A module (``-m``), a program found on
    the PATH, or a launcher whose options hide the script stay unresolved, and say why.

    Args:
        head: :func:`program_and_script` of the run.
        origin: The run's recorded origin.

    Returns:
        ``Script("train", "/opt/p/train.py")`` for ``python3 /opt/p/train.py``;
        ``Script("train", None, "relative path train.py: ...")`` for ``python3 train.py``
        started in a shell.
    """
    name = job_identity(head)
    if not head:
        return Script(name, None, "no command line was recorded")
    module = _module(head)
    if module:
        return Script(name, None, f"module {module}: its file depends on the interpreter's path")
    if _names_script(head):
        target = head[-1]
    elif len(head) == 1:
        target = head[0]
    else:
        return Script(name, None, f"{os.path.basename(head[0])} names no script before its options")
    if target.startswith("/"):
        return Script(name, _normpath(target))
    cwd = _cron_cwd(origin, target)
    if cwd is not None:
        return Script(name, _normpath(os.path.join(cwd, target)))
    if "/" not in target and target == head[0]:
        return Script(name, None, f"{target} was found on the PATH, which is not recorded")
    return Script(name, None, f"relative path {target}: the working directory is not recorded")


def one_per_run(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """One record per run (root PID and start ticks), oldest start first.

    A run has a row per job signature it was recorded under (its origin or command line
    read differently after a daemon restart): the latest row's origin, verdict and rule,
    the earliest start, the latest sighting, the GPU-seconds of all rows, every GPU.
    """
    rows: dict[tuple[int, int], list[RunRecord]] = {}
    for r in runs:
        rows.setdefault((r.root_pid, r.start_ticks), []).append(r)
    out = []
    for same in rows.values():
        latest = max(same, key=lambda r: (r.last_seen, r.started_at))
        sizes = [r.max_gpu_bytes for r in same if r.max_gpu_bytes is not None]
        out.append(
            replace(
                latest,
                started_at=min(r.started_at for r in same),
                last_seen=max(r.last_seen for r in same),
                gpu_s=sum(r.gpu_s for r in same),
                gpus=sorted({g for r in same for g in (r.gpus or [])}),
                max_gpu_bytes=max(sizes) if sizes else None,
            )
        )
    return sorted(out, key=lambda r: (r.started_at, r.root_pid))


@dataclass
class Group:
    """The runs of one job: one origin (by its pin), one user, one program and script.

    Attributes:
        origin: The origin of its latest run.
        user: The runs' user.
        head: :func:`program_and_script` of the runs.
        script: :func:`script_of` the head and origin.
        runs: The runs, oldest first.
        why_not: Why it is not proposed, or None.
        rule: The rule name it would get.
        ghost_of: For a suspected ghost (a rule sanctions, or ``--prefer`` chose, another
            origin of the same script), the label of that origin.
        rivals: The groups running the same script from another origin (by hand too).
        namesakes: The groups running a script of the same name at another path.
        acted: What rogue-watchdog did against its runs or its source, and what a person
            undid of it (:func:`acted_notes`): ``terminated it (action 2)``.
        before_learning: How many of its runs started before the learning period
            began (not counted towards ``--min-runs``).
    """

    origin: Origin
    user: str | None
    head: tuple[str, ...]
    script: Script
    runs: list[RunRecord] = field(default_factory=list)
    why_not: str | None = None
    rule: str = ""
    ghost_of: str | None = None
    rivals: list[Group] = field(default_factory=list)
    namesakes: list[Group] = field(default_factory=list)
    acted: list[str] = field(default_factory=list)
    before_learning: int = 0

    @property
    def gpu_hours(self) -> float:
        """GPU-hours held over all runs."""
        return sum(r.gpu_s for r in self.runs) / 3600.0

    @property
    def gpus(self) -> list[str]:
        """Every GPU any run held, sorted."""
        return sorted({g for r in self.runs for g in (r.gpus or [])})

    @property
    def sanctioned(self) -> bool:
        """True when a rule sanctioned every run."""
        return all(r.verdict == "sanctioned" for r in self.runs)


@dataclass
class Exemption:
    """An ``ignore`` entry proposed for GPU use that is not training: one user's runs of
    one class (``serving``, ``interactive``, ``system``, ``probe``).

    Attributes:
        user: The runs' user.
        workload: Their class.
        runs: The runs, oldest first.
    """

    user: str | None
    workload: str
    runs: list[RunRecord] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The entry's name: ``alice-interactive``."""
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.user or "any").strip("-") or "user"
        return f"{stem[:40]}-{self.workload}"

    def entry(self) -> dict[str, Any]:
        """The proposed ``ignore:`` entry."""
        out: dict[str, Any] = {"name": self.name}
        if self.user is not None:
            out["user"] = self.user
        out["class"] = self.workload
        return out


@dataclass
class Suggestion:
    """What :func:`suggest` found: the groups it proposes and those it does not, and
    the exemptions it proposes for GPU use that is not training."""

    proposed: list[Group]
    not_proposed: list[Group]
    conflicts: list[list[Group]]
    since: float
    exemptions: list[Exemption] = field(default_factory=list)
    learning_started: float | None = None


def _origin_key(origin: Origin) -> tuple[object, ...]:
    """What a group of runs shares of their origin: its pin and name, never a per-run id
    (:meth:`Origin.stable_name`: the runs of one loop whose wrapper was adopted each named
    their wrapper's PID, and were a group each)."""
    pin = strongest_pin(origin)
    return (origin.kind, tuple(sorted((pin or {}).items())), origin.label() or origin.stable_name())


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


def group_runs(runs: Sequence[RunRecord]) -> list[Group]:
    """The runs (not ignored, one record each: :func:`one_per_run`) grouped into jobs by
    origin pin, user and :func:`program_and_script`, oldest first, each with its rivals
    and namesakes (:func:`_link`).
    """
    kept = [r for r in runs if r.verdict != "ignored"]
    read_as: dict[tuple[int, int], dict[tuple[object, ...], str]] = {}
    for r in kept:
        o = origin_from_json(r.origin)
        read_as.setdefault((r.root_pid, r.start_ticks), {})[_origin_key(o)] = o.describe()
    groups: dict[tuple[object, ...], Group] = {}
    for run in one_per_run(kept):
        origin = origin_from_json(run.origin)
        seen_as = read_as[(run.root_pid, run.start_ticks)]
        head = program_and_script(run.cmdline)
        key = (_origin_key(origin), run.user, head)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(origin, run.user, head, script_of(head, origin))
        g.origin = origin
        g.runs.append(run)
        # Any run its origin could not pin (two identical lines could have started it)
        # keeps the whole group from being proposed, not only when it is the latest.
        g.why_not = g.why_not or not_sanctionable(origin)
        if len(seen_as) > 1 and g.why_not is None:
            # Which source started it is unsure: never pinned to the last reading.
            g.why_not = f"one run's origin was recorded as {' and as '.join(seen_as.values())}"
    ordered = sorted(groups.values(), key=lambda g: (g.runs[0].started_at, g.head))
    _link(ordered)
    return ordered


def _link(groups: Sequence[Group]) -> None:
    """Fill each group's rivals (the same script from another origin, whoever started
    it) and namesakes (a script of the same name at another known path)."""
    keys = [_origin_key(g.origin) for g in groups]
    for i, g in enumerate(groups):
        for j, h in enumerate(groups):
            if i == j:
                continue
            if keys[i] != keys[j] and g.script.same_job(h.script):
                g.rivals.append(h)
            elif (
                g.script.path is not None
                and h.script.path is not None
                and g.script.path != h.script.path
                and g.script.name == h.script.name
            ):
                g.namesakes.append(h)


def _judge_rivals(groups: Sequence[Group], prefer: Sequence[str]) -> list[list[Group]]:
    """Decide every group that runs its script from a second origin.

    Learning must not enshrine a ghost, so every rival counts: one a person started in a
    shell or tmux, one a rule sanctions already, one that ran too rarely to be proposed
    (a weekly ghost runs once in a week's window), one whose origin offers no pin or
    cannot be told (supervisord, ``at``, an orphan), one whose source is gone. A group
    with a rival that a rule sanctions is its suspected ghost; else one ``prefer`` names
    stays proposable (its rivals are listed as suspects); else one with a preferred
    rival is that rival's suspected ghost; else none is proposed and the group and its
    rivals go into the returned conflicts. A person's run is never a suspected ghost.

    Args:
        groups: Every group, ``why_not`` already set by the per-group checks.
        prefer: Origins the admin chose (``--prefer``).

    Returns:
        The conflicts: the groups of each script run from several origins, no winner.
    """
    conflicted: list[Group] = []
    for g in groups:
        if g.origin.by_hand or not g.rivals or g.sanctioned:
            continue
        scheduled = [h for h in g.rivals if not h.origin.by_hand]
        winners = [h for h in scheduled if h.sanctioned]
        how = "sanctioned"
        if not winners and any(_matches(g, p) for p in prefer):
            continue
        if not winners:
            winners = [h for h in scheduled if any(_matches(h, p) for p in prefer)]
            how = "preferred"
        if winners:
            g.ghost_of = winners[0].origin.label()
            g.why_not = (
                f"suspected ghost: runs the same script as the {how} {winners[0].origin.describe()}"
            )
        elif g.why_not is None:
            g.why_not = "the same script also ran from another origin: choose one with --prefer"
            conflicted.append(g)
    return _components(conflicted)


def _components(conflicted: Sequence[Group]) -> list[list[Group]]:
    """Each conflicted group with its rivals, groups sharing a member merged, members
    oldest first."""
    out: list[list[Group]] = []
    for g in conflicted:
        members = {id(x): x for x in (g, *g.rivals)}
        keep = []
        for c in out:
            if any(id(x) in members for x in c):
                members.update((id(x), x) for x in c)
            else:
                keep.append(c)
        merged = sorted(members.values(), key=lambda x: (x.runs[0].started_at, x.head))
        out = [*keep, merged]
    return sorted(out, key=lambda c: (c[0].runs[0].started_at, c[0].head))


#: Why an origin's source is gone now, or None (:func:`source_gone_now`).
GoneNow = Callable[[Origin], str | None]


def source_gone_now(origin: Origin, paths: Paths | None = None) -> str | None:
    """Why an origin's source no longer exists on this host now, or None while it does or
    nothing can be said (``allowlist suggest`` never proposes a gone source).

    A crontab line is read again (:func:`watchdog.lineage.cron.entry_state`: removed,
    commented out, or in a file cron no longer loads); a unit whose recorded unit file
    is gone is gone. Other kinds answer only from their record (:meth:`Origin.source_gone`).

    Args:
        origin: A recorded origin.
        paths: The configuration's host paths (``paths.cron_d``...), as the daemon that
            recorded it read them; None for the built-in ones.

    Returns:
        ``its crontab entry is removed now`` (``disabled``, ``ignored``), ``its unit file
        /etc/systemd/system/x.service is gone``, or None.
    """
    # Only the command reads the host: the daemon's candidate count never gets here.
    from ..lineage import default_resolvers
    from ..lineage.base import gone_now

    return gone_now(origin, _context_now(paths), default_resolvers())


def origin_now(origin: Origin, paths: Paths | None = None) -> Origin:
    """A recorded origin as its source reads now, where its kind's resolver can read it
    again (:func:`watchdog.lineage.base.recheck`): a crontab line recorded disabled and
    re-enabled since (by ``rogue-watchdog undo`` or by hand) is live again; other kinds
    as recorded.

    Fresh user E (issue 33): ``suggest``, 5 s after ``undo`` had put the ghost's line
    back, labelled it ``cron …/legacy-retrain:1 (* * * * *), entry since disabled``.

    Args:
        origin: A recorded origin.
        paths: As :func:`source_gone_now`'s.
    """
    from ..lineage import default_resolvers
    from ..lineage.base import recheck

    return recheck(origin, _context_now(paths), default_resolvers())


def _context_now(paths: Paths | None) -> ResolveContext:
    """A resolver context of now that reads the crontabs and units where ``paths`` says
    (:meth:`~watchdog.lineage.base.ResolveContext.on_host`, as the daemon's scans do):
    read with the built-in paths, a file in a configured ``paths.cron_d`` named like a
    user (``daemon``) was taken for that user's crontab, and a line put back by ``undo``
    said ``entry since ignored``."""
    from ..lineage.base import ResolveContext
    from ..sources.procfs import ProcessTable

    return ResolveContext.on_host(paths or Paths(), ProcessTable(), datetime.now(UTC))


def reader_now(
    now: Callable[[Origin], Origin] | None = origin_now,
) -> Callable[[dict[str, Any] | UnreadableRecord], Origin]:
    """The one reading of recorded origins as their sources stand now, shared by every
    command that names a recorded run's origin (``allowlist diff``, ``report``): a
    function from a recorded origin (its JSON, or what stands for one that could not be
    parsed) to :class:`Origin`, each distinct origin read once per reader.

    Fresh user (issue 33): after ``undo`` put a crontab line back, ``allowlist diff``
    and then ``report``'s per-origin rows still said ``entry since disabled`` of it.

    Args:
        now: How an origin is read now (:func:`origin_now`, which reads the host's
            crontabs), or None to name each as recorded.
    """
    read: dict[str, Origin] = {}

    def one(recorded: dict[str, Any] | UnreadableRecord) -> Origin:
        origin = origin_from_json(recorded)
        if now is None:
            return origin
        key = json.dumps(recorded, sort_keys=True, default=str)
        if key not in read:
            read[key] = now(origin)
        return read[key]

    return one


def runs_now(
    runs: Sequence[RunRecord], now: Callable[[Origin], Origin] | None = origin_now
) -> list[RunRecord]:
    """``runs`` for a command that names them all (``report``): each origin recorded as
    gone since (``entry since disabled``: :meth:`Origin.source_gone`) as its source
    stands now (:func:`reader_now`); every other run as recorded.

    An origin recorded live claims nothing about now, and is kept: a report also reads
    a state directory copied from another host, where every crontab it names would read
    ``removed``."""
    read = reader_now(now)
    out = []
    for r in runs:
        recorded = origin_from_json(r.origin)
        origin = read(r.origin) if recorded.source_gone() is not None else recorded
        # Kept as recorded where nothing changed: its JSON may hold more than the model.
        out.append(r if origin == recorded else replace(r, origin=origin.to_json()))
    return out


#: What an action did, as a proposal says it (``rogue-watchdog terminated it``).
_ACTED = {
    "terminate": "terminated it",
    "disable-source": "disabled its source",
    "gpu-deny": "denied it the GPU",
    "quarantine": "quarantined its files",
}
#: How a diff marks a run whose job or source was acted against.
_ACTED_SUSPECT = "suspect: rogue-watchdog "
#: Outcomes of an action that did nothing to the job (``undo`` itself is said with the
#: action it undid).
_NOT_ACTED = frozenset({"refused", "dry-run"})


def acted_notes(groups: Sequence[Group], actions: Sequence[ActionRecord]) -> None:
    """Fill each group's :attr:`Group.acted`: every action recorded against one of its
    runs (by job signature or root identity) or against its source (the same origin
    pin), with the undo that reversed it: ``terminated it (action 2)``, ``disabled its
    source (action 1, undone by action 3)``. A dry run or a refusal did nothing and is
    not said.

    ``suggest`` proposed a cron ghost that rogue-watchdog had terminated and whose line
    it had disabled minutes before (issue 33, fresh user D): whatever was acted against
    is never proposed silently.

    Args:
        groups: :func:`group_runs`.
        actions: The audit trail of the window (:func:`watchdog.state.read_history`).
    """
    undone_by = {
        r.details.get("undid"): r.id
        for r in actions
        if r.kind == "undo" and not r.dry_run and r.outcome in ("ok", "partial", "running")
    }
    acted = [a for a in actions if a.kind != "undo" and not a.dry_run]
    acted = [a for a in acted if a.outcome not in _NOT_ACTED]
    for g in groups:
        sigs = {r.signature for r in g.runs}
        roots = {(r.root_pid, r.start_ticks) for r in g.runs}
        key = _origin_key(g.origin)
        for a in sorted(acted, key=lambda a: a.id):
            root = a.details.get("root")
            origin = a.details.get("origin")
            hit = a.signature in sigs or (
                isinstance(root, list) and len(root) == 2 and tuple(root) in roots
            )
            if not hit and isinstance(origin, dict):
                # The same source only where the origin pins one (a crontab line, a
                # unit): every unknown or orphan origin has the same key, and an action
                # on one such run was said of every other's group (stop 46's fresh user:
                # their terminates named against other people's test runs).
                try:
                    acted_on = origin_from_json(origin)
                    hit = strongest_pin(acted_on) is not None and _origin_key(acted_on) == key
                except (KeyError, TypeError, ValueError):
                    hit = False
            if not hit:
                continue
            what = _ACTED.get(a.kind, f"recorded a {a.kind} against it")
            undo = undone_by.get(a.id)
            if undo is not None:
                g.acted.append(f"{what} (action {a.id}, undone by action {undo})")
            elif a.undone_at is not None:
                g.acted.append(f"{what} (action {a.id}, undone)")
            else:
                g.acted.append(f"{what} (action {a.id})")


def acted_text(g: Group) -> str:
    """``rogue-watchdog terminated it (action 2) and disabled its source (action 1,
    undone by action 3)``; empty when nothing was done against it."""
    if not g.acted:
        return ""
    if len(g.acted) == 1:
        return f"rogue-watchdog {g.acted[0]}"
    return f"rogue-watchdog {', '.join(g.acted[:-1])} and {g.acted[-1]}"


def suggest(
    runs: Sequence[RunRecord],
    since: float,
    *,
    min_runs: int = 2,
    prefer: Sequence[str] = (),
    gone_now: GoneNow | None = None,
    now: Callable[[Origin], Origin] | None = None,
    actions: Sequence[ActionRecord] = (),
    include_acted: bool = False,
    learning_started: float | None = None,
) -> Suggestion:
    """Group the recorded runs into jobs and decide which to propose.

    A group is proposed when its origin may be sanctioned (:func:`not_sanctionable`),
    its source is not gone (as recorded, or ``gone_now``), it ran at least ``min_runs``
    times, no rule sanctioned it already, no other origin ran the same script
    (:func:`_judge_rivals`: all of them go into ``conflicts``, unless a rule sanctions
    one or ``prefer`` names some: then the others are suspected ghosts), and its rule
    loads (:func:`_unloadable`).

    Args:
        runs: Recorded runs (:func:`watchdog.state.read_runs`); several rows of one run
            count once (:func:`one_per_run`).
        since: Start of the window the runs were read from (POSIX time).
        min_runs: Fewest runs a proposed job has.
        prefer: Origins (``FILE``, ``FILE:LINE``, a unit) the admin chose.
        gone_now: Why an origin's source is gone now (:func:`source_gone_now`), or
            None to trust the records alone.
        now: Each group's origin as its source reads now (:func:`origin_now`), or
            None to trust the records alone: a line recorded disabled that runs again
            is named, and judged, as it stands.
        actions: The audit trail of the window: a job rogue-watchdog acted against
            (terminated, its source disabled...: :func:`acted_notes`), undone or not,
            is not proposed, and says so.
        include_acted: Propose such a job all the same, the actions said above it.
        learning_started: When the learning period began (``meta``
            ``learning_started``): runs that started before it do not count towards
            ``min_runs``, and the evidence says how many there were.
    """
    groups = group_runs(runs)
    acted_notes(groups, actions)
    for g in groups:
        if now is not None:
            g.origin = now(g.origin)
        if learning_started is not None:
            g.before_learning = sum(1 for r in g.runs if r.started_at < learning_started)
        if g.acted:
            said = f"{acted_text(g)}; --include-acted proposes it all the same"
            if g.why_not is not None:
                g.why_not = f"{g.why_not}; {said}"
            elif not include_acted:
                g.why_not = said
        classes = sorted({r.workload for r in g.runs if r.workload in NON_TRAINING_CLASSES})
        if classes and all(r.workload in NON_TRAINING_CLASSES for r in g.runs):
            # Not training: exempted by user and class below, never sanctioned as a job
            # (its runs still count as rivals of a training script's).
            g.why_not = (
                f"not training (class {', '.join(classes)}): an ignore entry for user "
                f"{g.user} is proposed instead"
            )
            continue
        # As read now first (`is removed now`), else as recorded.
        gone = (gone_now(g.origin) if gone_now else None) or g.origin.source_gone()
        if g.why_not is None and gone is not None:
            g.why_not = f"its source is gone ({gone})"
        if g.why_not is None and g.sanctioned:
            rules = sorted({r.rule or "?" for r in g.runs})
            g.why_not = f"already sanctioned by rule {', '.join(rules)}"
        counted = len(g.runs) - g.before_learning
        if g.why_not is None and counted < min_runs:
            g.why_not = f"ran {counted} time(s), fewer than --min-runs {min_runs}"
            if g.before_learning:
                g.why_not += " (runs before the learning period began are not counted)"
    conflicts = _judge_rivals(groups, prefer)
    taken: set[str] = set()
    for g in groups:
        if g.why_not is None:
            g.rule = _rule_name(g, taken)
            g.why_not = _unloadable(g)
    proposed = [g for g in groups if g.why_not is None]
    in_conflict = {id(g) for c in conflicts for g in c}
    not_proposed = [g for g in groups if g.why_not is not None and id(g) not in in_conflict]
    return Suggestion(proposed, not_proposed, conflicts, since, exemptions(runs), learning_started)


def exemptions(runs: Sequence[RunRecord]) -> list[Exemption]:
    """One proposed ``ignore`` entry per user and class of the unsanctioned runs that
    are not training (the class recorded at each run's last sighting), oldest first.

    Every such class is proposed whatever the number of runs (a notebook kernel is one
    run that lasts for days), each with its evidence for review; training never is (a
    class never hides it), nor a run a rule or an ignore entry already covered.
    """
    out: dict[tuple[str | None, str], Exemption] = {}
    for run in one_per_run(runs):
        if run.verdict != "rogue" or run.workload not in NON_TRAINING_CLASSES:
            continue
        key = (run.user, run.workload)
        out.setdefault(key, Exemption(run.user, run.workload)).runs.append(run)
    found = sorted(out.values(), key=lambda e: (e.runs[0].started_at, e.name))
    return [e for e in found if _exemption_loads(e)]


def _exemption_loads(e: Exemption) -> bool:
    """True when the proposed entry loads (host text YAML cannot carry is left out)."""
    try:
        text = yaml.safe_dump({"ignore": [e.entry()]}, allow_unicode=False, width=1 << 16)
        parse_config(text, "suggested exemption")
    except (ConfigError, yaml.YAMLError, UnicodeError):
        return False
    return True


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
    runs = f"runs: {len(g.runs)}"
    if g.before_learning:
        runs = (
            f"runs: {len(g.runs) - g.before_learning} (and {g.before_learning} before the "
            "learning period began, not counted)"
        )
    text = (
        f"{runs}, first seen {_when(g.runs[0].started_at)}, last seen "
        f"{_when(g.runs[-1].last_seen)}, GPU-hours {g.gpu_hours:.2f}"
    )
    gpus = g.gpus
    return text + (f", GPUs: {', '.join(gpus)}" if gpus else ", GPUs: none")


def _times(g: Group) -> str:
    first = _when(g.runs[0].started_at)
    if len(g.runs) == 1:
        return f"at {first}"
    return f"at {first} and {len(g.runs) - 1} more time(s), last at {_when(g.runs[-1].started_at)}"


def rival_text(rival: Group) -> str:
    """How a proposal or a diff names a rival: ``suspect: also run by hand by te_bob at
    T (shell ...)``, or ``suspect: also run from cron F:L (...) by mlops at T``."""
    if rival.origin.by_hand:
        return (
            f"suspect: also run by hand by {rival.user} {_times(rival)} ({rival.origin.describe()})"
        )
    return f"suspect: also run from {rival.origin.describe()} by {rival.user} {_times(rival)}"


def namesake_text(other: Group) -> str:
    """``same script name elsewhere: /srv/other/train.py by user x (ORIGIN)``."""
    return (
        f"warning: same script name elsewhere: {other.script.path} by user {other.user} "
        f"({other.origin.describe()})"
    )


def _unresolved_text(g: Group) -> str | None:
    if g.script.unresolved is None:
        return None
    return (
        f"its script could not be resolved ({g.script.unresolved}): runs of any "
        f"{code_span(g.script.name)} count as the same script"
    )


def _origin_evidence(g: Group) -> list[str]:
    o = g.origin
    if o.by_hand:
        return [f"  {rival_text(g)}"]
    lines = [f"  {o.describe()}, user {g.user}: {_evidence(g)}"]
    path, detail = o.source_file(), o.source_detail()
    if path is not None:
        try:
            edited = _when(os.stat(path).st_mtime)
        except OSError:
            edited = "file gone"
        lines.append(f"    {detail or f'file {path}'}, last edit {edited}")
    if g.why_not is not None and g.why_not.startswith("its source is gone"):
        lines.append(f"    {g.why_not}")
    elif g.acted:
        lines.append(f"    {acted_text(g)}")
    unresolved = _unresolved_text(g)
    if unresolved is not None:
        lines.append(f"    {unresolved}")
    return lines


def rule_of(g: Group) -> dict[str, Any]:
    """The allowlist rule proposed for a group (a ``sanctioned:`` entry)."""
    rule: dict[str, Any] = {"name": g.rule, "cmdline_regex": head_regex(g.head)}
    if g.user is not None:
        rule["user"] = g.user
    rule["origin"] = strongest_pin(g.origin)
    rule["max_instances"] = max(1, max_concurrent(g.runs))
    return rule


def _proposal(g: Group) -> list[str]:
    """A proposed rule with its evidence, suspects and warnings as comments above it."""
    out = [_comment(f"{g.origin.describe()}: {_evidence(g)}")]
    if g.acted:
        out.append(_comment(f"suspect: {acted_text(g)}; proposed by --include-acted"))
    out.extend(_comment(rival_text(h)) for h in g.rivals)
    out.extend(_comment(namesake_text(h)) for h in g.namesakes)
    unresolved = _unresolved_text(g)
    if unresolved is not None:
        out.append(_comment(f"note: {unresolved}"))
    text = yaml.safe_dump([rule_of(g)], sort_keys=False, allow_unicode=False, width=1 << 16)
    out.extend("  " + line for line in text.rstrip("\n").splitlines())
    return out


def _exemption_lines(e: Exemption) -> list[str]:
    """A proposed ignore entry with its evidence as comments above it."""
    runs = e.runs
    hours = sum(r.gpu_s for r in runs) / 3600.0
    gpus = sorted({g for r in runs for g in (r.gpus or [])})
    out = [
        _comment(
            f"{e.workload}, user {e.user}: {len(runs)} run(s), first seen "
            f"{_when(runs[0].started_at)}, last seen {_when(runs[-1].last_seen)}, GPU-hours "
            f"{hours:.2f}, GPUs: {', '.join(gpus) or 'none'}"
        )
    ]
    heads: dict[tuple[str, ...], RunRecord] = {}
    for r in runs:
        heads.setdefault(tuple(program_and_script(r.cmdline)), r)
    for head, r in list(heads.items())[:3]:
        why = "; ".join(r.workload_evidence or []) or "-"
        origin = origin_from_json(r.origin).describe()
        out.append(_comment(f"  {' '.join(head)} ({why}), from {origin}"))
    if len(heads) > 3:
        out.append(_comment(f"  and {len(heads) - 3} more program(s)"))
    text = yaml.safe_dump([e.entry()], sort_keys=False, allow_unicode=False, width=1 << 16)
    out.extend("  " + line for line in text.rstrip("\n").splitlines())
    return out


#: More jobs than this not proposed for one reason are shown as the first
#: ``SHOWN_ALIKE`` of them (most runs first) and a count.
MANY_ALIKE = 5
SHOWN_ALIKE = 3


def render_yaml(s: Suggestion, state_dir: str | None = None) -> str:
    """The suggestion as a YAML allowlist ``check-config`` accepts, with the evidence
    and what was not proposed as comments.

    Args:
        s: What :func:`suggest` found.
        state_dir: The state directory whose history was read: written as
            ``daemon.state_dir``, so ``allowlist diff --config`` with this file replays
            that instance's history, not the default one's (issue 33).
    """
    out = [
        _comment(f"rogue-watchdog allowlist suggest: runs seen since {_when(s.since)}"),
        _comment("Review every rule before enforcing it (docs/first-week.md)."),
    ]
    early = sum(g.before_learning for g in [*s.proposed, *s.not_proposed])
    if s.learning_started is not None and early:
        out.append(
            _comment(
                f"the learning period began {_when(s.learning_started)}: {early} run(s) "
                "seen before it are not counted towards --min-runs"
            )
        )
    if not (s.proposed or s.conflicts or s.not_proposed or s.exemptions):
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
        out.extend(_proposal(g))
    for same in s.conflicts:
        out.append(
            _comment(f"not proposed: {' '.join(same[0].head)} runs from {len(same)} origins:")
        )
        for g in same:
            out.extend(_comment(line) for line in _origin_evidence(g))
        out.append(_comment("  choose the legitimate one: --prefer FILE:LINE (or the unit)"))
    alike: dict[str | None, list[Group]] = {}
    for g in s.not_proposed:
        alike.setdefault(g.why_not, []).append(g)
    for why, groups in alike.items():
        # Many jobs not proposed for one reason (another engineer's 40-job fan-out, each
        # of unknown origin) are a few lines and a count: the reason that needs reading
        # (a job this product acted on) is not lost among 49 alike (issue 33, fresh
        # user K). The first ones shown are those that ran most.
        if len(groups) > MANY_ALIKE:
            groups = sorted(groups, key=lambda g: -len(g.runs))
        for g in groups[: SHOWN_ALIKE if len(groups) > MANY_ALIKE else None]:
            out.append(
                _comment(
                    f"seen, not proposed: {code_span(' '.join(g.head))} "
                    f"(user {plain_or_code(str(g.user))}, "
                    f"{g.origin.describe()}): {g.why_not}; {_evidence(g)}"
                )
            )
        if len(groups) > MANY_ALIKE:
            out.append(
                _comment(
                    f"and {len(groups) - SHOWN_ALIKE} more job(s) seen, not proposed for the "
                    f"same reason: {why}"
                )
            )
    if s.exemptions:
        out.append(
            _comment(
                "GPU use that is not training, exempted by user and class (added to the "
                "shipped ignore defaults; a class never hides training):"
            )
        )
        out.append("ignore:")
        for e in s.exemptions:
            out.extend(_exemption_lines(e))
    if state_dir is not None:
        out.append(
            _comment(
                "the instance whose history this was learned from: `rogue-watchdog "
                "allowlist diff --config THIS-FILE` replays it (copy only the rules above "
                "into the configuration)"
            )
        )
        # JSON's string form is a YAML double-quoted scalar: any path stays one value.
        out.extend(["daemon:", f"  state_dir: {json.dumps(os.path.abspath(state_dir))}"])
    return "\n".join(out) + "\n"


def candidate_count(
    runs: Sequence[RunRecord], since: float, actions: Sequence[ActionRecord] = ()
) -> int:
    """How many rules :func:`suggest` would propose now (default options: a job
    rogue-watchdog acted against, in ``actions``, is not one)."""
    return len(suggest(runs, since, actions=actions).proposed)


@dataclass(frozen=True)
class Change:
    """A recorded run whose verdict a configuration would change.

    Attributes:
        run: The run (one record per run: :func:`one_per_run`).
        was: Its recorded verdict.
        would: Its verdict under the configuration.
        reason: Why (the judge's words).
        suspects: For a run it would sanction: each other origin that ran the same
            script in the window (:func:`rival_text`); empty otherwise.
    """

    run: RunRecord
    was: str
    would: str
    reason: str
    suspects: tuple[str, ...] = ()


def _job(run: RunRecord) -> Job:
    # The root as recorded (user and command line; no executable), so ignore entries
    # by user, group, command line, origin kind and class judge the run as they would.
    root = Proc(
        pid=run.root_pid, ppid=0, start_ticks=run.start_ticks, state="S", comm="",
        user=run.user, cmdline=tuple(run.cmdline),
    )  # fmt: skip
    workload = run.workload if run.workload in WORKLOAD_CLASSES else "training"
    return Job(
        root_pid=run.root_pid, pids=[run.root_pid], user=run.user, cmdline=tuple(run.cmdline),
        start_ticks=run.start_ticks, gpu_memory_bytes=None, gpu_uuids=list(run.gpus or []),
        lineage=[root], origin=origin_from_json(run.origin), workload=workload,
        workload_evidence=list(run.workload_evidence or []),
    )  # fmt: skip


def replay(
    runs: Sequence[RunRecord], config: Config, actions: Sequence[ActionRecord] = ()
) -> list[Change]:
    """Judge each recorded run again under ``config`` (with the daemon's
    :func:`~watchdog.policy.allowlist.judge`, beside the runs that were running when it
    started, oldest first, so ``max_instances`` counts as it would have), and list the
    runs whose verdict would differ from the recorded one, each run once
    (:func:`one_per_run`). A run it would sanction carries its suspects: the other
    origins that ran the same script (:func:`group_runs`), a person's shell included.

    A run it would sanction whose job or source rogue-watchdog acted against
    (``actions``: :func:`acted_notes`) is marked suspect too.

    The ignore list is not replayed (a run does not record its process's exe); ignored
    runs are left out.
    """
    groups = group_runs(runs)
    acted_notes(groups, actions)
    rivals = {(r.root_pid, r.start_ticks): g.rivals for g in groups for r in g.runs}
    acted = {(r.root_pid, r.start_ticks): acted_text(g) for g in groups for r in g.runs}
    ordered = [r for g in groups for r in g.runs]
    ordered.sort(key=lambda r: (r.started_at, r.root_pid))
    out = []
    for i, run in enumerate(ordered):
        running = [r for r in ordered[:i] if r.last_seen >= run.started_at]
        mine = judge([_job(r) for r in [*running, run]], config)[-1]
        if mine.verdict != run.verdict:
            suspects: tuple[str, ...] = ()
            if mine.verdict == "sanctioned":
                key = (run.root_pid, run.start_ticks)
                suspects = tuple(rival_text(h) for h in rivals[key])
                if acted[key]:
                    suspects = (f"suspect: {acted[key]}", *suspects)
            out.append(Change(run, run.verdict, mine.verdict, mine.reason, suspects))
    return out


def verdict_word(verdict: str, workload: str | None) -> str:
    """A recorded or replayed verdict as the daemon reported it: a rogue run of a class
    that is not training (``serving``, ``probe``...) was an ``unsanctioned-gpu-use``
    finding (:func:`watchdog.policy.findings.job_findings`), never called rogue."""
    if verdict == "rogue" and workload in NON_TRAINING_CLASSES:
        return "unsanctioned-gpu-use"
    return verdict


def render_changes(changes: Sequence[Change], now: Callable[[Origin], Origin] | None = None) -> str:
    """One line per changed run, each followed by its suspects, indented (host text
    escaped); the last line counts them.

    Args:
        changes: :func:`replay`.
        now: Each run's origin as its source reads now (:func:`origin_now`), or None to
            name it as recorded. A run recorded while its cron line was disabled reads
            ``entry since disabled``: a claim about now, false once ``undo`` (or a person)
            put the line back (issue 33's fresh user, ``allowlist diff`` beside its
            ``undone by action 3`` suspect line).
    """
    if not changes:
        return "no recorded run would change verdict"
    lines = []
    read = reader_now(now)
    for c in changes:
        o = read(c.run.origin)
        was, would = (verdict_word(v, c.run.workload) for v in (c.was, c.would))
        lines.append(
            safe_text(
                f"{_when(c.run.started_at)} PID {c.run.root_pid} {was} -> {would}: "
                f"{code_span(' '.join(c.run.cmdline))} (user {plain_or_code(str(c.run.user))}, "
                f"{o.describe()}): {c.reason}"
            )
        )
        lines.extend("    " + safe_text(s) for s in c.suspects)
    total = f"{len(changes)} run(s) would change verdict"
    acted = sum(1 for c in changes if any(s.startswith(_ACTED_SUSPECT) for s in c.suspects))
    marked = sum(1 for c in changes if any(not s.startswith(_ACTED_SUSPECT) for s in c.suspects))
    if marked:
        total += (
            f"; {marked} would be sanctioned although the same script also ran from "
            "another origin (suspect: review before enforcing)"
        )
    if acted:
        total += (
            f"; {acted} would be sanctioned although rogue-watchdog acted against its job "
            "or source (suspect: review before enforcing)"
        )
    lines.append(total)
    return "\n".join(lines)
