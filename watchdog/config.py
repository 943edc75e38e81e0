"""The YAML configuration: allowlist, training detection, ignore list, host paths.

Validation walks the YAML node tree (not the loaded dict) so every error names the file,
the line and the key path, e.g. ``/etc/rogue-watchdog/config.yaml:12: sanctioned[0].origin:
unknown key 'systemd'``. An empty or absent file is valid: nothing is sanctioned.
Reference: docs/config.md; the shipped example is config/example.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from watchdog.actions.services_settings import ServiceSettings, parse_services
from watchdog.actions.settings import EnforcementSettings, parse_enforcement
from watchdog.configbase import ConfigError, NodeReader
from watchdog.daemon.settings import AlertSettings, DaemonSettings, parse_alerts, parse_daemon
from watchdog.queue.settings import QueueSettings, parse_queue
from watchdog.safeio import read_regular
from watchdog.sources.gpulibs import DEFAULT_GPU_LIBRARIES
from watchdog.weights.settings import ShipGate, parse_ship_gates

__all__ = [
    "Config",
    "ConfigError",
    "IgnoreEntry",
    "OriginPin",
    "Paths",
    "Rule",
    "load_config",
    "parse_config",
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
ORIGIN_KEYS = (
    "any",
    "systemd_unit",
    "cron_file",
    "cron_line",
    "slurm_account",
    "slurm_job_name",
    "container_image",
)


_ORIGIN_KIND = {
    "systemd_unit": "systemd",
    "cron_file": "cron",
    "cron_line": "cron",
    "slurm_account": "slurm",
    "slurm_job_name": "slurm",
    "container_image": "container",
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


@dataclass(frozen=True)
class Rule:
    """One ``sanctioned:`` entry.

    Attributes:
        name: Rule name shown in verdicts.
        cmdline: fnmatch glob over the space-joined command line, or None.
        cmdline_regex: Compiled regex searched in the joined command line, or None.
        user: Required user name of the job's root process, or None for any.
        origin: The origin the job must have.
        max_instances: How many jobs may match at once; None for no cap.
        line: Line of the rule in the config file (for messages).
    """

    name: str
    cmdline: str | None
    cmdline_regex: re.Pattern[str] | None
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
    """The validated configuration."""

    source: str = "<defaults>"
    sanctioned: tuple[Rule, ...] = ()
    launchers: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in DEFAULT_LAUNCHERS)
    device_glob: str = DEFAULT_DEVICE_GLOB
    gpu_libraries: tuple[str, ...] = DEFAULT_GPU_LIBRARIES
    ignore: tuple[IgnoreEntry, ...] = tuple(IgnoreEntry(**e) for e in DEFAULT_IGNORE)
    nvml_enabled: bool = True
    nvml_library: str | None = None
    paths: Paths = field(default_factory=Paths)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    enforcement: EnforcementSettings = field(default_factory=EnforcementSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    services: ServiceSettings = field(default_factory=ServiceSettings)
    ship_gates: tuple[ShipGate, ...] = ()


# -- sections --------------------------------------------------------------------


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
        else:
            vals[name] = r.string(v, sub)
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


def _rule(r: NodeReader, node: yaml.Node, key: str) -> Rule:
    allowed = ("name", "cmdline", "cmdline_regex", "user", "origin", "max_instances")
    m = r.mapping(node, key, allowed)
    for required in ("name", "origin"):
        if required not in m:
            why = (
                " (a rule without an origin would sanction a ghost running the same script;"
                " write 'origin: {any: true}' to allow any origin)"
                if required == "origin"
                else ""
            )
            raise r.err(node, f"{key}.{required}", f"required key missing{why}")
    if "cmdline" in m and "cmdline_regex" in m:
        raise r.err(m["cmdline_regex"][0], key, "use cmdline or cmdline_regex, not both")
    if "cmdline" not in m and "cmdline_regex" not in m:
        raise r.err(node, f"{key}.cmdline", "required key missing (or give cmdline_regex)")
    return Rule(
        name=r.string(m["name"][1], f"{key}.name"),
        cmdline=r.string(m["cmdline"][1], f"{key}.cmdline") if "cmdline" in m else None,
        cmdline_regex=(
            r.regex(m["cmdline_regex"][1], f"{key}.cmdline_regex") if "cmdline_regex" in m else None
        ),
        user=r.string(m["user"][1], f"{key}.user") if "user" in m else None,
        origin=_origin(r, m["origin"][1], f"{key}.origin"),
        max_instances=(
            r.integer(m["max_instances"][1], f"{key}.max_instances", 1)
            if "max_instances" in m
            else None
        ),
        line=node.start_mark.line + 1,
    )


def _ignore(r: NodeReader, node: yaml.Node, key: str) -> IgnoreEntry:
    if isinstance(node, yaml.ScalarNode):
        name = r.string(node, key)
        return IgnoreEntry(name=name, exe=name)
    m = r.mapping(node, key, ("name", "exe", "cmdline"))
    if "name" not in m:
        raise r.err(node, f"{key}.name", "required key missing")
    if "exe" not in m and "cmdline" not in m:
        raise r.err(node, key, "needs exe or cmdline")
    return IgnoreEntry(
        name=r.string(m["name"][1], f"{key}.name"),
        exe=r.string(m["exe"][1], f"{key}.exe") if "exe" in m else None,
        cmdline=r.string(m["cmdline"][1], f"{key}.cmdline") if "cmdline" in m else None,
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
}
TOP_LEVEL_KEYS = ("sanctioned", "training", "ignore", "nvml", "paths", *SECTIONS)


def parse_config(text: str, source: str = "<string>") -> Config:
    """Validate configuration text.

    Args:
        text: YAML document.
        source: File name used in error messages.

    Returns:
        The validated :class:`Config`; defaults fill every absent key.

    Raises:
        ConfigError: YAML syntax errors, unknown keys, wrong types, invalid regular
            expressions, rules without an origin; the message names file, line and key.
    """
    r = NodeReader(source)
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
    top = r.mapping(root, "", TOP_LEVEL_KEYS)
    vals: dict[str, Any] = {"source": source}
    if "sanctioned" in top:
        rules = [
            _rule(r, n, f"sanctioned[{i}]")
            for i, n in enumerate(r.sequence(top["sanctioned"][1], "sanctioned"))
        ]
        seen: dict[str, int] = {}
        for i, rule in enumerate(rules):
            if rule.name in seen:
                raise ConfigError(
                    source, rule.line, f"sanctioned[{i}].name", f"duplicate rule name {rule.name!r}"
                )
            seen[rule.name] = i
        vals["sanctioned"] = tuple(rules)
    if "training" in top:
        m = r.mapping(top["training"][1], "training", ("launchers", "device_glob", "gpu_libraries"))
        if "launchers" in m:
            vals["launchers"] = tuple(
                r.regex(n, f"training.launchers[{i}]")
                for i, n in enumerate(r.sequence(m["launchers"][1], "training.launchers"))
            )
        if "device_glob" in m:
            vals["device_glob"] = r.string(m["device_glob"][1], "training.device_glob")
        if "gpu_libraries" in m:
            vals["gpu_libraries"] = _gpu_libraries(r, m["gpu_libraries"][1])
    if "ignore" in top:
        vals["ignore"] = tuple(
            _ignore(r, n, f"ignore[{i}]")
            for i, n in enumerate(r.sequence(top["ignore"][1], "ignore"))
        )
    if "nvml" in top:
        m = r.mapping(top["nvml"][1], "nvml", ("enabled", "library"))
        if "enabled" in m:
            vals["nvml_enabled"] = r.boolean(m["enabled"][1], "nvml.enabled")
        if "library" in m:
            vals["nvml_library"] = r.string(m["library"][1], "nvml.library")
    if "paths" in top:
        vals["paths"] = _paths(r, top["paths"][1])
    for name, section in SECTIONS.items():
        if name in top:
            vals[name] = section(r, top[name][1])
    return Config(**vals)


def load_config(path: str | Path | None) -> Config:
    """Read and validate a configuration file.

    Args:
        path: File to read; None gives the defaults (nothing sanctioned).

    Returns:
        The validated configuration.

    Raises:
        ConfigError: The file is unreadable, not UTF-8, or invalid (see
            :func:`parse_config`).
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
    return parse_config(text, p)
