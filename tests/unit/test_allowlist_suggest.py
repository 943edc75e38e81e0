"""``allowlist suggest`` and ``allowlist diff`` on recorded runs (rogue_watchdog.policy.learn)."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import structlog

from rogue_watchdog.cli import main
from rogue_watchdog.cli.allowlist import wrote_suggestion
from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.model import (
    CronOrigin,
    ShellOrigin,
    SlurmOrigin,
    SupervisorOrigin,
    SystemdOrigin,
    origin_from_json,
)
from rogue_watchdog.policy.allowlist import origin_mismatch
from rogue_watchdog.policy.learn import (
    Script,
    head_regex,
    max_concurrent,
    one_per_run,
    origin_now,
    program_and_script,
    render_changes,
    render_yaml,
    replay,
    rule_of,
    script_of,
    source_gone_now,
    strongest_pin,
    suggest,
)
from rogue_watchdog.state import RunRecord, StateDB

T0 = 1_700_000_000.0
PY = "/opt/pipeline/venv/bin/python"
SCRIPT = "/opt/pipeline/train.py"


def cron(file: str = "/etc/cron.d/pipeline", line: int = 2, entry: str = "...") -> dict[str, Any]:
    return CronOrigin(
        file=file, line=line, user="mlops", schedule="*/5 * * * *", entry=entry
    ).to_json()


def tmux() -> dict[str, Any]:
    return ShellOrigin(session="1", user="alice", tty="/dev/pts/3", tmux_session="exp").to_json()


def run(
    pid: int,
    start: float,
    end: float,
    origin: dict[str, Any],
    cmdline: list[str] | None = None,
    user: str = "mlops",
    verdict: str = "rogue",
    gpu_s: float = 0.0,
    gpus: list[str] | None = None,
) -> RunRecord:
    return RunRecord(
        "sig", pid, pid * 10, user, cmdline or [PY, SCRIPT, "--run", str(pid)], origin,
        verdict, None, start, end, gpu_s, gpus or [],
    )  # fmt: skip


def pipeline_runs() -> list[RunRecord]:
    # Three runs; the second and third overlap (two at once at T0+400).
    return [
        run(101, T0, T0 + 200, cron(), gpu_s=3600.0, gpus=["GPU-a"]),
        run(102, T0 + 300, T0 + 500, cron(), gpu_s=1800.0, gpus=["GPU-a"]),
        run(103, T0 + 400, T0 + 600, cron(), gpu_s=1800.0, gpus=["GPU-b"]),
    ]


def test_program_and_script_leave_out_the_runs_arguments() -> None:
    assert program_and_script([PY, SCRIPT, "--lr", "3e-4"]) == (PY, SCRIPT)
    assert program_and_script([PY, "-u", SCRIPT, "x"]) == (PY, "-u", SCRIPT)
    assert program_and_script(["python3", "-m", "pipeline.train", "--x"]) == (
        "python3", "-m", "pipeline.train",
    )  # fmt: skip
    assert program_and_script(["/usr/bin/bash", "/opt/run-train", "a"]) == (
        "/usr/bin/bash", "/opt/run-train",
    )  # fmt: skip
    assert program_and_script(["/opt/bin/trainer", "--epochs", "3"]) == ("/opt/bin/trainer",)
    assert (
        head_regex((PY, SCRIPT)) == r"^/opt/pipeline/venv/bin/python /opt/pipeline/train\.py( |$)"
    )


def test_strongest_pin_per_origin() -> None:
    assert strongest_pin(origin_from_json(cron())) == {
        "cron_file": "/etc/cron.d/pipeline", "cron_line": 2,
    }  # fmt: skip
    assert strongest_pin(origin_from_json(tmux())) is None


def test_a_timer_started_unit_is_pinned_to_unit_and_timer() -> None:
    """The issue asks for "unit and timer"; the pin was the unit alone."""
    timed = SystemdOrigin(unit="train.service", timer="train.timer", timer_schedule="daily")
    assert strongest_pin(timed) == {"systemd_unit": "train.service", "systemd_timer": "train.timer"}
    assert strongest_pin(SystemdOrigin(unit="train.service")) == {"systemd_unit": "train.service"}
    # Two timers trigger it: which one systemd lists first is no pin (the hostile tester).
    two = SystemdOrigin(
        unit="train.service",
        timer="a-old.timer",
        evidence=("also triggered by train.timer (TriggeredBy)",),
    )
    assert strongest_pin(two) == {"systemd_unit": "train.service"}
    cfg = parse_config(
        "sanctioned:\n  - name: t\n    cmdline: '*'\n"
        "    origin: {systemd_unit: train.service, systemd_timer: train.timer}\n",
        "t.yaml",
    )
    pin = cfg.sanctioned[0].origin
    assert origin_mismatch(pin, timed) is None
    assert origin_mismatch(pin, SystemdOrigin(unit="train.service")) == (
        "origin must be triggered by systemd timer 'train.timer'"
    )
    with pytest.raises(ConfigError, match=r"t\.yaml:4: .*'train' is not a timer unit"):
        parse_config(
            "sanctioned:\n  - name: t\n    cmdline: '*'\n"
            "    origin: {systemd_unit: a.service, systemd_timer: train}\n",
            "t.yaml",
        )


def test_max_concurrent_counts_overlapping_runs() -> None:
    assert max_concurrent(pipeline_runs()) == 2
    assert max_concurrent(pipeline_runs()[:2]) == 1
    assert max_concurrent([]) == 0


def test_suggest_proposes_the_cron_pipeline_and_lists_the_tmux_one_off() -> None:
    runs = [
        *pipeline_runs(),
        run(201, T0 + 50, T0 + 90, tmux(), [PY, "/home/alice/exp.py"], "alice"),
    ]
    s = suggest(runs, T0 - 1)
    assert [g.rule for g in s.proposed] == ["cron-pipeline-2"]
    assert [(g.head, g.why_not) for g in s.not_proposed] == [
        ((PY, "/home/alice/exp.py"), "started by hand in a shell or tmux")
    ]
    text = render_yaml(s)
    cfg = parse_config(text, "suggested.yaml")  # check-config accepts it
    [rule] = cfg.sanctioned
    assert (rule.name, rule.user, rule.max_instances) == ("cron-pipeline-2", "mlops", 2)
    assert (rule.origin.get("cron_file"), rule.origin.get("cron_line")) == (
        "/etc/cron.d/pipeline",
        2,
    )
    assert rule.cmdline_regex is not None
    assert rule.cmdline_regex.search(f"{PY} {SCRIPT} --run 999") is not None
    assert rule.cmdline_regex.search(f"{PY} {SCRIPT}.evil") is None
    comments = [line for line in text.splitlines() if line.startswith("# ")]
    first = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(T0))
    assert any(
        line.startswith("# cron /etc/cron.d/pipeline:2 (*/5 * * * *): runs: 3, first seen "
                        f"{first}")
        and line.endswith("GPU-hours 2.00, GPUs: GPU-a, GPU-b")
        for line in comments
    ), text  # fmt: skip
    assert any(
        line.startswith(f"# seen, not proposed: `{PY} /home/alice/exp.py` (user alice, shell")
        and "started by hand in a shell or tmux; runs: 1" in line
        for line in comments
    ), text


def test_many_jobs_not_proposed_for_one_reason_are_a_few_lines_and_a_count() -> None:
    """Issue 33, fresh user K: another engineer's fan-out (40 different scripts, one run
    each, of unknown origin) printed 49 ``# seen, not proposed`` lines, and the one a
    person needed to read was lost among them. Now the first three of one reason (most
    runs first) and ``and N more … for the same reason: …``; a reason of its own is
    still a line of its own. Before (7f5f2b2): 41 such lines; after: 5."""
    unknown = {"kind": "unknown", "reason": "no parent"}
    fan = [
        run(1000 + i, T0 + i, T0 + i + 2, unknown, cmdline=[PY, f"/tmp/t/train_fan_{i}.py"],
            user="bob")
        for i in range(40)
    ]  # fmt: skip
    fan.append(run(2000, T0 + 50, T0 + 60, unknown, cmdline=[PY, "/tmp/t/train_fan_7.py"],
                   user="bob"))  # fmt: skip
    hand = run(3000, T0, T0 + 9, tmux(), cmdline=[PY, "/home/alice/exp.py"], user="alice")
    text = render_yaml(suggest([*fan, hand], T0 - 1))
    seen = [line for line in text.splitlines() if line.startswith("# seen, not proposed: ")]
    assert len(seen) == 4, text
    fans = [line for line in seen if "/tmp/t/train_fan_" in line]
    assert len(fans) == 3 and "train_fan_7.py` (user bob" in fans[0] and "runs: 2" in fans[0]
    assert any("/home/alice/exp.py` (user alice, shell" in line for line in seen)
    (more,) = [line for line in text.splitlines() if line.startswith("# and ")]
    assert more.startswith("# and 37 more job(s) seen, not proposed for the same reason: ")


def test_a_one_off_from_cron_is_not_proposed_below_min_runs() -> None:
    s = suggest(pipeline_runs()[:1], T0 - 1, min_runs=2)
    assert s.proposed == []
    assert [g.why_not for g in s.not_proposed] == ["ran 1 time(s), fewer than --min-runs 2"]
    assert render_yaml(s).splitlines()[2] == "sanctioned: []"
    assert parse_config(render_yaml(s), "s.yaml").sanctioned == ()


def test_the_same_script_from_two_cron_files_is_never_proposed_silently() -> None:
    ghost = cron("/etc/cron.d/old-pipeline", 1)
    runs = [
        *pipeline_runs(),
        run(301, T0 + 700, T0 + 800, ghost),
        run(302, T0 + 900, T0 + 950, ghost),
    ]
    s = suggest(runs, T0 - 1)
    assert s.proposed == []
    assert [[g.origin.label() for g in c] for c in s.conflicts] == [
        ["/etc/cron.d/pipeline:2", "/etc/cron.d/old-pipeline:1"]
    ]
    text = render_yaml(s)
    assert parse_config(text, "s.yaml").sanctioned == ()
    assert f"# not proposed: {PY} {SCRIPT} runs from 2 origins:" in text.splitlines()
    assert any("file /etc/cron.d/old-pipeline, line 1, schedule */5 * * * *, last edit" in line
               for line in text.splitlines())  # fmt: skip
    chosen = suggest(runs, T0 - 1, prefer=["/etc/cron.d/pipeline:2"])
    assert [g.rule for g in chosen.proposed] == ["cron-pipeline-2"]
    assert [(g.origin.label(), g.why_not) for g in chosen.not_proposed] == [
        (
            "/etc/cron.d/old-pipeline:1",
            "suspected ghost: runs the same script as the preferred cron "
            "/etc/cron.d/pipeline:2 (*/5 * * * *)",
        )
    ]


def test_a_ghost_is_the_same_script_whatever_runs_it() -> None:
    """The ghost check compared the whole program-and-script prefix: the same script run
    by another interpreter path or with ``-u`` was proposed twice, silently."""
    ghost = cron("/etc/cron.d/old-pipeline", 1)
    for argv in (
        ["/usr/bin/python3", SCRIPT],
        [PY, "-u", SCRIPT],
        ["python3", "/opt/pipeline/./train.py"],
    ):
        runs = [
            *pipeline_runs(),
            run(301, T0 + 700, T0 + 800, ghost, [*argv, "--old"]),
            run(302, T0 + 900, T0 + 950, ghost, [*argv, "--old"]),
        ]
        s = suggest(runs, T0 - 1)
        assert s.proposed == [], argv
        assert [[g.origin.label() for g in c] for c in s.conflicts] == [
            ["/etc/cron.d/pipeline:2", "/etc/cron.d/old-pipeline:1"]
        ], argv


def test_a_ghost_of_an_already_sanctioned_pipeline_is_named_not_proposed() -> None:
    """With the pipeline already sanctioned by a rule, the ghost alone was proposed and
    nothing mentioned the pipeline."""
    sanctioned = [
        dataclasses.replace(r, verdict="sanctioned", rule="pipeline") for r in pipeline_runs()
    ]
    ghost = cron("/etc/cron.d/old-pipeline", 1)
    runs = [*sanctioned, run(301, T0 + 700, T0 + 800, ghost), run(302, T0 + 900, T0 + 950, ghost)]
    s = suggest(runs, T0 - 1)
    assert s.proposed == [] and s.conflicts == []
    assert [(g.origin.label(), g.ghost_of, g.why_not) for g in s.not_proposed] == [
        ("/etc/cron.d/pipeline:2", None, "already sanctioned by rule pipeline"),
        (
            "/etc/cron.d/old-pipeline:1",
            "/etc/cron.d/pipeline:2",
            "suspected ghost: runs the same script as the sanctioned cron "
            "/etc/cron.d/pipeline:2 (*/5 * * * *)",
        ),
    ]


def test_a_weekly_ghost_seen_once_still_stops_the_proposal() -> None:
    """A weekly ghost runs once in a week's window, below --min-runs: it was listed as
    'ran 1 time(s)' and the pipeline proposed beside it as if nothing else ran it."""
    ghost = cron("/etc/cron.d/old-pipeline", 1)
    s = suggest([*pipeline_runs(), run(301, T0 + 700, T0 + 800, ghost)], T0 - 1)
    assert s.proposed == []
    assert [[(g.origin.label(), len(g.runs)) for g in c] for c in s.conflicts] == [
        [("/etc/cron.d/pipeline:2", 3), ("/etc/cron.d/old-pipeline:1", 1)]
    ]
    chosen = suggest(
        [*pipeline_runs(), run(301, T0 + 700, T0 + 800, ghost)], T0 - 1,
        prefer=["/etc/cron.d/pipeline:2"],
    )  # fmt: skip
    assert [g.rule for g in chosen.proposed] == ["cron-pipeline-2"]
    assert [g.ghost_of for g in chosen.not_proposed] == ["/etc/cron.d/pipeline:2"]


@pytest.mark.parametrize(
    ("pipeline", "ghost"),
    [
        ([PY, SCRIPT], ["python3", "train.py"]),  # relative
        ([PY, SCRIPT], [SCRIPT]),  # run by its shebang
        ([PY, SCRIPT], ["python3", "//opt/pipeline/train.py"]),
        (["python3", "-m", "pipeline.train"], ["python3", "-mpipeline.train"]),
        (["python3", "-m", "pipeline.train"], ["python3", "/opt/pipeline/pipeline/train.py"]),
        (["python3", "/opt/p/train"], ["python3", "-X", "dev", "/opt/p/train"]),
        (["python3", "/opt/p/train"], ["python3", "-W", "ignore", "/opt/p/train"]),
        (["python3", "-W", "x.py", SCRIPT], [PY, SCRIPT]),  # an option's value is no script
        (
            ["torchrun", "--nproc_per_node=8", "/opt/p/run"],
            ["torchrun", "--nproc_per_node", "8", "/opt/p/run"],
        ),
        (["/opt/bin/trainer"], ["trainer", "--epochs", "3"]),
    ],
)
def test_the_same_job_however_its_command_line_is_spelled(
    pipeline: list[str], ghost: list[str]
) -> None:
    """The hostile tester's spellings of one job from a second cron line: each was
    proposed twice, silently. A job's identity errs towards "the same" (the script's
    name, a module's last part, else the program)."""
    other = cron("/etc/cron.d/old-pipeline", 1)
    runs = [
        *(
            run(100 + i, T0 + 300 * i, T0 + 300 * i + 200, cron(), [*pipeline, "--a"])
            for i in range(2)
        ),
        *(
            run(300 + i, T0 + 700 + 300 * i, T0 + 800 + 300 * i, other, [*ghost, "--b"])
            for i in range(2)
        ),
    ]
    s = suggest(runs, T0 - 1)
    assert s.proposed == []
    assert [[g.origin.label() for g in c] for c in s.conflicts] == [
        ["/etc/cron.d/pipeline:2", "/etc/cron.d/old-pipeline:1"]
    ]


