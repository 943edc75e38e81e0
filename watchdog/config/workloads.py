"""``workloads:`` configuration section: how loud each non-training GPU class is
(docs/config.md, "Workload classes").

Example (a shared box, the default)::

    workloads:
      severity: {serving: warning, interactive: warning, system: warning, probe: warning}

A single-owner box whose rule is "no GPU use outside the pipeline" pages for all::

    workloads: {severity: high}
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from ..model import NON_TRAINING_CLASSES, WORKLOAD_CLASSES, WorkloadClass
from ..spelling import SEVERITIES, Severity
from . import datatypes
from .base import NodeReader, build, keys, setting

#: Severity of ``unsanctioned-gpu-use`` per class unless configured: a shared box has
#: notebooks, inference servers, display servers and probes, none of which a person must
#: act on at once.
DEFAULT_CLASS_SEVERITY: Severity = "warning"

_SEVERITY = datatypes.choice(
    SEVERITIES, "must be one of " + ", ".join(SEVERITIES) + ", got {text!r}"
)


def _severities(
    r: NodeReader, node: yaml.Node, key: str
) -> tuple[tuple[WorkloadClass, Severity], ...]:
    """One severity for every non-training class, or a mapping class → severity (the
    classes it leaves out keep :data:`DEFAULT_CLASS_SEVERITY`)."""
    if isinstance(node, yaml.ScalarNode):
        every = _SEVERITY(r, node, key)
        return tuple((c, every) for c in NON_TRAINING_CLASSES)
    m = r.mapping(node, key, WORKLOAD_CLASSES)
    for name in ("training", "unknown"):
        if name in m:
            raise r.err(
                m[name][0],
                f"{key}.{name}",
                f"{name!r} is not settable: a rogue training job (and a GPU job of unknown "
                "class, which may be one) is a rogue-job finding at high; the classes "
                "here are " + ", ".join(NON_TRAINING_CLASSES),
            )
    given = {name: _SEVERITY(r, value, f"{key}.{name}") for name, (_, value) in m.items()}
    return tuple((c, given.get(c, DEFAULT_CLASS_SEVERITY)) for c in NON_TRAINING_CLASSES)


@dataclass(frozen=True)
class WorkloadSettings:
    """The ``workloads:`` section (:attr:`watchdog.config.Config.workloads`).

    Attributes:
        severity: ``(class, severity)`` for each non-training class
            (:data:`~watchdog.model.NON_TRAINING_CLASSES`): the severity of its
            ``unsanctioned-gpu-use`` findings.
        probe_max_age_s: A process without training evidence younger than this that has
            only mapped a CUDA library (no device open, nothing NVML lists) is a
            ``probe``, as is one already exited when first scanned.
    """

    severity: tuple[tuple[WorkloadClass, Severity], ...] = setting(
        tuple((c, DEFAULT_CLASS_SEVERITY) for c in NON_TRAINING_CLASSES), _severities
    )
    probe_max_age_s: float = setting(10.0, datatypes.positive_s(3600.0))

    def severity_of(self, workload: WorkloadClass) -> Severity:
        """The severity of an ``unsanctioned-gpu-use`` finding for ``workload``."""
        return dict(self.severity).get(workload, DEFAULT_CLASS_SEVERITY)


def parse_workloads(r: NodeReader, node: yaml.Node) -> WorkloadSettings:
    """Validate the ``workloads:`` section.

    Raises:
        ConfigError: Unknown keys or classes, ``training``/``unknown`` given a severity,
            a severity that is not one of info, warning, high, critical.
    """
    return build(WorkloadSettings, r, node, "workloads", order=keys(WorkloadSettings))
