"""The YAML configuration: allowlist, training detection, ignore list, host paths.

Validation walks the YAML node tree (not the loaded dict) so every error names the file,
the line and the key path, e.g. ``/etc/rogue-watchdog/config.yaml:12: sanctioned[0].origin:
unknown key 'systemd'``. An empty or absent file is valid: nothing is sanctioned.
Reference: docs/config.md; the shipped example is config/example.yaml.

This package is the bottom layer: it imports only the standard library, third-party
libraries and :mod:`watchdog.model`, :mod:`watchdog.safeio`, :mod:`watchdog.hosttext`.
Each section lives in its own module (:mod:`.daemon`, :mod:`.alerts`, :mod:`.enforcement`,
:mod:`.queue`, :mod:`.services`, :mod:`.ship_gates`, :mod:`.slurm`), declared once as a
dataclass (:mod:`.base`) with converters from :mod:`.datatypes`.
"""

from __future__ import annotations

import grp
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, get_args

import yaml

from .. import hostpaths
from ..model import WORKLOAD_CLASSES, OriginKind
from ..safeio import read_regular, untrusted_reason
from . import datatypes
from .alerts import AlertSettings, parse_alerts
from .base import (
    ConfigError,
    ConfigErrors,
    ConfigRef,
    Converter,
    NodeReader,
    Regex,
    construct,
    errors_of,
    glob_matches_everything,
    keys,
    parser,
    raise_all,
    read,
    regex_matches_everything,
    require,
    required,
    setting,
)
from .daemon import DaemonSettings, parse_daemon
from .enforcement import EnforcementSettings, parse_enforcement
from .origins import OriginPin, parse_origin_pin
from .queue import QueueSettings, parse_queue
from .services import ServiceSettings, parse_services
from .ship_gates import ShipGate, parse_ship_gates
from .slurm import SlurmNodeSettings, parse_slurm
from .workloads import WorkloadSettings, parse_workloads

__all__ = [
    "Config",
    "ConfigError",
    "ConfigErrors",
    "ConfigRef",
    "IgnoreEntry",
    "OriginPin",
    "Paths",
    "Rule",
    "load_config",
    "parse_config",
    "trust_errors",
]

T = TypeVar("T")

DEFAULT_LAUNCHERS: tuple[str, ...] = (
    r"(^|[\s/])torchrun(\s|$)",
    r"(^|\s)-m\s+torch\.distributed\.(run|launch)(\s|$)",
    r"(^|[\s/])deepspeed(\s|$)",
    r"(^|[\s/])accelerate\s+launch(\s|$)",
    r"(^|[\s/])lightning\s+run(\s|$)",
    r"(^|[\s/])train[^\s/]*\.py(\s|$)",
)
MAX_CONFIG_BYTES = 1 << 20
DEFAULT_DEVICE_GLOB = "/dev/nvidia[0-9]*"
# Shared objects whose mapping makes a process GPU-capable (watchdog.sources.gpulibs).
DEFAULT_GPU_LIBRARIES: tuple[str, ...] = (
    "libcuda.so",
    "libcudart.so",
    "libtorch_cuda.so",
    "libnccl.so",
)
# File descriptor targets every host has that are never a GPU: a device glob matching
# one makes ordinary processes (cron's CRON child, a shell) GPU users.
NOT_GPU_FDS = (
    "/dev/null",
    "/dev/pts/0",
    "/dev/tty",
    "/dev/urandom",
    "socket:[1]",
    "pipe:[1]",
    "anon_inode:[eventfd]",
    "/tmp/x",
    "/var/log/syslog",
)
# Full paths under /usr: a basename or a command-line word is something any user can
# choose, and an ignored job raises no finding.
DEFAULT_IGNORE: tuple[dict[str, Any], ...] = (
    {"name": "xorg", "exe": "/usr/*/Xorg"},
    {"name": "nvidia-persistenced", "exe": "/usr/*/nvidia-persistenced"},
    {"name": "dcgm", "exe": "/usr/*/nv-hostengine"},
    {"name": "dcgm-exporter", "exe": "/usr/*/dcgm-exporter"},
    # Monitoring tools hold /dev/nvidia* open through NVML without training anything.
    {"name": "nvidia-smi", "exe": "/usr/*/nvidia-smi"},
    {"name": "nvtop", "exe": "/usr/*/nvtop"},
)
# systemd's EnvironmentFile= beside the configuration (systemd/rogue-watchdog.service).
SECRETS_ENV = "secrets.env"