def test_an_origin_that_offers_no_pin_is_still_a_rival() -> None:
    """The same script from supervisord (no pin to propose): the cron line was proposed
    beside it silently, and the cron line may be the ghost."""
    sup = SupervisorOrigin(
        program="trainer", supervisor="supervisord", config="/etc/supervisor/conf.d/t.conf"
    )
    runs = [
        *pipeline_runs(),
        run(301, T0 + 700, T0 + 800, sup.to_json()),
        run(302, T0 + 900, T0 + 950, sup.to_json()),
    ]
    s = suggest(runs, T0 - 1)
    assert s.proposed == [] and len(s.conflicts) == 1
    chosen = suggest(runs, T0 - 1, prefer=["/etc/cron.d/pipeline:2"])
    assert [g.rule for g in chosen.proposed] == ["cron-pipeline-2"]
    assert [g.ghost_of for g in chosen.not_proposed] == ["/etc/cron.d/pipeline:2"]


def test_case7_another_teams_script_of_the_same_name_is_another_job() -> None:
    """Issue 35 case 7: runs were grouped by script name without folder, so another team's
    ``/srv/other/train_main.py`` blocked the pipeline's proposal until ``--prefer``, which
    then called the other team's line a "suspected ghost". Before: proposed [], one
    conflict of both lines; with --prefer, the other line "suspected ghost: runs the same
    script as the preferred cron /etc/cron.d/pipeline:2 (*/5 * * * *)". After: each
    script path is its own job, proposed, with the bare name kept as a warning."""
    other = CronOrigin(
        file="/etc/cron.d/other", line=1, user="x", schedule="0 * * * *", entry="..."
    ).to_json()
    main_py = "/opt/pipeline/train_main.py"
    runs = [
        *(run(100 + i, T0 + 300 * i, T0 + 300 * i + 200, cron(), [PY, main_py]) for i in range(3)),
        *(
            run(200 + i, T0 + 1000 + 300 * i, T0 + 1100 + 300 * i, other,
                ["/usr/bin/python3", "/srv/other/train_main.py"], user="x")
            for i in range(2)
        ),
    ]  # fmt: skip
    for prefer in ([], ["/etc/cron.d/pipeline:2"]):
        s = suggest(runs, T0 - 1, prefer=prefer)
        assert [g.rule for g in s.proposed] == ["cron-pipeline-2", "cron-other-1"], prefer
        assert (s.conflicts, s.not_proposed) == ([], []), prefer
        assert all(g.ghost_of is None for g in s.proposed)
        text = render_yaml(s)
        assert "ghost" not in text
        lines = text.splitlines()
        at = lines.index("  - name: cron-pipeline-2")
        assert lines[at - 1] == (
            "# warning: same script name elsewhere: /srv/other/train_main.py by user x "
            "(cron /etc/cron.d/other:1 (0 * * * *))"
        )
        at = lines.index("  - name: cron-other-1")
        assert lines[at - 1] == (
            "# warning: same script name elsewhere: /opt/pipeline/train_main.py by user "
            "mlops (cron /etc/cron.d/pipeline:2 (*/5 * * * *))"
        )
        cfg = parse_config(text, "s.yaml")
        assert [(r.name, r.user) for r in cfg.sanctioned] == [
            ("cron-pipeline-2", "mlops"), ("cron-other-1", "x"),
        ]  # fmt: skip


