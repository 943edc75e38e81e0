"""``explain``'s ``Remediation:`` line of a run a rogue service launched names the
other jobs its ``terminate`` stops as copies, as every other form of the line does
(tests/unit/test_copy_words.py)."""

from __future__ import annotations

from types import SimpleNamespace

from rogue_watchdog.cli.scan import _remediation
from rogue_watchdog.model import Advice, Copies, Finding


def test_a_service_launched_runs_remediation_names_its_copies() -> None:
    # BEFORE: "… to stop this run only: rogue-watchdog terminate 41", and nothing said
    # that this terminate also stops PID 42 (the scan's other job, taken as a copy).
    copies = Copies(
        (42,), ("PID 42 `python3 train.py 2`",), ("process group 40 whose leader is gone",)
    )
    job = SimpleNamespace(
        root_pid=41, unsanctioned=True, origin=SimpleNamespace(kind="orphan"),
        advice=Advice(stop_pids=(41, 42), copies=copies),
    )  # fmt: skip
    found = Finding(
        kind="rogue-service", severity="high", message="m", root_pid=41,
        details={"service_pids": [30]},
    )  # fmt: skip
    result = SimpleNamespace(findings=[found])
    line = _remediation(job, result)  # type: ignore[arg-type]
    assert "to stop this run only: rogue-watchdog terminate 41" in line
    assert line.endswith(f"; {copies.text()}")
