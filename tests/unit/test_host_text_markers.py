"""Host text cannot cut or forge the product's own words in a finding's message
(hostile tester i, session 2026-12-07): code that cuts a message at one of its own
markers finds it outside code spans only (:func:`rogue_watchdog.hosttext.find_outside_code`),
and every piece of host text an origin names is quoted.

Before (main c2a0950), each case below gave:
1. ``without_run_commands``: 'rogue training job PID 48213, user bob, `python3 a'
2. ``as_opened``: 'rogue training job PID 48213, user bob, `python3 a'
3. report: '… `python3 x from cron /etc/cron.d/pipeline:1 (* * * * *), entry disabled at
   13:00:10 (A1)`, from unknown origin' (another finding's disable credited)
4. tmux: "tmux session 'a' ($0) on /tmp/s, from cron /etc/cron.d/pipeline:1 (* * * * *)"
"""

from __future__ import annotations

import time
from pathlib import Path

from rogue_watchdog.daemon.status import ended_before_page
from rogue_watchdog.daemon.tracking.current import (
    RUN_ENDED,
    as_opened,
    before_run_end,
    source_note,
    without_run_commands,
)
from rogue_watchdog.daemon.tracking.incident import FOLDED_NOTE, without_notes
from rogue_watchdog.hosttext import (
    code_span,
    find_outside_code,
    outside_code,
    replace_outside_code,
    split_outside_code,
)
from rogue_watchdog.lineage.shell import TmuxSession
from rogue_watchdog.model import Job, Origin
from rogue_watchdog.policy.findings import job_findings, name_finding_in_commands
from rogue_watchdog.records import ActionRecord
from rogue_watchdog.state import FindingRecord

HEAD = "rogue training job PID 48213, user bob, "


def _rogue_message(argv: tuple[str, ...]) -> str:
    job = Job(
        root_pid=48213, pids=[48213], user="bob", cmdline=argv, start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=Origin(), verdict="rogue",
        reason="not sanctioned", gpus=[],
    )  # fmt: skip
    (f,) = job_findings([job])
    return f.message


def _record(message: str, details: dict[str, object] | None = None) -> FindingRecord:
    return FindingRecord(7, "rogue-job:x", "rogue-job", "high", message, 48213,
                         details or {}, 1.0, 1.0, 1, None, None)  # fmt: skip


def test_find_outside_code_skips_code_spans() -> None:
    text = f"a; b {code_span('x; y`; z')}; c"
    assert text == "a; b `x; y\\x60; z`; c"
    assert find_outside_code(text, "; ") == 1
    assert find_outside_code(text, "; ", 2) == text.rindex("; ")
    assert find_outside_code(text, "; ", text.index("x")) == text.rindex("; ")
    assert find_outside_code(text, "y") == -1
    assert find_outside_code("`open; span", "; ") == -1  # unclosed: host text to the end
    assert split_outside_code(text, "; ") == ["a", "b `x; y\\x60; z`", "c"]
    assert split_outside_code(text, "; ", 1) == ["a", "b `x; y\\x60; z`; c"]
    assert split_outside_code("plain", "; ") == ["plain"]
    assert replace_outside_code(text, "; ", " | ") == "a | b `x; y\\x60; z` | c"
    assert outside_code(text) == "a; b ``; c"


def test_a_command_line_cannot_cut_the_origin_out_of_a_resolve_message() -> None:
    msg = _rogue_message(("python3", "a; to stop it: b"))
    assert msg == HEAD + "`python3 a; to stop it: b`, from unknown origin"
    assert without_run_commands(msg) == msg
    # The product's own clause is still dropped.
    own = msg + "; to stop it: rogue-watchdog terminate 48213"
    assert without_run_commands(own) == msg


def test_a_command_line_cannot_cut_the_origin_out_of_an_owed_open_alert() -> None:
    msg = _rogue_message(("python3", "a; now: its run PID 1 exited b"))
    assert msg == HEAD + "`python3 a; now: its run PID 1 exited b`, from unknown origin"
    assert as_opened(_record(msg)).message == msg
    assert before_run_end(msg) == msg
    ended = f"{msg}{RUN_ENDED}48213 exited with status 0"
    assert as_opened(_record(ended)).message == msg
    assert before_run_end(ended) == msg


def test_a_command_line_does_not_mark_a_finding_ended_before_its_page() -> None:
    msg = _rogue_message(("python3", "a; now: its run PID 1 exited b"))
    rec = _record(msg, {"root": [48213, 1]})
    assert ended_before_page(rec, set()) is False
    assert ended_before_page(_record(msg + RUN_ENDED + "48213 ended", {"root": [48213, 1]}),
                             set()) is True  # fmt: skip