def test_case7_another_teams_script_run_by_hand_warns_only() -> None:
    """The other team's script started by hand in a shell: listed, and the pipeline is
    proposed with the warning (a script elsewhere is no rival)."""
    runs = [
        *pipeline_runs(),
        run(201, T0 + 50, T0 + 90, tmux(), ["/usr/bin/python3", "/srv/other/train.py"], "alice"),
    ]
    s = suggest(runs, T0 - 1)
    assert [g.rule for g in s.proposed] == ["cron-pipeline-2"]
    assert [g.why_not for g in s.not_proposed] == ["started by hand in a shell or tmux"]
    assert (
        "# warning: same script name elsewhere: /srv/other/train.py by user alice (shell 1)"
        in render_yaml(s).splitlines()
    )


def test_every_proposal_loads_and_pins_exactly_what_ran() -> None:
    """Host values went into globs as written: a Slurm job name ``t[z-a]`` made the
    whole file fail check-config, ``train*`` sanctioned every name starting with train,
    and a script path with undecodable bytes gave a file that would not load."""

    def two(origin: dict[str, Any], argv: list[str] | None = None) -> Any:
        return suggest(
            [run(1, T0, T0 + 10, origin, argv), run(2, T0 + 20, T0 + 30, origin, argv)], T0 - 1
        )

    for name, pinned in (("train*", "train[*]"), ("t[z-a]", "t[[]z-a]"), ("a?b", "a[?]b")):
        s = two(SlurmOrigin(job_id=5, job_name=name, account="ml").to_json())
        cfg = parse_config(render_yaml(s), "s.yaml")
        [rule] = cfg.sanctioned
        assert rule.origin.get("slurm_job_name") == pinned
        assert origin_mismatch(rule.origin, SlurmOrigin(job_name=name, account="ml")) is None
        assert origin_mismatch(rule.origin, SlurmOrigin(job_name=name + "x", account="ml"))
    bad = two(cron(), [PY, "/opt/p/tr\udcffain.py"])
    assert bad.proposed == []
    assert [g.why_not.split(" (")[0] for g in bad.not_proposed] == ["its rule would not load"]
    assert parse_config(render_yaml(bad), "s.yaml").sanctioned == ()


