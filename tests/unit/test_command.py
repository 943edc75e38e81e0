"""The one command runner (rogue_watchdog.command.run) and its recording double."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rogue_watchdog.actions.effects import Effects, RecordingEffects
from rogue_watchdog.command import (
    NOT_RUNNABLE,
    TIMED_OUT,
    CommandResult,
    RecordingRunner,
    run,
)

PY = sys.executable


def test_output_and_status_come_back_as_text() -> None:
    res = run(
        [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 30
    )
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert res.ran and not res.ok and res.reason is None
    assert run([PY, "-c", "pass"], 30).ok


def test_undecodable_output_is_replaced_not_raised() -> None:
    res = run([PY, "-c", "import sys; sys.stdout.buffer.write(b'a\\xffb')"], 30)
    assert res.stdout == "a\ufffdb"


def test_stdin_is_devnull_unless_input_is_given() -> None:
    read = [PY, "-c", "import sys; print(repr(sys.stdin.read()))"]
    assert run(read, 30).stdout == "''\n"
    assert run(read, 30, input_bytes=b"x\n").stdout == "'x\\n'\n"


def test_arguments_never_go_through_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    res = run(["echo", f"$(touch {marker})", ";", "touch", str(marker)], 30)
    assert res.ok and not marker.exists()


def test_a_missing_program_is_127_with_the_reason(tmp_path: Path) -> None:
    res = run([str(tmp_path / "absent"), "x"], 30)
    assert (res.returncode, res.ran, res.ok) == (NOT_RUNNABLE, False, False)
    assert res.reason == res.stderr == f"{tmp_path / 'absent'}: No such file or directory"


def test_a_file_that_is_not_executable_is_127_not_an_exception(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    res = run([str(script)], 30)
    assert (res.returncode, res.ran) == (NOT_RUNNABLE, False)
    assert res.stderr == f"{script}: Permission denied"


def test_an_argument_with_a_nul_byte_is_127_not_an_exception() -> None:
    res = run(["echo", "a\0b"], 30)
    assert (res.returncode, res.ran) == (NOT_RUNNABLE, False)
    assert "null byte" in res.stderr


def test_a_hung_program_is_killed_and_is_124() -> None:
    res = run([PY, "-c", "import time; time.sleep(60)"], 0.5)
    assert (res.returncode, res.ran) == (TIMED_OUT, False)
    assert res.reason == res.stderr == f"{PY}: timed out after 0.5 s"


def test_an_empty_argv_is_a_callers_mistake() -> None:
    with pytest.raises(ValueError):
        run([], 1)


def test_effects_run_through_it_with_prefix_and_timeout(tmp_path: Path) -> None:
    fx = Effects(command_prefix=(PY,), timeout_s=30)
    assert fx.run(["-c", "import sys; print(sys.stdin.read())"], b"hi").stdout == "hi\n"
    assert fx.query(["-c", "print(1)"]).stdout == "1\n"
    assert Effects(timeout_s=30).query([str(tmp_path / "absent")]).returncode == NOT_RUNNABLE


def test_recording_runner_answers_in_order_and_records() -> None:
    listed = CommandResult(0, "listed", "")
    computed = CommandResult(0, "computed", "")
    rec = RecordingRunner(
        answers={("a",): listed, ("b",): listed},
        answer=lambda argv: computed if argv == ("b",) else None,
    )
    assert rec(["a"], 1) is listed
    assert rec(["b"], 1) is computed  # answer wins over answers
    missing = rec(["c", "x"], 1)  # nobody scripted it: not installed
    assert (missing.returncode, missing.ran, missing.stderr) == (
        NOT_RUNNABLE, False, "c: No such file or directory",
    )  # fmt: skip
    assert rec.calls == [("a",), ("b",), ("c", "x")]
    assert RecordingRunner(default=listed)(["z"], 1) is listed


def test_recording_effects_answer_like_the_runner_but_succeed_by_default() -> None:
    denied = CommandResult(1, "", "denied")
    fx = RecordingEffects(answers={("crontab", "-"): denied})
    assert fx.run(["crontab", "-"], b"") is denied
    assert fx.query(["systemctl", "is-enabled", "x"]) == CommandResult(0, "", "")
