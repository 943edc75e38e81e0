"""Judge jobs against the allowlist.

A rule sanctions a job only when its command line, its user AND its origin match: the
ghost in the motivating incident ran the pipeline's own script, from a forgotten cron
entry. ``max_instances`` caps how many jobs one rule sanctions at once; the oldest win
and the rest are ``excess``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from watchdog.config import Config, OriginPin, Rule
from watchdog.model import (
    ContainerOrigin,
    CronOrigin,
    Job,
    KubernetesOrigin,
    Origin,
    SlurmOrigin,
    SystemdOrigin,
)
from watchdog.policy.jobs import ignore_match


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

    Returns:
        A short phrase such as ``"origin must be systemd unit 'train.service'"``.
    """
    if pin.any:
        return None
    o = origin
    if pin.systemd_unit is not None and not (
        isinstance(o, SystemdOrigin) and _glob(o.unit, pin.systemd_unit)
    ):
        return f"origin must be systemd unit {pin.systemd_unit!r}"
    if pin.cron_file is not None:
        where = repr(pin.cron_file) + (f" line {pin.cron_line}" if pin.cron_line else "")
        if not isinstance(o, CronOrigin) or not _glob(o.file, pin.cron_file):
            return f"origin must be cron file {where}"
        if pin.cron_line is not None and o.line != pin.cron_line:
            return f"origin must be cron file {where}"
    if pin.slurm_account is not None and not (
        isinstance(o, SlurmOrigin) and _glob(o.account, pin.slurm_account)
    ):
        return f"origin must be Slurm account {pin.slurm_account!r}"
    if pin.slurm_job_name is not None and not (
        isinstance(o, SlurmOrigin) and _glob(o.job_name, pin.slurm_job_name)
    ):
        return f"origin must be Slurm job name {pin.slurm_job_name!r}"
    if pin.container_image is not None and not (
        isinstance(o, ContainerOrigin) and _glob(o.image, pin.container_image)
    ):
        return f"origin must be container image {pin.container_image!r}"
    if pin.container_image_digest is not None and not (
        isinstance(o, ContainerOrigin) and _glob(o.image_id, pin.container_image_digest)
    ):
        return f"origin must be container image digest {pin.container_image_digest!r}"
    return _k8s_mismatch(pin, origin)


def _k8s_mismatch(pin: OriginPin, origin: Origin) -> str | None:
    """Why a Kubernetes origin fails the ``k8s_*`` keys of ``pin``, or None."""
    k = origin if isinstance(origin, KubernetesOrigin) else None
    owner = f"{k.owner_kind}/{k.owner_name}" if k is not None and k.owner_kind else None
    checks = (
        ("k8s_namespace", pin.k8s_namespace, k and k.namespace, "Kubernetes namespace"),
        ("k8s_owner", pin.k8s_owner, owner, "Kubernetes owner"),
        ("k8s_service_account", pin.k8s_service_account, k and k.service_account,
         "Kubernetes service account"),
    )  # fmt: skip
    for _key, pattern, value, what in checks:
        if pattern is None:
            continue
        if k is not None and value is None and k.api != "ok":
            return f"origin must be {what} {pattern!r}; unknown: Kubernetes API {k.api}"
        if k is None or not _glob(value, pattern):
            return f"origin must be {what} {pattern!r}"
    return None


def rule_mismatch(rule: Rule, job: Job) -> list[str]:
    """Every reason ``rule`` does not sanction ``job``; empty when it does."""
    why = []
    if not cmdline_matches(rule, job.cmdline):
        why.append("command line differs")
    if rule.user is not None and job.user != rule.user:
        why.append(f"user must be {rule.user!r}, is {job.user!r}")
    miss = origin_mismatch(rule.origin, job.origin)
    if miss is not None:
        why.append(miss)
    elif (
        rule.origin.systemd_unit is not None
        and isinstance(job.origin, SystemdOrigin)
        and job.origin.user_unit
    ):
        # A user unit is its owner's to name: anyone can write ~/.config/systemd/user/
        # train.service. Only a rule that also pins that user may sanction it.
        owner = job.origin.user
        if rule.user is None or owner != rule.user:
            why.append(
                f"origin is user {owner!r}'s own unit {job.origin.unit!r}; "
                "a unit pin matches a user unit only with 'user:' naming its owner"
            )
    return why


def judge(jobs: Sequence[Job], config: Config) -> None:
    """Set ``verdict``, ``rule`` and ``reason`` on every job, in place.

    Args:
        jobs: Jobs with origins resolved, ordered oldest first (instance counting
            keeps the oldest ``max_instances`` jobs of a rule).
        config: The allowlist and ignore list.
    """
    counts: dict[str, list[Job]] = {}
    for job in jobs:
        entry = ignore_match(job.lineage[0], config.ignore) if job.lineage else None
        if entry is not None:
            job.verdict, job.rule = "ignored", entry.name
            job.reason = f"ignore entry {entry.name!r}"
            continue
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
            job.verdict, job.rule = "rogue", None
            if nearest is not None:
                rule, why = nearest
                job.reason = (
                    f"not sanctioned: rule {rule.name!r} matches the command line but "
                    + "; ".join(why)
                )
            elif config.sanctioned:
                job.reason = "not sanctioned: no rule matches the command line"
            else:
                job.reason = "not sanctioned: the allowlist is empty"
            continue
        earlier = counts.setdefault(matched.name, [])
        earlier.append(job)
        job.rule = matched.name
        if matched.max_instances is not None and len(earlier) > matched.max_instances:
            job.verdict = "excess"
            older = ", ".join(str(j.root_pid) for j in earlier[: matched.max_instances])
            job.reason = (
                f"rule {matched.name!r} allows {matched.max_instances} instance(s); this is "
                f"instance {len(earlier)} (running: root PIDs {older})"
            )
        else:
            job.verdict = "sanctioned"
            job.reason = f"matches rule {matched.name!r}"
