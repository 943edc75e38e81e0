"""``enforcement:`` configuration section (docs/config.md, docs/operations.md).

Example::

    enforcement:
      mode: observe              # or terminate; the default for every job
      grace_s: 10                # SIGTERM, then SIGKILL after this many seconds
      auto_disable_source: false # also comment out the cron line / disable the unit
      quarantine_unknown_exe: false
      dry_run: false             # decide and record, never signal or change anything
      protect:                   # never signalled, whatever the verdict
        - "*/sanctioned_pipeline/*"          # a glob over the command line
        - {exe: "/usr/bin/Xorg"}
        - {user: postgres}
        - {origin: {cron_file: /etc/cron.d/pipeline}}   # its jobs and the source itself
      gpu_open: off              # audit | enforce: deny a rogue training job the GPU nodes
      gpu_devices: ['/dev/nvidia[0-9]*', /dev/nvidiactl, /dev/nvidia-uvm]
      rules:                     # first match wins; overrides the defaults above
        - name: legacy-cron
          origin_kind: cron
          cmdline: "*train_weekly.py*"
          mode: terminate
          auto_disable_source: true
        - {name: gpu-audit, user: alice, gpu_open: audit}
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import yaml

from ..model import origin_kinds
from . import datatypes
from .base import (
    NodeReader,
    Regex,
    build,
    construct,
    keys,
    read,
    required,
    setting,
)
from .origins import OriginPin, parse_origin_pin

Mode = Literal["observe", "terminate"]
MODES: tuple[Mode, ...] = get_args(Mode)
MAX_GRACE_S = 3600.0
GpuOpen = Literal["off", "audit", "enforce"]
GPU_OPEN_MODES: tuple[GpuOpen, ...] = get_args(GpuOpen)
#: The NVIDIA device nodes a CUDA initialisation opens (docs/operations.md, "GPU open").
DEFAULT_GPU_DEVICES = ("/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm")

_mode = datatypes.choice(MODES, "must be observe or terminate")
_gpu_open = datatypes.choice(GPU_OPEN_MODES, "must be off, audit or enforce")


def _device_glob(r: NodeReader, node: yaml.Node, key: str) -> str:
    """An absolute path or glob naming device nodes (``/dev/nvidia[0-9]*``)."""
    pattern = datatypes.glob(r, node, key)
    if not pattern.startswith("/"):
        raise r.err(node, key, f"must be an absolute path or glob (/dev/nvidia0), got {pattern!r}")
    return pattern


def _device_globs(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """A non-empty list of device paths or globs: an empty one would deny nothing."""
    out = datatypes.tuple_of(_device_glob)(r, node, key)
    if not out:
        raise r.err(node, key, "must name at least one device node (an empty list denies nothing)")
    return out


@dataclass(frozen=True)
class Protect:
    """One ``protect:`` entry. A process matching every set process field is never
    signalled, and neither its job's source; an ``origin`` entry protects every job of
    that origin and the source itself (its cron line, unit...) from every action.

    Attributes:
        cmdline: fnmatch glob over the space-joined command line.
        cmdline_regex: RE2 regex searched in the space-joined command line.
        exe: fnmatch glob over the ``/proc/PID/exe`` target.
        user: User name of the process.
        origin: An origin pin (the keys of ``sanctioned[].origin``).
        text: The entry as written, for messages.
    """

    cmdline: str | None = setting(None, datatypes.glob)
    cmdline_regex: Regex | None = setting(None, datatypes.regex)
    exe: str | None = setting(None, datatypes.glob)
    user: str | None = setting(None, datatypes.user)
    origin: OriginPin | None = setting(None, parse_origin_pin)
    text: str = ""

    @property
    def names_processes(self) -> bool:
        """True when the entry has a process field (else it names only an origin)."""
        return any(v is not None for v in (self.cmdline, self.cmdline_regex, self.exe, self.user))

    def matches(self, cmdline: Sequence[str], exe: str | None, user: str | None) -> bool:
        """True when the entry names processes and every process field set matches."""
        if not self.names_processes:
            return False
        joined = " ".join(cmdline)
        if self.cmdline is not None and not fnmatch.fnmatchcase(joined, self.cmdline):
            return False
        if self.cmdline_regex is not None and not self.cmdline_regex.search(joined):
            return False
        if self.exe is not None and not fnmatch.fnmatchcase(exe or "", self.exe):
            return False
        return self.user is None or self.user == user


@dataclass(frozen=True)
class EnforcementRule:
    """One ``rules:`` entry: per-job overrides of mode and source disabling.

    A rule applies when every match field that is set matches the job (its root's
    command line, its origin kind, its user). Unset overrides fall back to the defaults.

    Attributes:
        name: Shown in action records.
        cmdline: fnmatch glob over the job's space-joined command line.
        cmdline_regex: RE2 regex searched in it.
        origin_kind: One of the origin kinds (``cron``, ``systemd``...).
        user: The job's user.
        mode: ``observe`` or ``terminate``; None keeps the default.
        auto_disable_source: Override of the default; None keeps it.
        gpu_open: ``off``, ``audit`` or ``enforce`` for the jobs it matches; None keeps
            the default.
    """

    name: str = required(datatypes.text)
    cmdline: str | None = setting(None, datatypes.glob)
    cmdline_regex: Regex | None = setting(None, datatypes.regex)
    origin_kind: str | None = setting(None, datatypes.text)
    user: str | None = setting(None, datatypes.user)
    mode: Mode | None = setting(None, _mode)
    auto_disable_source: bool | None = setting(None, datatypes.boolean)
    gpu_open: GpuOpen | None = setting(None, _gpu_open)

    def matches(self, cmdline: Sequence[str], origin_kind: str, user: str | None) -> bool:
        """True when every match field that is set matches the job."""
        joined = " ".join(cmdline)
        if self.cmdline is not None and not fnmatch.fnmatchcase(joined, self.cmdline):
            return False
        if self.cmdline_regex is not None and not self.cmdline_regex.search(joined):
            return False
        if self.origin_kind is not None and self.origin_kind != origin_kind:
            return False
        return self.user is None or self.user == user


@dataclass(frozen=True)
class Decision:
    """What the enforcement settings say about one job."""

    mode: Mode
    auto_disable_source: bool
    rule: str | None
    gpu_open: GpuOpen = "off"


def _protect(r: NodeReader, node: yaml.Node, key: str) -> Protect:
    """A glob over the command line, or a mapping of match fields (at least one)."""
    if isinstance(node, yaml.ScalarNode):
        cmdline = datatypes.glob(r, node, key)
        return Protect(cmdline=cmdline, text=cmdline)
    m = r.mapping(node, key, keys(Protect))
    if not m:
        # Emptied by unknown keys: their errors (with the allowed keys) say it all.
        needs = r.err(node, key, f"needs one of {', '.join(keys(Protect))}")
        raise r.misspelt(key) or needs
    vals = read(Protect, r, m, key)
    pin = vals.get("origin")
    if isinstance(pin, OriginPin) and pin.any:
        raise r.err(
            m["origin"][1], f"{key}.origin", "'any: true' would protect every job: name an origin"
        )
    text = ", ".join(
        f"{k}={{{v.text()}}}" if isinstance(v, OriginPin) else f"{k}={getattr(v, 'pattern', v)}"
        for k, v in vals.items()
    )
    return construct(Protect, {**vals, "text": text})


def _rule(r: NodeReader, node: yaml.Node, key: str) -> EnforcementRule:
    """A rule with a name, a match field and something to change."""
    m = r.mapping(node, key, keys(EnforcementRule))
    # A check that a key is absent defers to an unknown key that looks like it.
    if "name" not in m:
        raise r.misspelt(key, "name") or r.err(node, key, "needs a name")
    matches = ("cmdline", "cmdline_regex", "origin_kind", "user")
    if not any(k in m for k in matches):
        needs = r.err(node, key, f"needs at least one of {', '.join(matches)}")
        raise r.misspelt(key, *matches) or needs
    changes = ("mode", "auto_disable_source", "gpu_open")
    if not any(k in m for k in changes):
        needs = r.err(
            node, key, "needs mode, auto_disable_source or gpu_open (else it changes nothing)"
        )
        raise r.misspelt(key, *changes) or needs
    rule = construct(EnforcementRule, read(EnforcementRule, r, m, key))
    # Checked after every value was read, as the released parser did (same first error).
    names = [cls.kind for cls in origin_kinds()]
    if rule.origin_kind is not None and rule.origin_kind not in names:
        raise r.err(
            m["origin_kind"][1],
            f"{key}.origin_kind",
            f"one of {', '.join(names)}, got {rule.origin_kind!r}",
        )
    return rule


@dataclass(frozen=True)
class EnforcementSettings:
    """What the daemon may do about rogue jobs.

    Attributes:
        mode: ``observe`` (alert only) or ``terminate``.
        grace_s: Seconds between SIGTERM and SIGKILL (at most :data:`MAX_GRACE_S`: a
            SIGKILL that never comes leaves the rogue running).
        protect: Processes never signalled, in any mode.
        rules: Per-job overrides, first match wins.
        auto_disable_source: In terminate mode, also disable the job's source.
        quarantine_unknown_exe: When the source cannot be named (orphan, unknown),
            rename the job's script or executable so nothing can start it again.
        dry_run: Decide and record every action as a dry run; change nothing.
        command_prefix: Prepended to every ``systemctl``/``crontab`` command
            (e.g. ``[nsenter, -t, PID, -p, -m]`` to reach a manager in a namespace).
        backup_dir: Where backups of changed files go; None means
            ``<daemon.state_dir>/backups``.
        gpu_open: ``off``, ``audit`` (record each would-be denial) or ``enforce``: a
            rogue training job's processes are put under a device rule that denies
            them :attr:`gpu_devices` (watchdog/actions/gpudeny.py).
        gpu_devices: Absolute paths or globs of the device nodes denied.
    """

    mode: Mode = setting("observe", _mode)
    grace_s: float = setting(
        10.0, datatypes.non_negative_s(MAX_GRACE_S, too_low="must not be negative")
    )
    protect: tuple[Protect, ...] = setting((), datatypes.each_of(_protect))
    rules: tuple[EnforcementRule, ...] = setting((), datatypes.each_of(_rule))
    auto_disable_source: bool = setting(False, datatypes.boolean)
    quarantine_unknown_exe: bool = setting(False, datatypes.boolean)
    dry_run: bool = setting(False, datatypes.boolean)
    command_prefix: tuple[str, ...] = setting((), datatypes.texts)
    backup_dir: str | None = setting(None, datatypes.text)
    gpu_open: GpuOpen = setting("off", _gpu_open)
    gpu_devices: tuple[str, ...] = setting(DEFAULT_GPU_DEVICES, _device_globs)

    def decide(self, cmdline: Sequence[str], origin_kind: str, user: str | None) -> Decision:
        """The mode, source-disabling and GPU-open choice for one job (first matching
        rule wins)."""
        for rule in self.rules:
            if rule.matches(cmdline, origin_kind, user):
                return Decision(
                    rule.mode or self.mode,
                    self.auto_disable_source
                    if rule.auto_disable_source is None
                    else rule.auto_disable_source,
                    rule.name,
                    rule.gpu_open or self.gpu_open,
                )
        return Decision(self.mode, self.auto_disable_source, None, self.gpu_open)


def parse_enforcement(r: NodeReader, node: yaml.Node) -> EnforcementSettings:
    """Validate the ``enforcement:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, an invalid mode, regex or origin kind.
    """
    return build(EnforcementSettings, r, node, "enforcement")
