"""No origin label, and nothing ``report`` names or groups runs by, holds a PID or
another per-run id.

A fresh user's ``report`` named its per-origin row after the latest run of a shell loop
whose wrapper had been adopted: ``orphan: its wrapper bash (PID 24914) was adopted (the
wrapper's parent exited)``, and drew each run as a bar of its own. ``Origin.label()``
feeds metric and alert labels (cardinality) and is documented never to hold a PID, job
or container id, session or command line; the report's names and keys now follow the
same rule (:meth:`Origin.stable_name`).

Each kind's origin is generated for two runs of one source that differ only in their
per-run ids (a PID, a Slurm job id, a container id, a pod, an at job, an ssh port).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from rogue_watchdog.model import (
    ORIGIN_KINDS,
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    KubernetesOrigin,
    Origin,
    OrphanOrigin,
    ShellOrigin,
    SlurmOrigin,
    SupervisorOrigin,
    SystemdOrigin,
)
from rogue_watchdog.policy.learn import group_runs
from rogue_watchdog.policy.signature import job_signature
from rogue_watchdog.report import burst_key, usage_rows
from rogue_watchdog.state import RunRecord

CMD = ["/usr/bin/python3", "/home/bob/probe.py"]

#: One source's origin as a run of it with per-run id ``n`` reads.
RUN_OF: dict[str, Callable[[int], Origin]] = {
    "unknown": lambda n: Origin(),
    "cron": lambda n: CronOrigin(
        file="/etc/cron.d/retrain",
        line=2,
        user="bob",
        schedule="* * * * *",
        entry="* * * * * bob /usr/bin/python3 /home/bob/probe.py",
    ),
    "systemd": lambda n: SystemdOrigin(unit="retrain.service", user="bob"),
    "slurm": lambda n: SlurmOrigin(
        job_id=n,
        job_name="retrain",
        account="ml",
        user="bob",
        array_job_id=n - 7,
        array_task_id=n % 97 + 1000,
    ),
    "container": lambda n: ContainerOrigin(
        container_id=f"{n:064x}", image="trainer:1", name=f"trainer-{n}"
    ),
    "kubernetes": lambda n: KubernetesOrigin(
        pod_uid=f"uid-{n}",
        container_id=f"{n:064x}",
        namespace="ml",
        pod=f"retrain-{n}",
        owner_kind="Deployment",
        owner_name="retrain",
        image="trainer:1",
    ),
    "shell": lambda n: ShellOrigin(
        session=f"ssh from 10.0.0.5 port {n}, tmux session 'train'",
        user="bob",
        client="10.0.0.5",
        tty=f"/dev/pts/{n}",
        login_session=f"session-{n}.scope",
    ),
    "at": lambda n: AtOrigin(job=n, user="bob", command="python3 /home/bob/probe.py"),
    "supervisor": lambda n: SupervisorOrigin(
        program="retrain", supervisor="/etc/supervisor/supervisord.conf", supervisor_pid=n
    ),
    "orphan": lambda n: OrphanOrigin(
        message=f"orphan: its wrapper bash (PID {n}) was adopted (the wrapper's parent exited)",
        parent_pid=1,
    ),
    "orphan of Slurm": lambda n: OrphanOrigin(
        message=f"orphan of Slurm job {n} (CANCELLED)", parent_pid=1, slurm_job_id=n
    ),
}


def test_every_kind_is_generated() -> None:
    assert {k.kind for k in ORIGIN_KINDS} == {o(10_001).kind for o in RUN_OF.values()}


def _ids(n: int) -> list[str]:
    """How run ``n``'s ids read in text: decimal, hex (a container id, cut to 12)."""
    return [str(n), f"{n:064x}"[:12], f"{n:064x}"[-12:]]


def _run(origin: Origin, n: int, start: float) -> RunRecord:
    sig = job_signature("bob", CMD, origin)
    return RunRecord(sig, n, n, "bob", CMD, origin.to_json(), "rogue", None, start, start + 60)


@given(
    kind=st.sampled_from(sorted(RUN_OF)),
    ids=st.lists(st.integers(10_000, 4_000_000), min_size=2, max_size=2, unique=True),
)
def test_labels_and_report_names_hold_no_per_run_id(kind: str, ids: list[int]) -> None:
    a, b = (RUN_OF[kind](n) for n in ids)
    assert a.label() == b.label()
    assert a.stable_name() == b.stable_name()
    runs = [_run(a, ids[0], 1000.0), _run(b, ids[1], 1030.0)]  # overlapping runs
    # Before: an orphan's row was named `… (PID 24914) …`, its runs two bars.
    assert burst_key(runs[0]) == burst_key(runs[1])
    [(row, count, _hours, _verdicts)] = usage_rows(runs, "origin")
    assert count == 2
    for n in ids:
        for said in (a.label(), a.stable_name(), b.stable_name(), row):
            assert not any(i in said for i in _ids(n)), (kind, said)


def test_a_single_runs_description_still_names_its_ids() -> None:
    """Only the names of what many runs share drop the ids: a run's own description
    (status, explain, a bar of one run) keeps its PID."""
    orphan = RUN_OF["orphan"](24914)
    assert "(PID 24914)" in orphan.describe()
    assert orphan.stable_name() == (
        "orphan: its wrapper bash was adopted (the wrapper's parent exited)"
    )


@given(
    kind=st.sampled_from(sorted(RUN_OF)),
    ids=st.lists(st.integers(10_000, 4_000_000), min_size=2, max_size=2, unique=True),
)
def test_allowlist_suggest_groups_the_runs_of_one_source_once(kind: str, ids: list[int]) -> None:
    """``allowlist suggest`` groups runs by origin too: before, each wrapper PID of an
    adopted loop (each at job, each ssh port...) was a group (a listed job) of its own."""
    a, b = (RUN_OF[kind](n) for n in ids)
    runs = [_run(a, ids[0], 1000.0), _run(b, ids[1], 2000.0)]
    [group] = group_runs(runs)
    assert len(group.runs) == 2