def test_a_command_line_cannot_drop_advice_or_notes() -> None:
    msg = _rogue_message(("python3", "a; to stop the source: b; paged as part of this return: c"))
    act = ActionRecord(3, 2.0, "cli:root", "disable-source", "/etc/cron.d/x", 7, "x", False,
                       "ok", {}, None, None)  # fmt: skip
    assert source_note(msg, 1.0, [act])[0] == msg
    assert without_notes(msg) == msg
    assert without_notes(msg + FOLDED_NOTE + "F8") == msg


def test_a_command_line_naming_a_disable_source_is_not_rewritten() -> None:
    inner = "rogue-watchdog disable-source 48213 (x"
    msg = (
        _rogue_message(("python3", inner))
        + "; to stop the source: rogue-watchdog "
        + ("disable-source 48213 (backs up …)")
    )
    out = name_finding_in_commands(msg, 48213, 9)
    assert out == (
        HEAD + f"`python3 {inner}`, from unknown origin; to stop the source: "
        "rogue-watchdog disable-source F9 (backs up …)"
    )


def test_report_does_not_credit_a_disable_to_a_forged_cron_line(tmp_path: Path) -> None:
    from rogue_watchdog.report import report_json, report_text
    from rogue_watchdog.state import StateDB, read_history

    t0 = time.mktime((2026, 12, 6, 13, 0, 1, 0, 0, -1))
    forged = "x from cron /etc/cron.d/pipeline:1 (* * * * *), entry since disabled"
    msg = _rogue_message(("python3", forged))
    state = tmp_path / "state"
    db = StateDB(state)
    f1 = db.insert_finding("rogue-job:g", "rogue-job", "high", "other finding", 1, {}, t0)
    db.record_action("cli:root", "disable-source", "/etc/cron.d/pipeline", "ok", {}, t0 + 9,
                     finding_id=f1)  # fmt: skip
    db.insert_finding("rogue-job:h", "rogue-job", "high", msg, 48213, {}, t0 + 1)
    db.close()
    history = read_history(str(state), t0 - 60)
    assert history is not None
    text = report_text(report_json(*history, t0 - 60, t0 + 60))
    flat = " ".join(x.strip() for x in text.splitlines())
    assert "entry disabled at" not in flat, flat
    assert f"F2 {HEAD}`python3 {forged}`, from unknown origin" in flat


def test_a_tmux_socket_path_cannot_write_an_origin_outside_the_quote() -> None:
    hostile = "/tmp/s, from cron /etc/cron.d/pipeline:1 (* * * * *)"
    text = TmuxSession(hostile, "$0", "a", None, False).describe()
    assert text == f"tmux session `a` ($0) on `{hostile}`"
    named = TmuxSession("/tmp/s", "$1", "x`, from cron y:1", None, False).describe()
    assert named == "tmux session `x\\x60, from cron y:1` ($1) on `/tmp/s`"


def test_a_command_line_naming_a_config_is_not_read_as_another_install() -> None:
    """Before: a quoted command line holding ``rogue-watchdog terminate --config /x``
    was rewritten to this daemon's configuration and the alert got the note "written
    under the configuration /x (another install …)"."""
    from rogue_watchdog.daemon.alerts.adopt import adopted
    from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing

    ours = "/etc/rogue-watchdog/config.yaml"
    msg = _rogue_message(("python3", "a", "rogue-watchdog terminate --config /x 1"))
    doc = {"schema_version": 1, "event": "open", "host": "h", "time": None,
           "finding": {"id": 1, "message": msg}}  # fmt: skip
    out = Outgoing(Alert.from_json(doc), "log", 1, 0.0)
    assert adopted(out, ours).alert.finding.message == msg


def test_origin_names_chosen_by_users_are_quoted() -> None:
    """Before: ``Slurm job 5 'a'`` (repr) and ``cron …:1 via /home/b/x, entry since
    disabled.sh (high confidence)``: the script's path read as the product's words."""
    from rogue_watchdog.hosttext import plain_or_code
    from rogue_watchdog.model import CronOrigin, SlurmOrigin

    assert plain_or_code("/home/bob/train.sh") == "/home/bob/train.sh"
    assert plain_or_code("/tmp/a, b") == "`/tmp/a, b`"
    assert SlurmOrigin(job_id="5", job_name="a', from cron x:1").describe() == (
        "Slurm job 5 `a', from cron x:1`"
    )
    cron = CronOrigin(
        file="/var/spool/cron/crontabs/b",
        line=1,
        schedule="* * * * *",
        launch_script="/home/b/x, entry since disabled.sh",
        confidence="high",
    )
    assert cron.describe() == (
        "cron /var/spool/cron/crontabs/b:1 (* * * * *) via "
        "`/home/b/x, entry since disabled.sh` (high confidence)"
    )
    assert "entry since disabled" not in outside_code(cron.describe())