def test_one_ambiguous_run_keeps_its_group_from_being_proposed() -> None:
    """A group took the origin of its latest run: when an earlier run could as well have
    come from an identical line elsewhere, the group was proposed anyway."""
    ambiguous = CronOrigin(
        file="/etc/cron.d/pipeline", line=2, user="mlops", schedule="*/5 * * * *",
        entry="...", also=("/etc/cron.d/copy:1",),
    ).to_json()  # fmt: skip
    runs = [run(100, T0 - 600, T0 - 500, ambiguous), *pipeline_runs()]
    s = suggest(runs, T0 - 700)
    assert s.proposed == []
    assert [g.why_not for g in s.not_proposed] == [
        "two origins could explain it (/etc/cron.d/pipeline:2 and /etc/cron.d/copy:1); no pin"
        " separates them"
    ]


def test_a_shell_run_of_the_pipelines_script_is_a_rival() -> None:
    """Someone running the pipeline's script by hand in tmux was "no ghost" and the cron
    line was proposed beside it (issue 35 case 6's class): now it is a rival. The cron
    line is proposed only when --prefer names it, with the run by hand as a suspect."""
    runs = [*pipeline_runs(), run(201, T0 + 50, T0 + 90, tmux(), user="alice")]
    s = suggest(runs, T0 - 1)
    assert s.proposed == [] and s.not_proposed == []
    assert [[(g.origin.kind, g.why_not) for g in c] for c in s.conflicts] == [
        [
            ("cron", "the same script also ran from another origin: choose one with --prefer"),
            ("shell", "started by hand in a shell or tmux"),
        ]
    ]
    chosen = suggest(runs, T0 - 1, prefer=["/etc/cron.d/pipeline:2"])
    assert [g.rule for g in chosen.proposed] == ["cron-pipeline-2"]
    # A person's run is listed, never a "suspected ghost".
    assert [(g.ghost_of, g.why_not) for g in chosen.not_proposed] == [
        (None, "started by hand in a shell or tmux")
    ]
    at = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(T0 + 50))}"
    lines = render_yaml(chosen).splitlines()
    assert lines[lines.index("  - name: cron-pipeline-2") - 1].startswith(
        f"# suspect: also run by hand by alice at {at}"
    )


def test_hostile_command_lines_cannot_break_out_of_a_comment() -> None:
    evil = [PY, "/home/eve/x.py", "\nsanctioned:\n- name: pwn\n  origin: {any: true}"]
    s = suggest([run(401, T0, T0 + 1, tmux(), evil, "eve")], T0 - 1)
    text = render_yaml(s)
    assert parse_config(text, "s.yaml").sanctioned == ()
    assert all(line.startswith("#") or line == "sanctioned: []" for line in text.splitlines())


