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
from typing import Literal, Protocol, get_args

import yaml

from . import datatypes
from .base import (
    NodeReader,
    build,
    construct,
    keys,
    read,
    require,
    required,
    setting,
)

QueueAction = Literal["none", "hold", "cancel"]
QUEUE_ACTIONS: tuple[QueueAction, ...] = get_args(QueueAction)
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

    name: str = required(datatypes.text)
    user: str | None = setting(None, datatypes.glob)
    account: str | None = setting(None, datatypes.glob)
    partition: str | None = setting(None, datatypes.glob)
    job_name: str | None = setting(None, datatypes.glob)
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


def _rule(r: NodeReader, node: yaml.Node, key: str) -> QueueRule:
    m = r.mapping(node, key, keys(QueueRule))
    require(r, node, key, m, "name")
    if not any(k in m for k in RULE_KEYS):
        needs = r.err(node, key, f"needs at least one of {', '.join(RULE_KEYS)}")
        raise r.misspelt(key, *RULE_KEYS) or needs
    vals = read(QueueRule, r, m, key, order=(*RULE_KEYS, "name"))
    return construct(QueueRule, {**vals, "line": node.start_mark.line + 1})


def _rules(r: NodeReader, node: yaml.Node, key: str) -> tuple[QueueRule, ...]:
    """Rules with unique names; a failing rule is recorded and the others are still
    checked (one run, every error)."""
    items = r.sequence(node, key)
    parsed = [r.attempt(partial(_rule, r, n, f"{key}[{i}]")) for i, n in enumerate(items)]
    seen: set[str] = set()
    for i, rule in enumerate(parsed):
        if rule is None:
            continue
        if rule.name in seen:
            raise r.err(items[i], f"{key}[{i}].name", f"duplicate rule name {rule.name!r}")
        seen.add(rule.name)
    return tuple(rule for rule in parsed if rule is not None)


def _slurm(r: NodeReader, node: yaml.Node, key: str) -> bool | None:
    """``true``, ``false``, or ``auto`` (None: when ``squeue`` is on PATH)."""
    if (
        isinstance(node, yaml.ScalarNode)
        and node.tag == "tag:yaml.org,2002:str"
        and node.value == "auto"
    ):
        return None
    try:
        return r.boolean(node, key)
    except ValueError:
        got = f", got {node.value!r}" if isinstance(node, yaml.ScalarNode) else ""
        raise r.err(node, key, f"expected true, false or auto{got}") from None


def _command(r: NodeReader, node: yaml.Node, key: str) -> tuple[str, ...]:
    """An argv list, or a string split as a shell would; root runs it every tick, so the
    program is noted as one the daemon trusts."""
    if isinstance(node, yaml.SequenceNode):
        argv = datatypes.texts(r, node, key)
    else:
        try:
            argv = tuple(shlex.split(r.string(node, key)))
        except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
            raise r.err(node, key, f"cannot split it as a shell would: {exc}") from None
    if not argv:
        raise r.err(node, key, "must not be empty")
    r.refer(node, key, "program", argv[0])
    return argv


@dataclass(frozen=True)
class QueueSettings:
    """Which GPU queues to watch and what is sanctioned there.

    Attributes:
        slurm: Watch Slurm's queue (``squeue``); None means when ``squeue`` is on PATH.
        command: argv of a command printing one JSON object per line for a home-grown
            queue (docs/queue.md), or None.
        command_timeout_s: Wall-clock limit for ``command`` and each Slurm query (at
            most 600 s: the command runs every tick, a longer hang has stopped the check).
        sanctioned: Rules; an entry matching any of them is sanctioned.
        action: What to do about an unsanctioned Slurm entry when enforcement mode is
            ``terminate``: ``none``, ``hold`` (pending entries) or ``cancel``.
    """

    slurm: bool | None = setting(None, _slurm)
    command: tuple[str, ...] | None = setting(None, _command)
    command_timeout_s: float = setting(
        10.0,
        datatypes.positive_s(
            600.0, too_low="must be positive", too_high="must be at most 600 s, got {value:g}"
        ),
    )
    sanctioned: tuple[QueueRule, ...] = setting((), _rules)
    action: QueueAction = setting(
        "none", datatypes.choice(QUEUE_ACTIONS, "must be none, hold or cancel")
    )

    def rule_for(self, entry: Queued) -> QueueRule | None:
        """The first rule sanctioning ``entry``, or None."""
        return next((r for r in self.sanctioned if r.matches(entry)), None)


def parse_queue(r: NodeReader, node: yaml.Node) -> QueueSettings:
    """Validate the ``queue:`` section.

    Raises:
        ConfigError: Unknown keys, wrong types, an unknown action, rules without a
            name or without any pinned key, duplicate rule names, an empty command.
    """
    order = ("slurm", "command", "command_timeout_s", "action", "sanctioned")
    return build(QueueSettings, r, node, "queue", order=order)
