"""``allowlist suggest`` and ``allowlist diff`` on recorded runs (watchdog.policy.learn)."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from watchdog.cli import main
from watchdog.config import ConfigError, parse_config
from watchdog.model import (
    CronOrigin,
    Origin,
    ShellOrigin,
    SlurmOrigin,
    SupervisorOrigin,
    SystemdOrigin,
)
from watchdog.policy.allowlist import origin_mismatch
from watchdog.policy.learn import (
    head_regex,
    max_concurrent,
    program_and_script,
    render_yaml,
    replay,
    strongest_pin,
    suggest,
)
from watchdog.state import RunRecord, StateDB

T0 = 1_700_000_000.0
PY = "/opt/pipeline/venv/bin/python"
SCRIPT = "/opt/pipeline/train.py"


def cron(file: str = "/etc/cron.d/pipeline", line: int = 2) -> dict[str, Any]:
    return CronOrigin(
        file=file, line=line, user="mlops", schedule="*/5 * * * *", entry="..."
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
    assert strongest_pin(Origin.from_json(cron())) == {
        "cron_file": "/etc/cron.d/pipeline", "cron_line": 2,
    }  # fmt: skip
    assert strongest_pin(Origin.from_json(tmux())) is None


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
        line.startswith(f"# seen, not proposed: {PY} /home/alice/exp.py (user alice, shell")
        and "started by hand in a shell or tmux; runs: 1" in line
        for line in comments
    ), text


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


def test_two_jobs_sharing_a_name_are_both_proposed_when_both_are_preferred() -> None:
    """Erring towards "the same job" must leave a way out: --prefer names both."""
    other = cron("/etc/cron.d/team-b", 3)
    runs = [
        *pipeline_runs(),
        run(301, T0 + 700, T0 + 800, other, [PY, "/srv/team-b/train.py"]),
        run(302, T0 + 900, T0 + 950, other, [PY, "/srv/team-b/train.py"]),
    ]
    assert suggest(runs, T0 - 1).proposed == []
    both = suggest(runs, T0 - 1, prefer=["/etc/cron.d/pipeline:2", "/etc/cron.d/team-b:3"])
    assert [g.rule for g in both.proposed] == ["cron-pipeline-2", "cron-team-b-3"]


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


def test_a_shell_run_of_the_pipelines_script_is_no_ghost() -> None:
    """Someone running the script by hand in tmux is listed, not a rival origin: the
    pipeline is still proposed."""
    s = suggest([*pipeline_runs(), run(201, T0 + 50, T0 + 90, tmux(), user="alice")], T0 - 1)
    assert [g.rule for g in s.proposed] == ["cron-pipeline-2"]
    assert [g.why_not for g in s.not_proposed] == ["started by hand in a shell or tmux"]


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
    db = StateDB(tmp_path / "state")
    now = time.time()
    for i, r in enumerate(pipeline_runs()):
        db.record_run(r, now - 600 + i * 10)
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
    candidate.write_text(out + f"daemon: {{state_dir: '{tmp_path}/state'}}\n")
    os.chmod(candidate, 0o600)
    assert main(["allowlist", "diff", "--config", str(candidate), "--since", "1h"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0].split(" ", 1)[1] for line in lines[:-1]] == [
        "PID 101 rogue -> sanctioned", "PID 102 rogue -> sanctioned",
        "PID 103 rogue -> sanctioned",
    ]  # fmt: skip
    assert lines[-1] == "3 run(s) would change verdict"


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
