"""Judge jobs against the allowlist.

A rule sanctions a job only when its command line, its user AND its origin match: the
ghost in the motivating incident ran the pipeline's own script, from a forgotten cron
entry. ``max_instances`` caps how many jobs one rule sanctions at once; the oldest win
and the rest are ``excess``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase

from ..config import Config, OriginPin, Rule
from ..config.origins import pin_keys
from ..model import Job, Origin
from .jobs import ignore_match_job


def cmdline_matches(rule: Rule, cmdline: Sequence[str]) -> bool:
    """True when the rule's ``cmdline`` glob or ``cmdline_regex`` matches the joined line."""
    text = " ".join(cmdline)
    if rule.cmdline_regex is not None:
        return rule.cmdline_regex.search(text) is not None
    return rule.cmdline is not None and fnmatchcase(text, rule.cmdline)


def _glob(value: object, pattern: str) -> bool:
    return isinstance(value, str) and fnmatchcase(value, pattern)


def origin_mismatch(pin: OriginPin, origin: Origin) -> str | None:
    """Why ``origin`` does not satisfy ``pin``, or None when it does.

    The origin record answers which keys its kind has and their values
    (:meth:`~watchdog.model.Origin.pin_values`): a key the record does not have never
    matches, so a pin names one kind. A key that needs another (``cron_line`` beside
    ``cron_file``) is compared as it is, with that key; every other key is an fnmatch
    glob.

    Returns:
        A short phrase such as ``"origin must be systemd unit 'train.service'"``.
    """
    if pin.any:
        return None
    values = origin.pin_values()
    owners = pin_keys()
    keys = pin.set_keys()
    for key, pattern in keys.items():
        spec = owners[key].PINS[key]
        if spec.needs is not None:
            continue  # judged with the key it needs
        beside = {k: v for k, v in keys.items() if owners[k].PINS[k].needs == key}
        if beside:
            where = repr(pattern) + "".join(
                f" {owners[k].PINS[k].noun} {v}" for k, v in beside.items()
            )
            same = all(values.get(k) == v for k, v in beside.items())
            if not (_glob(values.get(key), str(pattern)) and same):
                return f"origin must be {spec.noun} {where}"
            continue
        value = values.get(key)
        unknown = origin.pin_unknown()
        if key in values and value is None and unknown is not None:
            return f"origin must be {spec.noun} {pattern!r}; unknown: {unknown}"
        if not _glob(value, str(pattern)):
            return f"origin must be {spec.noun} {pattern!r}"
    return None


def rule_mismatch(rule: Rule, job: Job) -> list[str]:
    """Every reason ``rule`` does not sanction ``job``; empty when it does."""
    why = []
    if not cmdline_matches(rule, job.cmdline):
        why.append("command line differs")
    if rule.user is not None and job.user != rule.user:
        why.append(f"user must be {rule.user!r}, is {job.user!r}")
    miss = origin_mismatch(rule.origin, job.origin)
    if miss is not None and any(
        origin_mismatch(rule.origin, alt) is None for alt in job.origin.alternatives()
    ):
        # Identical lines: the one the rule pins can as well have started it. Which
        # fired cannot be told, so it is not called rogue for it (never a false alarm on
        # the pipeline); the guard keeps it from being a target either way.
        miss = None
    if miss is not None:
        why.append(miss)
    elif (owned := job.origin.owner_pin(rule.origin.set_keys())) is not None:
        # A source its owner alone can name (a user unit): only a rule that also pins
        # that user may sanction it.
        owner, refusal = owned
        if rule.user is None or owner != rule.user:
            why.append(refusal)
    return why


def sanctioned_since(matched_at: float | None) -> str:
    """When a kept sanctioned process became sanctioned, as its reasons say it.

    Args:
        matched_at: POSIX time a rule first matched it while it ran, after it had been
            judged rogue (or excess); None when it was sanctioned at the first look.

    Returns:
        ``when it started``, or ``from 2026-12-07T05:17:23Z (matched while it ran; it
        was rogue before)`` (ISO 8601 UTC, as the product's other times).
    """
    if matched_at is None:
        return "when it started"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(matched_at))
    return f"from {at} (matched while it ran; it was rogue before)"


