"""``queue:`` configuration section (docs/queue.md). Owned by the queue work.

Example::

    queue:
      slurm: auto            # true, false, or auto (squeue on PATH and slurm.conf present)
      command: [/usr/local/bin/gpuq, list, --json-lines]   # a home-grown queue
      command_timeout_s: 10
      action: hold           # none | hold | cancel; only in enforcement terminate mode
      sanctioned:
        - {name: nightly, user: svc-train, account: ml-research, job_name: "retrain-*"}
"""

from __future__ import annotations

import fnmatch
import shlex
from dataclasses import dataclass
from functools import partial
from typing import Literal, Protocol

import yaml

from watchdog.config.base import NodeReader

QueueAction = Literal["none", "hold", "cancel"]
RULE_KEYS = ("user", "account", "partition", "job_name")


class Queued(Protocol):
    """What :meth:`QueueRule.matches` reads of a queue entry
    (``watchdog.queue.model.QueueEntry``)."""

    @property
    def user(self) -> str | None: ...

    @property
    def account(self) -> str | None: ...

    @property
    def partition(self) -> str | None: ...

    @property
    def name(self) -> str | None: ...


@dataclass(frozen=True)
class QueueRule:
    """One ``queue.sanctioned`` entry: every key given must match (fnmatch globs).

    Attributes:
        name: Rule name shown in findings and audit records.
        user: Glob over the owner's user name.
        account: Glob over the account.
        partition: Glob over the partition.
        job_name: Glob over the job name.
        line: Line in the config file.
    """

    name: str
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    job_name: str | None = None
    line: int | None = None

    def matches(self, entry: Queued) -> bool:
        """True when every pinned key matches; an unknown value never matches a pin."""
        pairs = (
            (self.user, entry.user),
            (self.account, entry.account),
            (self.partition, entry.partition),
            (self.job_name, entry.name),
        )
        return all(
            glob is None or (value is not None and fnmatch.fnmatchcase(value, glob))
            for glob, value in pairs
        )


@dataclass(frozen=True)
class QueueSettings:
    """Which GPU queues to watch and what is sanctioned there.

    Attributes:
        slurm: Watch Slurm's queue (``squeue``); None means when ``squeue`` is on PATH.
        command: argv of a command printing one JSON object per line for a home-grown
            queue (docs/queue.md), or None.
        command_timeout_s: Wall-clock limit for ``command`` and each Slurm query.
        sanctioned: Rules; an entry matching any of them is sanctioned.
        action: What to do about an unsanctioned Slurm entry when enforcement mode is
            ``terminate``: ``none``, ``hold`` (pending entries) or ``cancel``.
    """

    slurm: bool | None = None
    command: tuple[str, ...] | None = None
    command_timeout_s: float = 10.0
    sanctioned: tuple[QueueRule, ...] = ()
    action: QueueAction = "none"

    def rule_for(self, entry: Queued) -> QueueRule | None:
        """The first rule sanctioning ``entry``, or None."""
        return next((r for r in self.sanctioned if r.matches(entry)), None)


def _rule(r: NodeReader, node: yaml.Node, key: str) -> QueueRule:
    m = r.mapping(node, key, ("name", *RULE_KEYS))
    if "name" not in m:
        raise r.err(node, f"{key}.name", "required key missing")
    if not any(k in m for k in RULE_KEYS):
        raise r.err(node, key, f"needs at least one of {', '.join(RULE_KEYS)}")
    vals = {k: r.glob(m[k][1], f"{key}.{k}") for k in RULE_KEYS if k in m}
    return QueueRule(
        name=r.string(m["name"][1], f"{key}.name"), line=node.start_mark.line + 1, **vals
    )


def parse_queue(r: NodeReader, node: yaml.Node) -> QueueSettings:
    """Validate the ``queue:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, an unknown action, rules without a
            name or without any pinned key, duplicate rule names, an empty command.
    """
    allowed = ("slurm", "command", "command_timeout_s", "sanctioned", "action")
    m = r.mapping(node, "queue", allowed)
    vals: dict[str, object] = {}
    if "slurm" in m:
        v = m["slurm"][1]
        if (
            isinstance(v, yaml.ScalarNode)
            and v.tag == "tag:yaml.org,2002:str"
            and v.value == "auto"
        ):
            vals["slurm"] = None
        else:
            try:
                vals["slurm"] = r.boolean(v, "queue.slurm")
            except ValueError:
                raise r.err(v, "queue.slurm", "expected true, false or auto") from None
    if "command" in m:
        v = m["command"][1]
        if isinstance(v, yaml.SequenceNode):
            argv = r.strings(v, "queue.command")
        else:
            try:
                argv = tuple(shlex.split(r.string(v, "queue.command")))
            except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
                raise r.err(
                    v, "queue.command", f"cannot split it as a shell would: {exc}"
                ) from None
        if not argv:
            raise r.err(v, "queue.command", "must not be empty")
        r.refer(v, "queue.command", "program", argv[0])  # root runs it every tick
        vals["command"] = argv
    if "command_timeout_s" in m:
        t = r.number(m["command_timeout_s"][1], "queue.command_timeout_s")
        if t <= 0:
            raise r.err(m["command_timeout_s"][1], "queue.command_timeout_s", "must be positive")
        if t > 600:  # the command runs every tick; a longer hang has stopped the queue check
            raise r.err(
                m["command_timeout_s"][1],
                "queue.command_timeout_s",
                f"must be at most 600 s, got {t:g}",
            )
        vals["command_timeout_s"] = t
    if "action" in m:
        action = r.string(m["action"][1], "queue.action")
        if action not in ("none", "hold", "cancel"):
            raise r.err(m["action"][1], "queue.action", "must be none, hold or cancel")
        vals["action"] = action
    if "sanctioned" in m:
        items = r.sequence(m["sanctioned"][1], "queue.sanctioned")
        # A failing rule is recorded and the others still checked (one run, every error).
        parsed = [
            r.attempt(partial(_rule, r, n, f"queue.sanctioned[{i}]")) for i, n in enumerate(items)
        ]
        rules = [rule for rule in parsed if rule is not None]
        seen: set[str] = set()
        for i, rule in enumerate(parsed):
            if rule is None:
                continue
            if rule.name in seen:
                raise r.err(
                    items[i], f"queue.sanctioned[{i}].name", f"duplicate rule name {rule.name!r}"
                )
            seen.add(rule.name)
        vals["sanctioned"] = tuple(rules)
    return QueueSettings(**vals)  # type: ignore[arg-type]