# -- sections --------------------------------------------------------------------


# kw_only: the required origin is declared after the optional match keys, in the order
# the keys are listed in messages.
@dataclass(frozen=True, kw_only=True)
class Rule:
    """One ``sanctioned:`` entry.

    Attributes:
        name: Rule name shown in verdicts.
        cmdline: fnmatch glob over the space-joined command line, or None.
        cmdline_regex: RE2 regex searched in the joined command line, or None.
        user: Required user name of the job's root process, or None for any.
        origin: The origin the job must have.
        max_instances: How many jobs may match at once; None for no cap.
        line: Line of the rule in the config file (for messages).
    """

    name: str = required(datatypes.text)
    cmdline: str | None = setting(None, datatypes.glob)
    cmdline_regex: Regex | None = setting(None, datatypes.regex)
    user: str | None = setting(None, datatypes.user)
    origin: OriginPin = required(parse_origin_pin)
    max_instances: int | None = setting(None, datatypes.integer(1))
    line: int | None = None


def _rule(r: NodeReader, node: yaml.Node, key: str) -> Rule | None:
    """One rule, or None when an error was recorded (collect mode)."""
    # Counted before the keys: a rule with an unknown key is not built either.
    failed = len(r.errors)
    m = r.mapping(node, key, keys(Rule))
    for name in ("name", "origin"):
        if name not in m:
            why = (
                " (a rule without an origin would sanction a ghost running the same script;"
                " write 'origin: {any: true}' to allow any origin)"
                if name == "origin"
                else ""
            )
            missing = r.err(node, f"{key}.{name}", f"required key missing{why}")
            r.record(r.misspelt(key, name) or missing)
    if "cmdline" in m and "cmdline_regex" in m:
        r.record(r.err(m["cmdline_regex"][0], key, "use cmdline or cmdline_regex, not both"))
    if "cmdline" not in m and "cmdline_regex" not in m:
        missing = r.err(node, f"{key}.cmdline", "required key missing (or give cmdline_regex)")
        r.record(r.misspelt(key, "cmdline", "cmdline_regex") or missing)
    # Every key is checked even after one failed, so one run reports them all.
    vals = read(Rule, r, m, key, keep_going=True)
    _everything_rule(r, key, m, vals)
    if len(r.errors) > failed:
        return None
    return construct(Rule, {**vals, "line": node.start_mark.line + 1})


def _everything_rule(
    r: NodeReader, key: str, m: dict[str, tuple[yaml.Node, yaml.Node]], vals: dict[str, object]
) -> None:
    """Refuse a rule that sanctions every job; warn when only its pins narrow it."""
    cmdline, cmdline_regex = vals.get("cmdline"), vals.get("cmdline_regex")
    if isinstance(cmdline, str) and glob_matches_everything(cmdline):
        name, pattern = "cmdline", cmdline
    elif isinstance(cmdline_regex, Regex) and regex_matches_everything(cmdline_regex):
        name, pattern = "cmdline_regex", cmdline_regex.pattern
    else:
        return
    node, sub = m[name][1], f"{key}.{name}"
    origin = vals.get("origin")
    # A misspelt user key (``usr:``) is reported as such, not as a rule without a user.
    pinned = "user" in m or r.misspelt(key, "user") is not None
    if isinstance(origin, OriginPin) and origin.any and not pinned:
        r.record(
            r.err(
                node,
                sub,
                f"{pattern!r} matches every command line and the origin is 'any: true': "
                "the rule would sanction every training job on the host; name the program "
                "it runs (e.g. '*/train.py *')",
            )
        )
    else:
        r.warn(
            node,
            sub,
            f"{pattern!r} matches every command line: only the rule's origin and user pins "
            "decide what it sanctions",
        )


