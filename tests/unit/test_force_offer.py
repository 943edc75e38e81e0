"""A refusal offers ``--force`` only where a forced run would do something, and a
wrapper left beside a refused member names it for what it is.

Before: ``terminate PID --dry-run`` of a sanctioned job said ``refusing (use --force to
insist)``, and the forced run then signalled nothing (``no signal: refused (PID N
belongs to a sanctioned job)``, exit 1): members of sanctioned and ignored jobs are
never signalled (docs/operations.md). The same run left the cron-style ``sh -c``
wrapper saying ``it also runs processes outside the job (PID N …)`` where PID N was
the job's own root.

Every process here is started by the test in a sandbox directory with a random name and
killed at the end by PID and start time.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_program, run_cli
from tests.unit.test_trust_processes import PY, SLEEP, Started, config, find, ppid


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    s = Started(tmp_path)
    try:
        yield s
    finally:
        s.cleanup()


def _job(tmp_path: Path, started: Started, rule: str) -> tuple[Path, int, int]:
    """A trainer under a ``sh -c`` that waits for it (as cron's does), judged by
    ``rule``: the config, the trainer's PID and its wrapper's."""
    need_program("setsid", "sh")
    train = tmp_path / "train_s.py"
    train.write_text(SLEEP)

    # `; true`: the shell cannot exec the trainer, it stays its parent (cron's sh -c).
    subprocess.run(["sh", "-c", f"setsid sh -c '{PY} {train}; true' & exit 0"], check=True)
    (trainer,) = find(started, str(train))
    return config(tmp_path, rule), trainer, ppid(trainer)


SANCTIONED = "sanctioned:\n  - name: pipeline\n    cmdline: '*train_s*'\n    origin: {any: true}\n"
IGNORED = "ignore:\n  - name: bench\n    cmdline: '*train_s*'\n"


@pytest.mark.parametrize(
    ("rule", "verdict", "job"),
    [(SANCTIONED, "sanctioned", "a sanctioned job"), (IGNORED, "ignored", "an ignored job")],
)
def test_terminate_never_offers_force_for_a_job_it_never_signals(
    tmp_path: Path, started: Started, rule: str, verdict: str, job: str
) -> None:
    cfg, trainer, _wrapper = _job(tmp_path, started, rule)
    plain = run_cli("terminate", "--config", str(cfg), str(trainer), "--dry-run")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert plain.stdout.endswith(
        f"is {verdict}: refusing (the processes of {job} are never signalled, --force included)\n"
    ), plain.stdout
    assert "--force to insist" not in plain.stdout

    # What --force really does: nothing is signalled, exit 1 (the refusal is unchanged).
    forced = run_cli("terminate", "--config", str(cfg), str(trainer), "--dry-run", "--force")
    assert forced.returncode == 1, forced.stdout + forced.stderr
    [line] = [x for x in forced.stdout.splitlines() if x.startswith(f"  PID {trainer} `")]
    # Before: an ignored job's process was said to belong to "a sanctioned job".
    assert line.endswith(f": no signal: refused (PID {trainer} belongs to {job})"), line
    assert "would send" not in forced.stdout
    assert "a real run would be refused: no process of this job would be signalled" in (
        forced.stdout
    )


def test_a_wrapper_left_beside_a_refused_member_names_it_as_the_jobs(
    tmp_path: Path, started: Started
) -> None:
    cfg, trainer, wrapper = _job(tmp_path, started, SANCTIONED)
    forced = run_cli("terminate", "--config", str(cfg), str(trainer), "--dry-run", "--force")
    # Command lines are cut to fit: the line is checked around them.
    [left] = [x for x in forced.stdout.splitlines() if x.startswith(f"  left PID {wrapper} ")]
    assert left.startswith(f"  left PID {wrapper} `sh -c "), left
    _head, _, tail = left.partition("`: never signalled: ")
    assert tail.startswith(f"it also runs the job's PID {trainer} `"), left
    assert tail.endswith(
        f"`, which is refused (PID {trainer} belongs to a sanctioned job): left with it"
    ), left
    assert "outside the job" not in forced.stdout


def test_disable_source_offers_force_only_where_it_would_disable(
    tmp_path: Path, started: Started
) -> None:
    cfg, trainer, _wrapper = _job(tmp_path, started, SANCTIONED)
    plain = run_cli("disable-source", "--config", str(cfg), str(trainer), "--dry-run")
    why = (
        "its origin (orphan) names nothing to disable, and "
        "enforcement.quarantine_unknown_exe is off"
    )
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert plain.stdout.endswith(
        f"is sanctioned: refusing (--force would not change that: {why})\n"
    ), plain.stdout
    forced = run_cli("disable-source", "--config", str(cfg), str(trainer), "--dry-run", "--force")
    assert forced.returncode == 1 and why in forced.stdout, forced.stdout
    # No offer to terminate a job whose processes are never signalled either.
    assert "to stop the running job" not in forced.stdout, forced.stdout


QUARANTINE = "enforcement: {quarantine_unknown_exe: true}\n"


def test_force_is_offered_where_it_would_disable_the_source(
    tmp_path: Path, started: Started
) -> None:
    """An ignored job's source is no protected one: with quarantine_unknown_exe on,
    disable-source --force would quarantine its script, so the offer stays; terminate
    --and-source names that command, never its own --force."""
    cfg, trainer, _wrapper = _job(tmp_path, started, IGNORED + QUARANTINE)
    plain = run_cli("disable-source", "--config", str(cfg), str(trainer), "--dry-run")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert plain.stdout.endswith("is ignored: refusing (use --force to insist)\n"), plain.stdout
    forced = run_cli("disable-source", "--config", str(cfg), str(trainer), "--dry-run", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"(dry run, not recorded): quarantine {tmp_path}/train_s.py\n" in forced.stdout
    both = run_cli("terminate", "--config", str(cfg), str(trainer), "--dry-run", "--and-source")
    assert both.returncode == 1, both.stdout + both.stderr
    assert both.stdout.endswith(
        "is ignored: refusing (the processes of an ignored job are never signalled, --force "
        f"included; to disable its source anyway: rogue-watchdog disable-source --config {cfg} "
        f"--force {trainer})\n"
    ), both.stdout