def test_replay_lists_the_runs_a_tightened_rule_would_flag() -> None:
    runs = [
        run(101, T0, T0 + 200, cron(), verdict="sanctioned"),
        run(102, T0 + 300, T0 + 500, cron(), verdict="sanctioned"),
        run(103, T0 + 400, T0 + 600, cron(), verdict="sanctioned"),
    ]
    cfg = parse_config(
        "sanctioned:\n- name: p\n  cmdline_regex: '^/opt/pipeline/venv/bin/python '\n"
        "  user: mlops\n  origin: {cron_file: /etc/cron.d/pipeline, cron_line: 2}\n"
        "  max_instances: 1\n",
        "tight.yaml",
    )
    changes = replay(runs, cfg)
    assert [(c.run.root_pid, c.was, c.would) for c in changes] == [(103, "sanctioned", "excess")]
    loose = parse_config(cfg.source and "sanctioned: []\n", "empty.yaml")
    assert [(c.run.root_pid, c.would) for c in replay(runs, loose)] == [
        (101, "rogue"), (102, "rogue"), (103, "rogue"),
    ]  # fmt: skip


@pytest.fixture(autouse=True)
def _reset_logging() -> Any:
    # main() points the one-shot commands' log at this test's captured stderr.
    yield
    structlog.reset_defaults()


def test_cli_suggest_and_diff_read_the_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The command reads each crontab line again (a removed one is never proposed): the
    # runs come from a real crontab file.
    crontab = tmp_path / "pipeline"
    entry = f"*/5 * * * * mlops {PY} {SCRIPT}"
    crontab.write_text(f"# pipeline\n{entry}\n")
    db = StateDB(tmp_path / "state")
    now = time.time()
    for i, r in enumerate(pipeline_runs()):
        db.record_run(
            dataclasses.replace(r, origin=cron(str(crontab), 2, entry)), now - 600 + i * 10
        )
    db.close()
    assert (
        main(["allowlist", "suggest", "--state-dir", str(tmp_path / "state"), "--since", "1h"]) == 0
    )
    out = capsys.readouterr().out
    cfg = parse_config(out, "out.yaml")
    assert [(r.name, r.max_instances) for r in cfg.sanctioned] == [("cron-pipeline-2", 1)]
    target = tmp_path / "allow.yaml"
    args = [
        "allowlist", "suggest", "--state-dir", str(tmp_path / "state"), "--since", "1h",
        "--output", str(target),
    ]  # fmt: skip
    assert main(args) == 0
    # The header names the window's start, now - 1h, in whole seconds: the two commands
    # may run either side of a second's edge, so the header is checked by shape.
    written = target.read_text().split("\n", 1)
    shown = out.split("\n", 1)
    assert written[1] == shown[1]
    header = (
        r"# rogue-watchdog allowlist suggest: runs seen since "
        r"\d{4}-\d\d-\d\dT[0-9:]{8}([+-]\d\d:\d\d)"
    )
    assert re.fullmatch(header, written[0]) and re.fullmatch(header, shown[0])
    assert main(args) == 2  # never overwrites
    assert "cannot create" in capsys.readouterr().err
    candidate = tmp_path / "candidate.yaml"
    # The proposal names the history it was learned from: diff replays that one.
    assert out.endswith(f'daemon:\n  state_dir: "{tmp_path}/state"\n')
    candidate.write_text(out)
    os.chmod(candidate, 0o600)
    assert main(["allowlist", "diff", "--config", str(candidate), "--since", "1h"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0].split(" ", 1)[1] for line in lines[:-1]] == [
        "PID 101 rogue -> sanctioned", "PID 102 rogue -> sanctioned",
        "PID 103 rogue -> sanctioned",
    ]  # fmt: skip
    assert lines[-1] == "3 run(s) would change verdict"


