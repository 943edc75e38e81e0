"""The YAML configuration: allowlist, training detection, ignore list, host paths.

Validation walks the YAML node tree (not the loaded dict) so every error names the file,
the line and the key path, e.g. ``/etc/rogue-watchdog/config.yaml:12: sanctioned[0].origin:
unknown key 'systemd'``. An empty or absent file is valid: nothing is sanctioned.
Reference: docs/config.md; the shipped example is config/example.yaml.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from watchdog.config.base import (
    ConfigError,
    ConfigErrors,
    ConfigRef,
    NodeReader,
    Regex,
    errors_of,
    glob_matches_everything,
    raise_all,
    regex_matches_everything,
)
from watchdog.config.daemon import AlertSettings, DaemonSettings, parse_alerts, parse_daemon
from watchdog.config.enforcement import EnforcementSettings, parse_enforcement
from watchdog.config.queue import QueueSettings, parse_queue
from watchdog.config.services import ServiceSettings, parse_services
from watchdog.config.ship_gates import ShipGate, parse_ship_gates
from watchdog.config.slurm import SlurmNodeSettings, parse_slurm
from watchdog.safeio import read_regular, untrusted_reason

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
DEFAULT_IGNORE: tuple[dict[str, str], ...] = (
    {"name": "xorg", "exe": "/usr/*/Xorg"},
    {"name": "nvidia-persistenced", "exe": "/usr/*/nvidia-persistenced"},
    {"name": "dcgm", "exe": "/usr/*/nv-hostengine"},
    {"name": "dcgm-exporter", "exe": "/usr/*/dcgm-exporter"},
    # Monitoring tools hold /dev/nvidia* open through NVML without training anything.
    {"name": "nvidia-smi", "exe": "/usr/*/nvidia-smi"},
    {"name": "nvtop", "exe": "/usr/*/nvtop"},
)
# Unit types (systemd.unit(5)): a pin without one of these suffixes names no unit.
UNIT_SUFFIXES = (
    ".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path",
    ".timer", ".slice", ".scope",
)  # fmt: skip
# systemd's EnvironmentFile= beside the configuration (systemd/rogue-watchdog.service).
SECRETS_ENV = "secrets.env"
ORIGIN_KEYS = (
    "any",
    "systemd_unit",
    "cron_file",
    "cron_line",
    "slurm_account",
    "slurm_job_name",
    "container_image",
    "container_image_digest",
    "k8s_namespace",
    "k8s_owner",
    "k8s_service_account",
)


_ORIGIN_KIND = {
    "systemd_unit": "systemd",
    "cron_file": "cron",
    "cron_line": "cron",
    "slurm_account": "slurm",
    "slurm_job_name": "slurm",
    "container_image": "container",
    "container_image_digest": "container",
    "k8s_namespace": "kubernetes",
    "k8s_owner": "kubernetes",
    "k8s_service_account": "kubernetes",
}


@dataclass(frozen=True)
class OriginPin:
    """Where a sanctioned job must come from; every set field must match."""

    any: bool = False
    systemd_unit: str | None = None
    cron_file: str | None = None
    cron_line: int | None = None
    slurm_account: str | None = None
    slurm_job_name: str | None = None
    container_image: str | None = None
    container_image_digest: str | None = None
    k8s_namespace: str | None = None
    k8s_owner: str | None = None
    k8s_service_account: str | None = None


@dataclass(frozen=True)
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

    name: str
    cmdline: str | None
    cmdline_regex: Regex | None
    user: str | None
    origin: OriginPin
    max_instances: int | None
    line: int | None = None


@dataclass(frozen=True)
class IgnoreEntry:
    """A GPU user that is not training (display server, persistence daemon, DCGM)."""

    name: str
    exe: str | None = None
    cmdline: str | None = None


@dataclass(frozen=True)
class Paths:
    """Host paths the sources and resolvers read; fixture trees in tests replace them."""

    proc_root: str = "/proc"
    crontab: str = "/etc/crontab"
    cron_d: str = "/etc/cron.d"
    cron_spool: tuple[str, ...] = ("/var/spool/cron/crontabs", "/var/spool/cron")
    unit_dirs: tuple[str, ...] = (
        "/etc/systemd/system",
        "/run/systemd/system",
        "/usr/local/lib/systemd/system",
        "/lib/systemd/system",
        "/usr/lib/systemd/system",
    )


@dataclass(frozen=True)
class Config:
    """The validated configuration.

    Besides the sections: ``warnings`` are doubts that do not invalidate it (a user this
    host does not know), ``refs`` the files, programs and environment variables it names
    (checked by :func:`trust_errors` and ``check-config``).
    """

    source: str = "<defaults>"
    sanctioned: tuple[Rule, ...] = ()
    launchers: tuple[Regex, ...] = tuple(Regex(p) for p in DEFAULT_LAUNCHERS)
    device_glob: str = DEFAULT_DEVICE_GLOB
    gpu_libraries: tuple[str, ...] = DEFAULT_GPU_LIBRARIES
    ignore: tuple[IgnoreEntry, ...] = tuple(IgnoreEntry(**e) for e in DEFAULT_IGNORE)
    nvml_enabled: bool = True
    nvml_library: str | None = None
    # Seconds one batch of NVML calls (one GPU, or init) may take before it counts as hung.
    nvml_call_timeout_s: float = 10.0
    # Used GPU memory above the listed processes' sum by more than this is reported.
    nvml_unexplained_slack_bytes: int = 1 << 30
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


# -- sections --------------------------------------------------------------------


def _unit_pin(r: NodeReader, node: yaml.Node, key: str) -> str:
    """A glob over a unit name; it must be able to match a unit type suffix."""
    text = r.glob(node, key)
    if not text.endswith(("*", *UNIT_SUFFIXES)):
        raise r.err(
            node,
            key,
            f"{text!r} has no unit type suffix, so it never matches a unit (units are "
            f"named with their type: {text}.service); known types: {', '.join(UNIT_SUFFIXES)}",
        )
    return text


def _origin(r: NodeReader, node: yaml.Node, key: str) -> OriginPin:
    m = r.mapping(node, key, ORIGIN_KEYS)
    if not m:
        raise r.err(
            node, key, f"needs one of {', '.join(k for k in ORIGIN_KEYS if k != 'cron_line')}"
        )
    vals: dict[str, Any] = {}
    for name, (_, v) in m.items():
        sub = f"{key}.{name}"
        if name == "any":
            vals[name] = r.boolean(v, sub)
        elif name == "cron_line":
            vals[name] = r.integer(v, sub, 1)
        elif name == "systemd_unit":
            vals[name] = _unit_pin(r, v, sub)
        else:
            vals[name] = r.glob(v, sub)
    if "cron_line" in vals and "cron_file" not in vals:
        raise r.err(m["cron_line"][0], f"{key}.cron_line", "needs cron_file beside it")
    kinds = {_ORIGIN_KIND[k] for k in vals if k != "any"}
    if len(kinds) > 1:
        raise r.err(
            node,
            key,
            f"keys of different origin kinds can never all match: {', '.join(sorted(vals))}",
        )
    if vals.get("any") and len(vals) > 1:
        raise r.err(node, key, "'any: true' cannot be combined with other origin keys")
    if "any" in vals and not vals["any"]:
        raise r.err(m["any"][1], f"{key}.any", "only 'any: true' makes sense; remove the key")
    return OriginPin(**vals)


def _rule(r: NodeReader, node: yaml.Node, key: str) -> Rule | None:
    """One rule, or None when an error was recorded (collect mode)."""
    allowed = ("name", "cmdline", "cmdline_regex", "user", "origin", "max_instances")
    m = r.mapping(node, key, allowed)
    failed = len(r.errors)
    for required in ("name", "origin"):
        if required not in m:
            why = (
                " (a rule without an origin would sanction a ghost running the same script;"
                " write 'origin: {any: true}' to allow any origin)"
                if required == "origin"
                else ""
            )
            r.record(r.err(node, f"{key}.{required}", f"required key missing{why}"))
    if "cmdline" in m and "cmdline_regex" in m:
        r.record(r.err(m["cmdline_regex"][0], key, "use cmdline or cmdline_regex, not both"))
    if "cmdline" not in m and "cmdline_regex" not in m:
        r.record(r.err(node, f"{key}.cmdline", "required key missing (or give cmdline_regex)"))
    # Every key is checked even after one failed, so one run reports them all.
    vals: dict[str, Any] = {}
    for name, (_, v) in m.items():
        sub = f"{key}.{name}"
        parse: Callable[[], Any] = {
            "name": lambda v=v, sub=sub: r.string(v, sub),
            "cmdline": lambda v=v, sub=sub: r.glob(v, sub),
            "cmdline_regex": lambda v=v, sub=sub: r.regex(v, sub),
            "user": lambda v=v, sub=sub: r.user(v, sub),
            "origin": lambda v=v, sub=sub: _origin(r, v, sub),
            "max_instances": lambda v=v, sub=sub: r.integer(v, sub, 1),
        }[name]
        value = r.attempt(parse)
        if value is not None:
            vals[name] = value
    _everything_rule(r, key, m, vals)
    if len(r.errors) > failed:
        return None
    return Rule(
        name=vals["name"],
        cmdline=vals.get("cmdline"),
        cmdline_regex=vals.get("cmdline_regex"),
        user=vals.get("user"),
        origin=vals["origin"],
        max_instances=vals.get("max_instances"),
        line=node.start_mark.line + 1,
    )


def _everything_rule(
    r: NodeReader, key: str, m: dict[str, tuple[yaml.Node, yaml.Node]], vals: dict[str, Any]
) -> None:
    """Refuse a rule that sanctions every job; warn when only its pins narrow it."""
    if "cmdline" in vals and glob_matches_everything(vals["cmdline"]):
        name, pattern = "cmdline", vals["cmdline"]
    elif "cmdline_regex" in vals and regex_matches_everything(vals["cmdline_regex"]):
        name, pattern = "cmdline_regex", vals["cmdline_regex"].pattern
    else:
        return
    node, sub = m[name][1], f"{key}.{name}"
    origin = vals.get("origin")
    if isinstance(origin, OriginPin) and origin.any and "user" not in vals:
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


def _ignore(r: NodeReader, node: yaml.Node, key: str) -> IgnoreEntry:
    if isinstance(node, yaml.ScalarNode):
        name = r.glob(node, key)
        _everything_ignored(r, node, key, name, exe=True)
        return IgnoreEntry(name=name, exe=name)
    m = r.mapping(node, key, ("name", "exe", "cmdline"))
    if "name" not in m:
        raise r.err(node, f"{key}.name", "required key missing")
    if "exe" not in m and "cmdline" not in m:
        raise r.err(node, key, "needs exe or cmdline")
    entry = IgnoreEntry(
        name=r.string(m["name"][1], f"{key}.name"),
        exe=r.glob(m["exe"][1], f"{key}.exe") if "exe" in m else None,
        cmdline=r.glob(m["cmdline"][1], f"{key}.cmdline") if "cmdline" in m else None,
    )
    if entry.exe is not None:
        _everything_ignored(r, m["exe"][1], f"{key}.exe", entry.exe, exe=True)
    if entry.cmdline is not None:
        _everything_ignored(r, m["cmdline"][1], f"{key}.cmdline", entry.cmdline, exe=False)
    return entry


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


def _gpu_libraries(r: NodeReader, node: yaml.Node) -> tuple[str, ...]:
    key = "training.gpu_libraries"
    names = r.strings(node, key)
    for i, name in enumerate(names):
        if not re.fullmatch(r"[A-Za-z0-9_+.-]+", name) or name in (".", ".."):
            raise r.err(
                r.sequence(node, key)[i],
                f"{key}[{i}]",
                f"expected a shared-object file name such as libcudart.so, got {name!r}",
            )
    return names


def _paths(r: NodeReader, node: yaml.Node) -> Paths:
    allowed = ("proc_root", "crontab", "cron_d", "cron_spool", "unit_dirs")
    m = r.mapping(node, "paths", allowed)
    vals: dict[str, Any] = {}
    for name, (_, v) in m.items():
        key = f"paths.{name}"
        vals[name] = r.strings(v, key) if name in ("cron_spool", "unit_dirs") else r.string(v, key)
    return Paths(**vals)


# Sections parsed by their own modules (daemon, alerts, enforcement, queue, ship gates).
SECTIONS: dict[str, Callable[[NodeReader, yaml.Node], Any]] = {
    "daemon": parse_daemon,
    "alerts": parse_alerts,
    "enforcement": parse_enforcement,
    "queue": parse_queue,
    "services": parse_services,
    "ship_gates": parse_ship_gates,
    "slurm": parse_slurm,
}
TOP_LEVEL_KEYS = ("sanctioned", "training", "ignore", "nvml", "paths", *SECTIONS)


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
    vals: dict[str, Any] = {"source": source}
    top = r.attempt(lambda: r.mapping(root, "", TOP_LEVEL_KEYS, keep_going=True)) or {}
    if "sanctioned" in top:
        r.attempt(lambda: vals.update(sanctioned=_sanctioned(r, top["sanctioned"][1])))
    if "training" in top:
        r.attempt(lambda: vals.update(_training(r, top["training"][1])))
    if "ignore" in top:
        r.attempt(lambda: vals.update(ignore=tuple(r.each(top["ignore"][1], "ignore", _ign(r)))))
    if "nvml" in top:
        r.attempt(lambda: vals.update(_nvml(r, top["nvml"][1])))
    if "paths" in top:
        r.attempt(lambda: vals.update(paths=_paths(r, top["paths"][1])))
    for name, section in SECTIONS.items():
        if name in top:
            value = r.attempt(partial(section, r, top[name][1]))
            if value is not None:
                vals[name] = value
    try:
        raise_all(r.errors)
    except ConfigError as exc:
        exc.warnings, exc.refs = tuple(r.warnings), tuple(r.refs)
        raise
    return Config(**vals, warnings=tuple(r.warnings), refs=tuple(r.refs))


def _ign(r: NodeReader) -> Callable[[yaml.Node, str], IgnoreEntry]:
    return lambda node, key: _ignore(r, node, key)


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


def _training(r: NodeReader, node: yaml.Node) -> dict[str, Any]:
    vals: dict[str, Any] = {}
    m = r.mapping(node, "training", ("launchers", "device_glob", "gpu_libraries"))
    if "launchers" in m:
        vals["launchers"] = tuple(r.each(m["launchers"][1], "training.launchers", _launcher(r)))
    if "device_glob" in m:
        node = m["device_glob"][1]
        glob = r.glob(node, "training.device_glob")
        hits = [fd for fd in NOT_GPU_FDS if fnmatchcase(fd, glob)]
        if hits:
            raise r.err(
                node,
                "training.device_glob",
                f"{glob!r} matches {hits[0]!r}, which is no GPU: every process holding "
                "one would count as a GPU user (host services become rogue jobs); match "
                "the GPU device nodes only (default '/dev/nvidia[0-9]*')",
            )
        vals["device_glob"] = glob
    if "gpu_libraries" in m:
        vals["gpu_libraries"] = _gpu_libraries(r, m["gpu_libraries"][1])
    return vals


def _launcher(r: NodeReader) -> Callable[[yaml.Node, str], Regex]:
    def parse(node: yaml.Node, key: str) -> Regex:
        regex = r.regex(node, key)
        if regex_matches_everything(regex):
            raise r.err(
                node,
                key,
                f"{regex.pattern!r} matches every command line: every process (cron, "
                "shells, host services) would be a training job, rogue unless sanctioned; "
                "name the launcher (e.g. '(^|[\\s/])torchrun(\\s|$)')",
            )
        return regex

    return parse


def _nvml(r: NodeReader, node: yaml.Node) -> dict[str, Any]:
    vals: dict[str, Any] = {}
    m = r.mapping(
        node, "nvml", ("enabled", "library", "call_timeout_s", "unexplained_memory_slack_bytes")
    )
    if "enabled" in m:
        vals["nvml_enabled"] = r.boolean(m["enabled"][1], "nvml.enabled")
    if "call_timeout_s" in m:
        timeout_node = m["call_timeout_s"][1]
        timeout = r.number(timeout_node, "nvml.call_timeout_s")
        if not 0 < timeout <= 600:
            raise r.err(
                timeout_node, "nvml.call_timeout_s", f"must be in (0, 600], got {timeout:g}"
            )
        vals["nvml_call_timeout_s"] = timeout
    if "unexplained_memory_slack_bytes" in m:
        vals["nvml_unexplained_slack_bytes"] = r.integer(
            m["unexplained_memory_slack_bytes"][1], "nvml.unexplained_memory_slack_bytes", 0
        )
    if "library" in m:
        lib = r.string(m["library"][1], "nvml.library")
        if "/" in lib:  # a bare name is found by the dynamic loader's own trusted paths
            r.refer(m["library"][1], "nvml.library", "file", lib)
        vals["nvml_library"] = lib
    return vals


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
