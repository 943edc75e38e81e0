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
      rules:                     # first match wins; overrides the defaults above
        - name: legacy-cron
          origin_kind: cron
          cmdline: "*train_weekly.py*"
          mode: terminate
          auto_disable_source: true
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import yaml

from watchdog.config.base import NodeReader, Regex

Mode = Literal["observe", "terminate"]
MODES: tuple[Mode, ...] = ("observe", "terminate")
ORIGIN_KINDS = (
    "cron", "systemd", "slurm", "container", "kubernetes", "shell", "at", "supervisor",
    "orphan", "unknown",
)  # fmt: skip


@dataclass(frozen=True)
class Protect:
    """One ``protect:`` entry: a process matching every set field is never signalled.

    Attributes:
        cmdline: fnmatch glob over the space-joined command line.
        cmdline_regex: RE2 regex searched in the space-joined command line.
        exe: fnmatch glob over the ``/proc/PID/exe`` target.
        user: User name of the process.
        text: The entry as written, for messages.
    """

    cmdline: str | None = None
    cmdline_regex: Regex | None = None
    exe: str | None = None
    user: str | None = None
    text: str = ""

    def matches(self, cmdline: Sequence[str], exe: str | None, user: str | None) -> bool:
        """True when every field that is set matches this process."""
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
    """

    name: str
    cmdline: str | None = None
    cmdline_regex: Regex | None = None
    origin_kind: str | None = None
    user: str | None = None
    mode: Mode | None = None
    auto_disable_source: bool | None = None

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


@dataclass(frozen=True)
class EnforcementSettings:
    """What the daemon may do about rogue jobs.

    Attributes:
        mode: ``observe`` (alert only) or ``terminate``.
        grace_s: Seconds between SIGTERM and SIGKILL.
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
    """

    mode: Mode = "observe"
    grace_s: float = 10.0
    protect: tuple[Protect, ...] = ()
    rules: tuple[EnforcementRule, ...] = ()
    auto_disable_source: bool = False
    quarantine_unknown_exe: bool = False
    dry_run: bool = False
    command_prefix: tuple[str, ...] = ()
    backup_dir: str | None = None

    def decide(self, cmdline: Sequence[str], origin_kind: str, user: str | None) -> Decision:
        """The mode and source-disabling choice for one job (first matching rule wins)."""
        for rule in self.rules:
            if rule.matches(cmdline, origin_kind, user):
                return Decision(
                    rule.mode or self.mode,
                    self.auto_disable_source
                    if rule.auto_disable_source is None
                    else rule.auto_disable_source,
                    rule.name,
                )
        return Decision(self.mode, self.auto_disable_source, None)


_KEYS = (
    "mode", "grace_s", "protect", "rules", "auto_disable_source", "quarantine_unknown_exe",
    "dry_run", "command_prefix", "backup_dir",
)  # fmt: skip
_RULE_KEYS = (
    "name", "cmdline", "cmdline_regex", "origin_kind", "user", "mode", "auto_disable_source",
)  # fmt: skip
_PROTECT_KEYS = ("cmdline", "cmdline_regex", "exe", "user")


def _mode(r: NodeReader, node: yaml.Node, key: str) -> Mode:
    mode = r.string(node, key)
    if mode not in MODES:
        raise r.err(node, key, "must be observe or terminate")
    return mode


def _protect(r: NodeReader, node: yaml.Node, key: str) -> Protect:
    if isinstance(node, yaml.ScalarNode):
        text = r.glob(node, key)
        return Protect(cmdline=text, text=text)
    m = r.mapping(node, key, _PROTECT_KEYS)
    if not m:
        raise r.err(node, key, f"needs one of {', '.join(_PROTECT_KEYS)}")
    vals: dict[str, object] = {}
    for name, (_, v) in m.items():
        sub = f"{key}.{name}"
        if name == "cmdline_regex":
            vals[name] = r.regex(v, sub)
        elif name == "user":
            vals[name] = r.user(v, sub)
        else:
            vals[name] = r.glob(v, sub)
    text = ", ".join(f"{k}={getattr(v, 'pattern', v)}" for k, v in vals.items())
    return Protect(**vals, text=text)  # type: ignore[arg-type]


def _rule(r: NodeReader, node: yaml.Node, key: str) -> EnforcementRule:
    m = r.mapping(node, key, _RULE_KEYS)
    if "name" not in m:
        raise r.err(node, key, "needs a name")
    if not any(k in m for k in ("cmdline", "cmdline_regex", "origin_kind", "user")):
        raise r.err(node, key, "needs at least one of cmdline, cmdline_regex, origin_kind, user")
    if not any(k in m for k in ("mode", "auto_disable_source")):
        raise r.err(node, key, "needs mode or auto_disable_source (else it changes nothing)")
    vals: dict[str, object] = {}
    for name, (_, v) in m.items():
        sub = f"{key}.{name}"
        if name == "cmdline_regex":
            vals[name] = r.regex(v, sub)
        elif name == "mode":
            vals[name] = _mode(r, v, sub)
        elif name == "auto_disable_source":
            vals[name] = r.boolean(v, sub)
        elif name == "cmdline":
            vals[name] = r.glob(v, sub)
        elif name == "user":
            vals[name] = r.user(v, sub)
        else:
            vals[name] = r.string(v, sub)
    if "origin_kind" in vals and vals["origin_kind"] not in ORIGIN_KINDS:
        raise r.err(m["origin_kind"][1], f"{key}.origin_kind", f"one of {', '.join(ORIGIN_KINDS)}")
    return EnforcementRule(**vals)  # type: ignore[arg-type]


MAX_GRACE_S = 3600.0


def parse_enforcement(r: NodeReader, node: yaml.Node) -> EnforcementSettings:
    """Validate the ``enforcement:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, an invalid mode, regex or origin kind.
    """
    m = r.mapping(node, "enforcement", _KEYS)
    vals: dict[str, object] = {}
    for name, (_, v) in m.items():
        key = f"enforcement.{name}"
        if name == "mode":
            vals[name] = _mode(r, v, key)
        elif name == "grace_s":
            grace = r.number(v, key)
            if grace < 0:
                raise r.err(v, key, "must not be negative")
            if grace > MAX_GRACE_S:  # a SIGKILL that never comes: the rogue keeps running
                raise r.err(v, key, f"must be at most {MAX_GRACE_S:g} s, got {v.value}")
            vals[name] = grace
        elif name == "protect":
            vals[name] = tuple(r.each(v, key, lambda item, sub: _protect(r, item, sub)))
        elif name == "rules":
            vals[name] = tuple(r.each(v, key, lambda item, sub: _rule(r, item, sub)))
        elif name in ("auto_disable_source", "quarantine_unknown_exe", "dry_run"):
            vals[name] = r.boolean(v, key)
        elif name == "command_prefix":
            vals[name] = r.strings(v, key)
        else:
            vals[name] = r.string(v, key)
    return EnforcementSettings(**vals)  # type: ignore[arg-type]