def test_suggest_output_says_what_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """First-day report: `allowlist suggest --output FILE` printed nothing after its
    `reading ...state.db` line."""
    crontab = tmp_path / "pipeline"
    entry = f"*/5 * * * * mlops {PY} {SCRIPT}"
    crontab.write_text(f"# pipeline\n{entry}\n")
    db = StateDB(tmp_path / "state")
    now = time.time()
    for i, r in enumerate(pipeline_runs()):
        db.record_run(
            dataclasses.replace(r, origin=cron(str(crontab), 2, entry)), now - 600 + i * 10
        )
    db.close()
    state = ["--state-dir", str(tmp_path / "state"), "--since", "1h"]
    target = tmp_path / "allow.yaml"
    capsys.readouterr()
    assert main(["allowlist", "suggest", *state, "--output", str(target)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"rogue-watchdog: wrote 1 rule to {target}"
    assert target.exists()
    empty = tmp_path / "empty.yaml"
    assert main(["allowlist", "suggest", *state, "--since", "1s", "--output", str(empty)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"rogue-watchdog: wrote no rule to {empty}: nothing to suggest (its comments say why)"
    )


def test_wrote_suggestion_counts_rules_exemptions_and_jobs_left_out() -> None:
    one = suggest(pipeline_runs(), 0.0)
    assert (len(one.proposed), one.exemptions, one.not_proposed) == (1, [], [])
    many = dataclasses.replace(
        one,
        proposed=one.proposed * 2,
        exemptions=["e"],  # only counted
        not_proposed=one.proposed * 3,
    )
    assert wrote_suggestion(many, "/tmp/a b.yaml") == (
        "rogue-watchdog: wrote 2 rules and 1 ignore entry to /tmp/a b.yaml; 3 jobs seen, not "
        "proposed (its comments say why)"
    )


def test_an_empty_window_says_no_job_was_recorded() -> None:
    # A new user got a bare `sanctioned: []` and could not tell "nothing seen" from
    # "nothing proposable".
    text = render_yaml(suggest([], 1_000_000.0))
    assert text.splitlines()[2:] == [
        "# no training job was recorded in this window (the daemon records the runs it "
        "sees; widen --since, or run the daemon longer)",
        "sanctioned: []",
    ]
    assert parse_config(text, "out.yaml").sanctioned == ()


# -- issue 35 case 6: the cron ghost te_bob also started by hand -------------------------

SNEAKY = "/home/te_bob/train_sneaky.py"


def te_ghost_runs(by_hand: list[str]) -> list[RunRecord]:
    """Five runs of /etc/cron.d/te-ghost (user te_bob) and one of the same script that
    te_bob started by hand in tmux (``by_hand``: its command line)."""
    ghost = CronOrigin(
        file="/etc/cron.d/te-ghost", line=1, user="te_bob", schedule="*/5 * * * *",
        entry=f"*/5 * * * * te_bob /usr/bin/python3 {SNEAKY}",
    ).to_json()  # fmt: skip
    hand = ShellOrigin(
        session="tmux session 'sneak'", user="te_bob", tty="/dev/pts/4", tmux_session="sneak"
    ).to_json()
    return [
        *(
            run(500 + i, T0 + 300 * i, T0 + 300 * i + 60, ghost, ["/usr/bin/python3", SNEAKY],
                "te_bob")
            for i in range(5)
        ),
        run(600, T0 + 100, T0 + 160, hand, by_hand, "te_bob"),
    ]  # fmt: skip


def _at(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


@pytest.mark.parametrize(
    "by_hand",
    [
        ["python3", "train_sneaky.py"],  # in his home folder: the path is not recorded
        ["/usr/bin/python3", SNEAKY, "--lr", "1"],
        ["python3", "-u", "/home/te_bob/./train_sneaky.py"],
    ],
)
def test_case6_the_cron_ghost_run_by_hand_too_is_never_proposed(by_hand: list[str]) -> None:
    """Issue 35 case 6. Before: ``/etc/cron.d/te-ghost`` was proposed as rule
    ``cron-te-ghost-1`` (5 runs) and te_bob's run by hand of the same script did not
    count. After: not proposed; the conflict lists the run by hand as a suspect."""
    s = suggest(te_ghost_runs(by_hand), T0 - 1)
    assert s.proposed == [] and s.not_proposed == []
    lines = render_yaml(s).splitlines()
    assert lines[2:] == [
        "sanctioned: []",
        f"# not proposed: /usr/bin/python3 {SNEAKY} runs from 2 origins:",
        "#   cron /etc/cron.d/te-ghost:1 (*/5 * * * *), user te_bob: runs: 5, first seen "
        f"{_at(T0)}, last seen {_at(T0 + 1260)}, GPU-hours 0.00, GPUs: none",
        "#     file /etc/cron.d/te-ghost, line 1, schedule */5 * * * *, last edit file gone",
        f"#   suspect: also run by hand by te_bob at {_at(T0 + 100)} (shell tmux session 'sneak')",
        "#   choose the legitimate one: --prefer FILE:LINE (or the unit)",
    ]
    assert parse_config("\n".join(lines), "s.yaml").sanctioned == ()


def test_case6_prefer_proposes_it_with_the_suspect_named() -> None:
    s = suggest(
        te_ghost_runs(["python3", "train_sneaky.py"]), T0 - 1, prefer=["/etc/cron.d/te-ghost"]
    )
    assert [g.rule for g in s.proposed] == ["cron-te-ghost-1"]
    lines = render_yaml(s).splitlines()
    at = lines.index("  - name: cron-te-ghost-1")
    assert lines[at - 2 : at] == [
        "# cron /etc/cron.d/te-ghost:1 (*/5 * * * *): runs: 5, first seen "
        f"{_at(T0)}, last seen {_at(T0 + 1260)}, GPU-hours 0.00, GPUs: none",
        f"# suspect: also run by hand by te_bob at {_at(T0 + 100)} (shell tmux session 'sneak')",
    ]


def test_case6_diff_marks_every_run_the_ghosts_rule_would_sanction() -> None:
    """Before: five plain ``rogue -> sanctioned`` lines and ``5 run(s) would change
    verdict``. After: each followed by its suspect, and the count says so."""
    runs = te_ghost_runs(["python3", "train_sneaky.py"])
    cfg = parse_config(
        "sanctioned:\n- name: cron-te-ghost-1\n"
        "  cmdline_regex: '^/usr/bin/python3 /home/te_bob/train_sneaky\\.py( |$)'\n"
        "  user: te_bob\n  origin: {cron_file: /etc/cron.d/te-ghost, cron_line: 1}\n",
        "c.yaml",
    )
    text = render_changes(replay(runs, cfg))
    suspect = (
        f"    suspect: also run by hand by te_bob at {_at(T0 + 100)} (shell tmux session 'sneak')"
    )
    expected = []
    for i in range(5):
        expected += [
            f"{_at(T0 + 300 * i)} PID {500 + i} rogue -> sanctioned: `/usr/bin/python3 {SNEAKY}`"
            " (user te_bob, cron /etc/cron.d/te-ghost:1 (*/5 * * * *)): matches rule "
            "'cron-te-ghost-1'",
            suspect,
        ]
    expected.append(
        "5 run(s) would change verdict; 5 would be sanctioned although the same script also "
        "ran from another origin (suspect: review before enforcing)"
    )
    assert text.splitlines() == expected


def test_a_scheduled_rival_is_a_suspect_in_the_diff_too() -> None:
    ghost = cron("/etc/cron.d/old-pipeline", 1)
    runs = [*pipeline_runs(), run(301, T0 + 700, T0 + 800, ghost)]
    cfg = parse_config(
        "sanctioned:\n- name: p\n  cmdline: '*'\n"
        "  origin: {cron_file: /etc/cron.d/pipeline, cron_line: 2}\n",
        "c.yaml",
    )
    changes = replay(runs, cfg)
    assert [(c.run.root_pid, c.would, c.suspects) for c in changes] == [
        (pid, "sanctioned", (f"suspect: also run from cron /etc/cron.d/old-pipeline:1 "
                             f"(*/5 * * * *) by mlops at {_at(T0 + 700)}",))
        for pid in (101, 102, 103)
    ]  # fmt: skip


# -- issue 35 case 7: each run once; removed entries never proposed ----------------------


def test_case7_diff_prints_each_run_once() -> None:
    """A run recorded under two job signatures (its origin read differently after a
    restart) has two rows. Before: PID 102 printed twice, ``4 run(s) would change
    verdict``. After: once each, 3 runs; suggest counts it once too."""
    rows = pipeline_runs()
    again = dataclasses.replace(rows[1], signature="sig2", last_seen=rows[1].last_seen + 5)
    runs = [*rows, again]
    cfg = parse_config(
        "sanctioned:\n- name: p\n  cmdline: '*'\n  max_instances: 2\n"
        "  origin: {cron_file: /etc/cron.d/pipeline, cron_line: 2}\n",
        "c.yaml",
    )
    lines = render_changes(replay(runs, cfg)).splitlines()
    assert [line.split(": ")[0].split(" ", 1)[1] for line in lines[:-1]] == [
        "PID 101 rogue -> sanctioned", "PID 102 rogue -> sanctioned",
        "PID 103 rogue -> sanctioned",
    ]  # fmt: skip
    assert lines[-1] == "3 run(s) would change verdict"
    [g] = suggest(runs, T0 - 1).proposed
    assert (len(g.runs), g.runs[1].last_seen, rule_of(g)["max_instances"]) == (
        3, T0 + 505, 2,
    )  # fmt: skip


def test_one_per_run_merges_the_rows_of_one_run() -> None:
    a = run(7, T0, T0 + 10, cron(), gpu_s=5.0, gpus=["GPU-a"])
    b = dataclasses.replace(
        a, signature="s2", started_at=T0 + 2, last_seen=T0 + 20, gpu_s=3.0, gpus=["GPU-b"],
        verdict="sanctioned", rule="p", max_gpu_bytes=10,
    )  # fmt: skip
    [one] = one_per_run([b, a])
    assert (one.started_at, one.last_seen, one.gpu_s, one.gpus, one.verdict, one.rule) == (
        T0, T0 + 20, 8.0, ["GPU-a", "GPU-b"], "sanctioned", "p",
    )  # fmt: skip
    assert one.max_gpu_bytes == 10


def test_a_run_recorded_from_two_origins_is_not_pinned_to_either() -> None:
    """Two rows of one run naming two crontab lines: merged, it took the last row's line
    and was proposed as if that line surely started it."""
    rows = pipeline_runs()
    other = dataclasses.replace(
        rows[0], signature="s2", origin=cron("/etc/cron.d/other", 4), last_seen=T0 + 250
    )
    s = suggest([*rows, other], T0 - 1)
    assert s.proposed == []
    [conflict] = s.conflicts
    assert [(g.origin.label(), [r.root_pid for r in g.runs], g.why_not) for g in conflict] == [
        (
            "/etc/cron.d/other:4",
            [101],
            "one run's origin was recorded as cron /etc/cron.d/pipeline:2 (*/5 * * * *) and "
            "as cron /etc/cron.d/other:4 (*/5 * * * *)",
        ),
        (
            "/etc/cron.d/pipeline:2",
            [102, 103],
            "the same script also ran from another origin: choose one with --prefer",
        ),
    ]
    # The other reading first: it left no group of its own, and was dropped silently.
    earlier = dataclasses.replace(other, last_seen=T0 + 150)
    s = suggest([*rows, earlier], T0 - 1)
    assert (s.proposed, s.conflicts) == ([], [])
    assert [(len(g.runs), g.why_not) for g in s.not_proposed] == [
        (
            3,
            "one run's origin was recorded as cron /etc/cron.d/pipeline:2 (*/5 * * * *) and "
            "as cron /etc/cron.d/other:4 (*/5 * * * *)",
        )
    ]


@pytest.mark.parametrize("state", ["removed", "disabled", "ignored"])
def test_case7_an_entry_recorded_gone_is_never_proposed(state: str) -> None:
    """Before: ``cron-old-1`` proposed for a crontab line recorded as removed."""
    gone = CronOrigin(
        file="/etc/cron.d/old", line=1, user="mlops", schedule="*/5 * * * *", entry="x",
        entry_state=state,
    ).to_json()  # fmt: skip
    s = suggest([run(700, T0, T0 + 9, gone), run(701, T0 + 300, T0 + 309, gone)], T0 - 1)
    assert s.proposed == []
    why = {
        "removed": "its crontab entry was removed",
        "disabled": "its crontab entry was disabled",
        "ignored": "cron no longer reads its crontab (writable by group or others, or not root's)",
    }[state]
    assert [g.why_not for g in s.not_proposed] == [f"its source is gone ({why})"]


def test_case7_an_entry_removed_after_its_last_run_is_never_proposed(tmp_path: Path) -> None:
    """The runs were recorded while the line was live; it was commented out, then deleted
    with its file, since. Read again now (:func:`source_gone_now`), it is not proposed."""
    tab = tmp_path / "pipeline"
    entry = f"*/5 * * * * mlops {PY} {SCRIPT}"
    tab.write_text(f"# pipeline\n{entry}\n")
    runs = [
        run(100 + i, T0 + 300 * i, T0 + 300 * i + 9, cron(str(tab), 2, entry)) for i in range(2)
    ]
    live = suggest(runs, T0 - 1, gone_now=source_gone_now)
    assert [g.rule for g in live.proposed] == ["cron-pipeline-2"]
    tab.write_text(f"# pipeline\n# {entry}\n")
    s = suggest(runs, T0 - 1, gone_now=source_gone_now)
    assert [g.why_not for g in s.proposed + s.not_proposed] == [
        "its source is gone (its crontab entry is disabled now)"
    ]
    tab.unlink()
    s = suggest(runs, T0 - 1, gone_now=source_gone_now)
    assert [g.why_not for g in s.not_proposed] == [
        "its source is gone (its crontab entry is removed now)"
    ]


def test_a_unit_whose_file_is_gone_is_never_proposed(tmp_path: Path) -> None:
    unit_file = tmp_path / "train.service"
    unit_file.write_text("[Service]\nExecStart=/bin/true\n")
    origin = SystemdOrigin(unit="train.service", unit_file=str(unit_file)).to_json()
    runs = [run(1, T0, T0 + 9, origin), run(2, T0 + 300, T0 + 309, origin)]
    assert [g.rule for g in suggest(runs, T0 - 1, gone_now=source_gone_now).proposed] == ["train"]
    unit_file.unlink()
    s = suggest(runs, T0 - 1, gone_now=source_gone_now)
    assert [g.why_not for g in s.not_proposed] == [
        f"its source is gone (its unit file {unit_file} is gone)"
    ]


def test_a_removed_ghost_is_still_a_rival() -> None:
    """A removed crontab line that ran the pipeline's script is not proposed, and still
    keeps the live line from being proposed silently: which of the two was the ghost is
    the admin's call."""
    gone = CronOrigin(
        file="/etc/cron.d/old-pipeline", line=1, user="mlops", schedule="*/5 * * * *",
        entry="x", entry_state="removed",
    ).to_json()  # fmt: skip
    s = suggest([*pipeline_runs(), run(301, T0 + 700, T0 + 800, gone)], T0 - 1)
    assert s.proposed == []
    assert [[g.why_not for g in c] for c in s.conflicts] == [
        [
            "the same script also ran from another origin: choose one with --prefer",
            "its source is gone (its crontab entry was removed)",
        ]
    ]
    assert "#     its source is gone (its crontab entry was removed)" in render_yaml(s).splitlines()


# -- the script a run names ---------------------------------------------------------------


def test_script_of_resolves_what_the_record_allows() -> None:
    shell = origin_from_json(tmux())
    assert script_of((PY, "//opt/p/./x.py"), shell) == Script("x", "/opt/p/x.py")
    assert script_of(("/opt/bin/trainer",), shell) == Script("trainer", "/opt/bin/trainer")
    assert script_of(("python3", "x.py"), shell) == Script(
        "x", None, "relative path x.py: the working directory is not recorded"
    )
    assert script_of(("python3", "-m", "p.train"), shell) == Script(
        "train", None, "module p.train: its file depends on the interpreter's path"
    )
    assert script_of(("trainer",), shell) == Script(
        "trainer", None, "trainer was found on the PATH, which is not recorded"
    )
    assert script_of(("torchrun", "--nproc_per_node", "8"), shell) == Script(
        "torchrun", None, "torchrun names no script before its options"
    )
    # A crontab line's own `cd DIR &&` is the folder its command runs in.
    for entry in (
        "*/5 * * * * mlops cd /srv/p && python3 train.py --x",
        "@daily cd /srv/p; /usr/bin/python3 -u train.py",
    ):
        origin = origin_from_json(cron(entry=entry))
        head = program_and_script(entry.split(" && ")[-1].split("; ")[-1].split())
        assert script_of(head, origin) == Script("train", "/srv/p/train.py"), entry
    # ... but not a cd to two folders, nor one before a wrapper that runs the script.
    for entry in (
        "* * * * * u cd /a && cd /b && python3 train.py",
        "* * * * * u cd /srv/p && ./run.sh",
    ):
        assert script_of(("python3", "train.py"), origin_from_json(cron(entry=entry))).path is None


def test_an_unresolved_script_is_a_rival_of_any_script_of_its_name() -> None:
    """A relative path from a shell could be the pipeline's script: the safe way to be
    wrong is a rival too many."""
    runs = [*pipeline_runs(), run(201, T0 + 50, T0 + 90, tmux(), ["python3", "train.py"], "bob")]
    s = suggest(runs, T0 - 1)
    assert s.proposed == [] and len(s.conflicts) == 1


def test_a_line_recorded_disabled_and_re_enabled_since_is_read_as_it_stands(
    tmp_path: Path,
) -> None:
    """Fresh user E (issue 33): `suggest`, 5 s after `undo` had put the ghost's line back,
    labelled it `cron …, entry since disabled`. Before: not proposed, `its source is gone
    (its crontab entry was disabled)`, labelled `…, entry since disabled`. After: the
    line as it stands now."""

    tab = tmp_path / "pipeline"
    entry = f"*/5 * * * * mlops {PY} {SCRIPT}"
    tab.write_text(f"# pipeline\n{entry}\n")
    off = {**cron(str(tab), 2, entry), "entry_state": "disabled", "next_run": None}
    runs = [run(100 + i, T0 + 300 * i, T0 + 300 * i + 9, off) for i in range(2)]
    kept = suggest(runs, T0 - 1, gone_now=source_gone_now)  # the records alone
    assert [g.why_not for g in kept.not_proposed] == [
        "its source is gone (its crontab entry was disabled)"
    ]
    s = suggest(runs, T0 - 1, gone_now=source_gone_now, now=origin_now)
    assert [g.rule for g in s.proposed] == ["cron-pipeline-2"]
    assert s.proposed[0].origin.describe() == f"cron {tab}:2 (*/5 * * * *)"
    assert origin_from_json(off).describe() == f"cron {tab}:2 (*/5 * * * *), entry since disabled"
    tab.unlink()  # read now, a line gone now says so as before
    s = suggest(runs, T0 - 1, gone_now=source_gone_now, now=origin_now)
    assert [g.why_not for g in s.not_proposed] == [
        "its source is gone (its crontab entry is removed now)"
    ]


def test_diff_calls_a_run_what_the_daemon_reported_it_as() -> None:
    """Fresh user F (issue 33): `rogue -> ignored: sleep 0.05 ... ignore entry
    'root-probe'` for runs the daemon had reported as `unsanctioned-gpu-use` (warning),
    not as rogue (before, 132b2a1). A rogue run of a class that is not training reads
    `unsanctioned-gpu-use`, as its finding did; a training one stays `rogue`."""
    probe = dataclasses.replace(
        run(201, T0, T0 + 1, tmux(), cmdline=["sleep", "0.05"], user="root"),
        workload="probe", workload_evidence=["ran 1 s"],
    )  # fmt: skip
    trainer = dataclasses.replace(
        run(202, T0 + 5, T0 + 9, tmux(), cmdline=["sleep", "0.05"], user="root"),
        workload="training",
    )
    cfg = parse_config("ignore:\n- {name: root-probe, user: root}\n", "c.yaml")
    lines = render_changes(replay([probe, trainer], cfg)).splitlines()
    assert [line.split(": ")[0].split(" ", 2)[2] for line in lines[:-1]] == [
        "201 unsanctioned-gpu-use -> ignored", "202 rogue -> ignored",
    ]  # fmt: skip