def _sanctioned(r: NodeReader, node: yaml.Node) -> tuple[Rule, ...]:
    items = r.sequence(node, "sanctioned")
    # A failing rule is recorded and the others still checked (one run, every error).
    parsed = [r.attempt(partial(_rule, r, n, f"sanctioned[{i}]")) for i, n in enumerate(items)]
    rules = [rule for rule in parsed if rule is not None]
    seen: set[str] = set()
    for i, rule in enumerate(parsed):
        if rule is None:
            continue
        if rule.name in seen:
            r.record(
                ConfigError(
                    r.path, rule.line, f"sanctioned[{i}].name", f"duplicate rule name {rule.name!r}"
                )
            )
        seen.add(rule.name)
    return tuple(rules)


def _one_or_more(convert: Converter[str]) -> Converter[tuple[str, ...]]:
    """One value or a list of them (each read by ``convert``)."""

    def convert_all(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
        if isinstance(node, yaml.SequenceNode):
            values = datatypes.tuple_of(convert)(r, node, key)
            if not values:
                raise r.err(node, key, "must not be an empty list")
            return values
        return (convert(r, node, key),)

    return convert_all


_ORIGIN_KINDS: tuple[str, ...] = get_args(OriginKind)
_ORIGIN_KIND = datatypes.choice(
    _ORIGIN_KINDS, "must be an origin kind: " + ", ".join(_ORIGIN_KINDS) + ", got {text!r}"
)


_CLASS = datatypes.choice(
    WORKLOAD_CLASSES, "must be a workload class: " + ", ".join(WORKLOAD_CLASSES) + ", got {text!r}"
)


def _ignore_class(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A workload class an ignore entry may name: any but ``training``."""
    name = _CLASS(r, node, key)
    if name == "training":
        raise r.err(
            node,
            key,
            "an ignore entry never exempts training (a class never hides it): sanction the "
            "job with a rule under 'sanctioned:' instead",
        )
    return name


def _group(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A group name; one this host's group database does not know is a warning."""
    name = r.string(node, key)
    try:
        grp.getgrnam(name)
    except KeyError:
        r.warn(
            node, key, f"no group {name!r} on this host (group): nothing matches it until it exists"
        )
    return name


@dataclass(frozen=True)
class IgnoreEntry:
    """A GPU user that is not a rogue training job: a display server, a persistence
    daemon, a person's notebook. Every key given must match (docs/config.md).

    Attributes:
        name: Shown as the verdict's rule.
        exe: fnmatch glob over the executable (a full path when it has a ``/``, else
            the basename).
        cmdline: fnmatch glob over the space-joined command line.
        user: The job's owner (user name).
        group: A group the owner belongs to (primary or supplementary, per the host's
            group database).
        origin_kind: Origin kinds (``shell`` is a person's login, tmux or screen).
        workload: Workload classes (YAML key ``class``); never ``training``.
    """

    name: str = required(datatypes.text)
    exe: str | None = setting(None, datatypes.glob)
    cmdline: str | None = setting(None, datatypes.glob)
    user: str | None = setting(None, datatypes.user)
    group: str | None = setting(None, _group)
    origin_kind: tuple[str, ...] = setting((), _one_or_more(_ORIGIN_KIND))
    workload: tuple[str, ...] = setting((), _one_or_more(_ignore_class))

    @property
    def per_job(self) -> bool:
        """True when it names an origin kind or a class: it matches a whole job once its
        origin and class are known, never a single process while jobs are grouped."""
        return bool(self.origin_kind or self.workload)

    def describe(self) -> str:
        """``'notebooks' (user alice; class interactive)``: the entry and its keys."""
        keys = [
            f"{k} {', '.join(v) if isinstance(v, tuple) else v}"
            for k, v in (
                ("exe", self.exe),
                ("cmdline", self.cmdline),
                ("user", self.user),
                ("group", self.group),
                ("origin", self.origin_kind),
                ("class", self.workload),
            )
            if v
        ]
        return f"{self.name!r} ({'; '.join(keys)})"


# The YAML keys of an ignore entry: `class` is the field `workload` (a Python keyword).
_IGNORE_KEYS = (*(k for k in keys(IgnoreEntry) if k != "workload"), "class")


def _ignore(r: NodeReader, node: yaml.Node, key: str) -> IgnoreEntry:
    """A glob over the executable (it names the entry too), or a mapping with a name
    and at least one of ``exe``, ``cmdline``, ``user``, ``group``, ``origin_kind``,
    ``class``."""
    if isinstance(node, yaml.ScalarNode):
        name = datatypes.glob(r, node, key)
        _everything_ignored(r, node, key, name, exe=True)
        return IgnoreEntry(name=name, exe=name)
    m = r.mapping(node, key, _IGNORE_KEYS)
    require(r, node, key, m, "name")
    if len(m) < 2:
        needs = r.err(node, key, "needs exe, cmdline, user, group, origin_kind or class")
        raise r.misspelt(key, *_IGNORE_KEYS) or needs
    given = {k: v for k, v in m.items() if k != "class"}
    vals = read(IgnoreEntry, r, given, key, order=keys(IgnoreEntry))
    if "class" in m:
        vals["workload"] = _one_or_more(_ignore_class)(r, m["class"][1], f"{key}.class")
    entry = construct(IgnoreEntry, vals)
    if entry.exe is not None:
        _everything_ignored(r, m["exe"][1], f"{key}.exe", entry.exe, exe=True)
    if entry.cmdline is not None:
        _everything_ignored(r, m["cmdline"][1], f"{key}.cmdline", entry.cmdline, exe=False)
    if entry.exe is None and entry.cmdline is None and not entry.workload:
        r.warn(
            node,
            key,
            f"ignores every GPU job of {_whose(entry)}, training included; add 'class:' "
            "(serving, interactive, system, probe) to exempt only what is not training",
        )
    return entry


def _whose(entry: IgnoreEntry) -> str:
    parts = [
        f"user {entry.user!r}" if entry.user else "",
        f"group {entry.group!r}" if entry.group else "",
        f"origin {', '.join(entry.origin_kind)}" if entry.origin_kind else "",
    ]
    return " and ".join(p for p in parts if p)


def _everything_ignored(r: NodeReader, node: yaml.Node, key: str, pattern: str, exe: bool) -> None:
    """An ignore entry matching every executable or command line hides every job."""
    if glob_matches_everything(pattern, paths=exe):
        what = "executable" if exe else "command line"
        raise r.err(
            node,
            key,
            f"{pattern!r} matches every {what}: every GPU job would be ignored (no "
            "finding, never terminated); name the program (e.g. '/usr/*/Xorg')",
        )


def _launcher(r: NodeReader, node: yaml.Node, key: str) -> Regex:
    """A launcher regex that does not match every command line."""
    regex = datatypes.regex(r, node, key)
    if regex_matches_everything(regex):
        raise r.err(
            node,
            key,
            f"{regex.pattern!r} matches every command line: every process (cron, "
            "shells, host services) would be a training job, rogue unless sanctioned; "
            "name the launcher (e.g. '(^|[\\s/])torchrun(\\s|$)')",
        )
    return regex


def _device_glob(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A glob over fd targets that matches no fd every host has (:data:`NOT_GPU_FDS`)."""
    glob = datatypes.glob(r, node, key)
    hits = [fd for fd in NOT_GPU_FDS if fnmatchcase(fd, glob)]
    if hits:
        raise r.err(
            node,
            key,
            f"{glob!r} matches {hits[0]!r}, which is no GPU: every process holding "
            "one would count as a GPU user (host services become rogue jobs); match "
            "the GPU device nodes only (default '/dev/nvidia[0-9]*')",
        )
    return glob


def _gpu_libraries(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """Shared-object file names (no directory)."""
    names = datatypes.texts(r, node, key)
    for i, name in enumerate(names):
        if not re.fullmatch(r"[A-Za-z0-9_+.-]+", name) or name in (".", ".."):
            raise r.err(
                r.sequence(node, key)[i],
                f"{key}[{i}]",
                f"expected a shared-object file name such as libcudart.so, got {name!r}",
            )
    return names


DEFAULT_LAUNCHER_REGEXES = tuple(Regex(p) for p in DEFAULT_LAUNCHERS)


@dataclass(frozen=True)
class Training:
    """The ``training:`` section (:attr:`Config.training`).

    Attributes:
        launchers: Command-line patterns (RE2) of training launchers.
        device_glob: GPU device nodes (fnmatch glob) whose holders use a GPU.
        gpu_libraries: Shared-object file names whose mapping marks a GPU user.
    """

    launchers: tuple[Regex, ...] = setting(DEFAULT_LAUNCHER_REGEXES, datatypes.each_of(_launcher))
    device_glob: str = setting(DEFAULT_DEVICE_GLOB, _device_glob)
    gpu_libraries: tuple[str, ...] = setting(DEFAULT_GPU_LIBRARIES, _gpu_libraries)


def _nvml_library(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A library name or path; a path is a file the daemon trusts."""
    lib = r.string(node, key)
    if "/" in lib:  # a bare name is found by the dynamic loader's own trusted paths
        r.refer(node, key, "file", lib)
    return lib


_RANGE_600 = "must be in (0, 600], got {value:g}"
# The order the keys are checked in (the first error, the references noted before it).
_NVML_ORDER = ("enabled", "call_timeout_s", "unexplained_memory_slack_bytes", "library")


@dataclass(frozen=True)
class Nvml:
    """The ``nvml:`` section (:attr:`Config.nvml`).

    Attributes:
        enabled: Probe NVML at all.
        library: Name or path of ``libnvidia-ml.so.1``; None: the dynamic loader's.
        call_timeout_s: Seconds one batch of NVML calls (one GPU, or init) may take
            before it counts as hung.
        unexplained_memory_slack_bytes: Used GPU memory above the listed processes' sum
            by more than this is reported.
    """

    enabled: bool = setting(True, datatypes.boolean)
    library: str | None = setting(None, _nvml_library)
    call_timeout_s: float = setting(
        10.0, datatypes.positive_s(600.0, too_low=_RANGE_600, too_high=_RANGE_600)
    )
    unexplained_memory_slack_bytes: int = setting(1 << 30, datatypes.integer(0))


@dataclass(frozen=True)
class Paths:
    """Host paths the sources and resolvers read; fixture trees in tests replace them."""

    proc_root: str = setting(hostpaths.PROC_ROOT, datatypes.text)
    crontab: str = setting(hostpaths.CRONTAB, datatypes.text)
    cron_d: str = setting(hostpaths.CRON_D, datatypes.text)
    cron_spool: tuple[str, ...] = setting(hostpaths.CRON_SPOOL_DIRS, datatypes.texts)
    unit_dirs: tuple[str, ...] = setting(hostpaths.UNIT_DIRS, datatypes.texts)
    cgroup_root: str = setting(hostpaths.CGROUP_ROOT, datatypes.text)


@dataclass(frozen=True)
class Config:
    """The validated configuration.

    ``ignore`` is the effective list: the shipped defaults (:data:`DEFAULT_IGNORE`,
    unless ``ignore_defaults: false``; an entry of the file with a default's name
    replaces it) followed by the file's entries.

    Besides the sections: ``warnings`` are doubts that do not invalidate it (a user this
    host does not know), ``refs`` the files, programs and environment variables it names
    (checked by :func:`trust_errors` and ``check-config``).
    """

    source: str = "<defaults>"
    sanctioned: tuple[Rule, ...] = ()
    training: Training = field(default_factory=Training)
    ignore: tuple[IgnoreEntry, ...] = tuple(IgnoreEntry(**e) for e in DEFAULT_IGNORE)
    ignore_defaults: bool = True
    workloads: WorkloadSettings = field(default_factory=WorkloadSettings)
    nvml: Nvml = field(default_factory=Nvml)
    paths: Paths = field(default_factory=Paths)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    enforcement: EnforcementSettings = field(default_factory=EnforcementSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    services: ServiceSettings = field(default_factory=ServiceSettings)
    ship_gates: tuple[ShipGate, ...] = ()
    warnings: tuple[ConfigError, ...] = ()
    refs: tuple[ConfigRef, ...] = ()
    slurm: SlurmNodeSettings = field(default_factory=SlurmNodeSettings)


def _ignore_list(r: NodeReader, node: yaml.Node) -> tuple[IgnoreEntry, ...]:
    return datatypes.each_of(_ignore)(r, node, "ignore")


def effective_ignore(
    given: Sequence[IgnoreEntry], keep_defaults: bool = True
) -> tuple[IgnoreEntry, ...]:
    """The ignore list in force: the shipped defaults (unless ``keep_defaults`` is
    false), those a given entry names again replaced by it, then the given entries.

    Args:
        given: The file's ``ignore:`` entries.
        keep_defaults: The file's ``ignore_defaults`` (true unless it says false).
    """
    names = {e.name for e in given}
    defaults = [IgnoreEntry(**e) for e in DEFAULT_IGNORE] if keep_defaults else []
    return (*(d for d in defaults if d.name not in names), *given)


def _ignore_defaults(r: NodeReader, node: yaml.Node) -> bool:
    return r.boolean(node, "ignore_defaults")


#: The top-level sections, each named here only: its key in the file (the field of
#: :class:`Config` it fills) and its parser, in the order the released parser read them
#: (warnings and refs come out in this order). ``ignore`` parses the file's own entries;
#: :func:`parse_config` adds the shipped defaults.
SECTIONS: tuple[tuple[str, Callable[[NodeReader, yaml.Node], Any]], ...] = (
    ("sanctioned", _sanctioned),
    ("training", parser(Training, "training", order=keys(Training))),
    ("ignore", _ignore_list),
    ("nvml", parser(Nvml, "nvml", order=_NVML_ORDER)),
    ("paths", parser(Paths, "paths")),
    ("daemon", parse_daemon),
    ("alerts", parse_alerts),
    ("enforcement", parse_enforcement),
    ("queue", parse_queue),
    ("services", parse_services),
    ("ship_gates", parse_ship_gates),
    ("slurm", parse_slurm),
    ("ignore_defaults", _ignore_defaults),
    ("workloads", parse_workloads),
)
#: The keys a configuration file may have at its top.
TOP_LEVEL_KEYS = tuple(name for name, _ in SECTIONS)


def parse_config(text: str, source: str = "<string>") -> Config:
    """Validate configuration text.

    Every error is found in one pass: a failing key, list item or section is recorded
    and the rest is still checked.

    Args:
        text: YAML document.
        source: File name used in error messages.

    Returns:
        The validated :class:`Config`; defaults fill every absent key. Its ``warnings``
        hold doubts that do not invalidate it (a user this host does not know), its
        ``refs`` the files, programs and variables it names.

    Raises:
        ConfigError: YAML syntax errors, unknown keys, wrong types, invalid regular
            expressions (or ones RE2 cannot run in linear time), bad globs, unit pins
            without a unit suffix, rules without an origin; the message names file, line
            and key. Several errors come as :class:`ConfigErrors`, listing all.
    """
    r = NodeReader(source, collect=True)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(source, line, "", f"YAML syntax error: {exc.problem}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        raise ConfigError(
            source, line, "", f"character {exc.character!r} is not allowed in YAML"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, None, "", f"YAML error: {exc}") from None
    except RecursionError:
        raise ConfigError(source, None, "", "YAML nesting is too deep") from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.value == ""):
        return Config(source=source)
    top = r.attempt(lambda: r.mapping(root, "", TOP_LEVEL_KEYS)) or {}

    def section(name: str, parse: Callable[[NodeReader, yaml.Node], T], default: T) -> T:
        # A failing section is recorded and keeps its defaults; the others are still read.
        if name not in top:
            return default
        value = r.attempt(partial(parse, r, top[name][1]))
        return default if value is None else value

    d = Config(source=source)
    values: dict[str, Any] = {
        name: section(name, parse, () if name == "ignore" else getattr(d, name))
        for name, parse in SECTIONS
    }
    try:
        raise_all(r.errors)
    except ConfigError as exc:
        exc.warnings, exc.refs = tuple(r.warnings), tuple(r.refs)
        raise
    values["ignore"] = effective_ignore(values["ignore"], values["ignore_defaults"])
    return Config(source=source, warnings=tuple(r.warnings), refs=tuple(r.refs), **values)


def _file_trust(path: str) -> list[ConfigError]:
    """The configuration file itself and ``secrets.env`` beside it (systemd's
    ``EnvironmentFile=`` in the shipped unit)."""
    out: list[ConfigError] = []
    for file in (path, os.path.join(os.path.dirname(os.path.abspath(path)), SECRETS_ENV)):
        if file != path and not os.path.lexists(file):
            continue
        reason = untrusted_reason(file)
        if reason is not None:
            out.append(ConfigError(path, None, "", f"refused: {reason}; {_TRUST_ADVICE}"))
    return out


_TRUST_ADVICE = "only root (or the daemon's user) may be able to change what the daemon obeys"


def trust_errors(source: str, refs: Sequence[ConfigRef]) -> list[ConfigError]:
    """Files the daemon obeys that someone other than root (or the daemon's user) could
    change: the configuration file, ``secrets.env`` beside it (systemd's
    ``EnvironmentFile=``), every ``url_file``, the NVML library and the queue command,
    with every directory on their paths (:func:`~watchdog.safeio.untrusted_reason`, the
    test sshd's StrictModes applies). The daemon runs as root and runs commands this file
    names, so a file others can write is a way to root.

    Args:
        source: The configuration file (``<...>`` for text that came from no file).
        refs: What it names (:attr:`Config.refs`).

    Returns:
        One error per untrusted file, naming file, line and key; empty when all are safe.
    """
    out = [] if source.startswith("<") else _file_trust(source)
    for ref in refs:
        if ref.kind == "env" or "/" not in ref.value:
            continue  # a bare program name is found on PATH, as root's shell would
        reason = untrusted_reason(ref.value)
        if reason is not None:
            out.append(
                ConfigError(source, ref.line, ref.key, f"refused: {reason}; {_TRUST_ADVICE}")
            )
    return out


def load_config(path: str | Path | None, *, check_trust: bool = True) -> Config:
    """Read and validate a configuration file.

    Args:
        path: File to read; None gives the defaults (nothing sanctioned).
        check_trust: Refuse the file when someone other than root or this process's
            user could change it or a file it names (:func:`trust_errors`).

    Returns:
        The validated configuration.

    Raises:
        ConfigError: The file is unreadable, not UTF-8, invalid (see
            :func:`parse_config`) or untrusted; :class:`ConfigErrors` when there are
            several errors.
    """
    if path is None:
        return Config()
    p = str(path)
    try:
        text = read_regular(p, MAX_CONFIG_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError(p, None, "", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            p, None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        config = parse_config(text, p)
    except ConfigError as exc:
        untrusted = trust_errors(p, exc.refs) if check_trust else []
        if not untrusted:
            raise
        both = ConfigErrors([*untrusted, *errors_of(exc)])
        both.warnings, both.refs = exc.warnings, exc.refs
        raise both from None
    try:
        raise_all(trust_errors(p, config.refs) if check_trust else [])
    except ConfigError as exc:
        exc.warnings, exc.refs = config.warnings, config.refs
        raise
    return config


def config_checksum(path: str | None) -> str | None:
    """SHA-256 of the configuration file's bytes (first 16 hex digits), or None.

    None also when the path is not a regular file or is larger than a configuration can
    be (a FIFO swapped in would otherwise block the status answer forever).
    """
    if path is None:
        return None
    # Imported here: OpenSSL's hashlib is ~2 ms of every `scan`, which never asks.
    import hashlib

    try:
        return hashlib.sha256(read_regular(path, MAX_CONFIG_BYTES)).hexdigest()[:16]
    except (OSError, ValueError):
        return None
