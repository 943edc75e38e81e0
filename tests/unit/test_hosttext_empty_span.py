"""An empty piece of host text quoted as code (hostile tester wt9-attack, session j).

A process may empty its own command line (it overwrites its argv; a zombie's is empty
too): its finding quoted it as ``` `` ```, a run of two backticks. The product's own
parser reads that as an empty span, but CommonMark (which the alert sinks and docs
render; spec 0.30, "Code spans") closes a span only with a run of the same length: the
empty quote and the two backticks that open the product's next own command
(:func:`~rogue_watchdog.hosttext.own_code`) became one code span, so the prose between
them showed as code and the command itself as plain text, the reverse of what
``own_code`` promises. An empty quote is now one space between single backticks.
"""

from __future__ import annotations

import re

from rogue_watchdog.hosttext import code_span, outside_code, own_code, quoted_command
from rogue_watchdog.model import Job, Origin
from rogue_watchdog.policy.findings import job_findings


def _runs(text: str) -> list[int]:
    return [len(r) for r in re.findall("`+", text)]


def test_an_empty_quote_is_not_a_run_of_two_backticks() -> None:
    assert code_span("") == "` `"
    assert quoted_command((), 80) == "` `"
    message = f"job {code_span('')}; to restart it: {own_code('rogue-watchdog run')}"
    # Runs of 2 come only from the product's own commands, in pairs around them.
    assert _runs(message) == [1, 1, 2, 2]
    assert outside_code(message) == "job ``; to restart it: ``rogue-watchdog run``"


def test_a_job_with_an_empty_command_line() -> None:
    for argv in ((), ("",)):
        job = Job(
            root_pid=4, pids=[4], user="bob", cmdline=argv, start_ticks=1,
            gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=Origin(),
            verdict="rogue", reason="not sanctioned", gpus=[],
        )  # fmt: skip
        (finding,) = job_findings([job])
        assert finding.message == "rogue training job PID 4, user bob, ` `, from unknown origin"