def judge(
    jobs: Sequence[Job],
    config: Config,
    kept: Mapping[tuple[int, int], str] | None = None,
    matched: Mapping[tuple[int, int], float] | None = None,
) -> list[Job]:
    """Each job with its ``verdict``, ``rule`` and ``reason`` decided.

    A job whose root was sanctioned before (``kept``: the process itself, or a worker of
    a sanctioned job whose launcher exited) stays sanctioned for its life, whatever the
    allowlist or its origin's line or unit says now: what made it legitimate was decided
    when it started. It still counts toward its rule's ``max_instances``.

    Args:
        jobs: Jobs with origins resolved, ordered oldest first (instance counting
            keeps the oldest ``max_instances`` jobs of a rule).
        config: The allowlist and ignore list.
        kept: ``(PID, start ticks) -> rule`` of processes sanctioned earlier.
        matched: ``(PID, start ticks) -> POSIX time`` a rule first matched a kept one
            that had been judged rogue before (:func:`sanctioned_since`): its reason
            says so rather than "when it started".

    Returns:
        New jobs, in the same order (the given ones are frozen and left as they were).
    """
    kept = kept or {}
    counts: dict[str, list[int]] = {}  # rule -> root PIDs counted against it, oldest first
    return [_judged(job, config, kept, matched or {}, counts) for job in jobs]


def _judged(
    job: Job,
    config: Config,
    kept: Mapping[tuple[int, int], str],
    matched_at: Mapping[tuple[int, int], float],
    counts: dict[str, list[int]],
) -> Job:
    """One job's verdict; ``counts`` carries the instances seen so far, per rule."""
    entry = ignore_match_job(job, config.ignore)
    if entry is not None:
        return replace(
            job, verdict="ignored", rule=entry.name, reason=f"ignore entry {entry.name!r}"
        )
    was = kept.get((job.root_pid, job.start_ticks))
    if was is not None:
        counts.setdefault(was, []).append(job.root_pid)
        now_why = not_sanctioned_now(job, config)
        since = sanctioned_since(matched_at.get((job.root_pid, job.start_ticks)))
        reason = f"sanctioned by rule {was!r} {since}; kept for its life" + (
            f" (now: {now_why})" if now_why else ""
        )
        return replace(job, verdict="sanctioned", rule=was, reason=reason)
    matched = None
    nearest: tuple[Rule, list[str]] | None = None
    for rule in config.sanctioned:
        why = rule_mismatch(rule, job)
        if not why:
            matched = rule
            break
        if nearest is None and "command line differs" not in why:
            nearest = (rule, why)
    if matched is None:
        if nearest is not None:
            rule, why = nearest
            reason = (
                f"not sanctioned: rule {rule.name!r} matches the command line but " + "; ".join(why)
            )
        elif config.sanctioned:
            reason = "not sanctioned: no rule matches the command line"
        else:
            reason = "not sanctioned: the allowlist is empty"
        return replace(job, verdict="rogue", rule=None, reason=reason)
    earlier = counts.setdefault(matched.name, [])
    earlier.append(job.root_pid)
    if matched.max_instances is not None and len(earlier) > matched.max_instances:
        older = ", ".join(str(pid) for pid in earlier[: matched.max_instances])
        reason = (
            f"rule {matched.name!r} allows {matched.max_instances} instance(s); this is "
            f"instance {len(earlier)} (running: root PIDs {older})"
        )
        return replace(job, verdict="excess", rule=matched.name, reason=reason)
    return replace(
        job, verdict="sanctioned", rule=matched.name, reason=f"matches rule {matched.name!r}"
    )


def not_sanctioned_now(job: Job, config: Config) -> str | None:
    """Why a kept sanctioned job would not be sanctioned if it started now, or None when
    a rule still matches it."""
    nearest = None
    for rule in config.sanctioned:
        why = rule_mismatch(rule, job)
        if not why:
            return None
        if nearest is None and "command line differs" not in why:
            nearest = f"rule {rule.name!r}: " + "; ".join(why)
    return nearest or "no rule matches its command line"
