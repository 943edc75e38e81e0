"""Learning proposes exemptions for what is not training (issue 35, case 8).

The busy box's learning window: the sanctioned-to-be cron pipeline, a user's notebook
kernel, another's inference server, the user's CUDA probe run every 5 s from tmux, and a
display server outside /usr. Before (4ec0a01) the four that are not training were "seen,
not proposed", with no ``ignore`` entry, so enforcing the suggestion paged for them
again. Now each user's class is proposed as an ``ignore`` entry with its evidence, and
the proposal loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import CronOrigin, ShellOrigin
from rogue_watchdog.policy.learn import render_yaml, replay, suggest
from rogue_watchdog.state import RunRecord

T0 = 1_700_000_000.0
PIPELINE = ["/usr/bin/python3", "/opt/pipeline/train.py"]
HAS_CLASS = "workload" in {f.name for f in dataclasses.fields(RunRecord)}


def _run(
    pid: int, start: float, user: str, argv: list[str], origin: dict[str, Any], cls: str, why: str
) -> RunRecord:
    extra: dict[str, Any] = {"workload": cls, "workload_evidence": [why]} if HAS_CLASS else {}
    return RunRecord(
        f"sig-{user}-{argv[-1]}", pid, pid * 10, user, argv, origin, "rogue", None,
        start, start + 60, 60.0, ["GPU-0"], **extra,
    )  # fmt: skip


def busy_box_runs() -> list[RunRecord]:
    cron = CronOrigin(file="/etc/cron.d/pipeline", line=2, user="root", schedule="*/5 * * * *")
    lab = ShellOrigin(session="tmux session 'lab'", user="alice", tmux_session="lab")
    srv = ShellOrigin(session="tmux session 'serve'", user="bob", tmux_session="serve")
    kernel = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/home/alice/k-1.json"]
    vllm = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"]
    probe = ["python3", "/home/alice/bin/cuda_probe.py"]
    out = [
        _run(100 + i, T0 + 300 * i, "root", PIPELINE, cron.to_json(), "training", "launcher")
        for i in range(3)
    ]
    out.append(
        _run(200, T0, "alice", kernel, lab.to_json(), "interactive", "module ipykernel_launcher")
    )
    out.append(
        _run(
            300, T0, "bob", vllm, srv.to_json(), "serving",
            "module vllm.entrypoints.openai.api_server",
        )
    )  # fmt: skip
    out += [
        _run(400 + i, T0 + 5 * i, "alice", probe, lab.to_json(), "probe", "had exited")
        for i in range(5)
    ]
    xorg = ["/opt/X11/bin/Xorg", ":1"]
    out.append(_run(500, T0, "root", xorg, lab.to_json(), "system", "program Xorg"))
    return out


def test_case8_learning_proposes_an_exemption_per_user_and_class() -> None:
    found = suggest(busy_box_runs(), T0 - 60)
    assert [g.rule for g in found.proposed] == ["cron-pipeline-2"]
    assert [(e.user, e.workload, len(e.runs)) for e in found.exemptions] == [
        ("alice", "interactive", 1),
        ("alice", "probe", 5),
        ("bob", "serving", 1),
        ("root", "system", 1),
    ]
    text = render_yaml(found)
    doc = yaml.safe_load(text)
    assert doc["ignore"] == [
        {"name": "alice-interactive", "user": "alice", "class": "interactive"},
        {"name": "alice-probe", "user": "alice", "class": "probe"},
        {"name": "bob-serving", "user": "bob", "class": "serving"},
        {"name": "root-system", "user": "root", "class": "system"},
    ]
    # Each with its evidence above it, for review.
    lines = text.splitlines()
    i = lines.index("  - name: alice-probe")
    assert lines[i - 2].startswith("# probe, user alice: 5 run(s), first seen ")
    assert lines[i - 1] == (
        "#   python3 /home/alice/bin/cuda_probe.py (had exited), from shell tmux session 'lab'"
    )
    # The proposal loads, the shipped defaults kept beside the exemptions.
    config = parse_config(text, "suggested.yaml")
    assert [e.name for e in config.ignore][-4:] == [e["name"] for e in doc["ignore"]]
    assert len(config.ignore) == 10
    # Under it, no run of the window is rogue any more (diff has nothing to show).
    assert {c.would for c in replay(busy_box_runs(), config)} == {"sanctioned", "ignored"}


def test_a_class_exemption_never_covers_the_same_users_training() -> None:
    runs = busy_box_runs()
    config = parse_config(render_yaml(suggest(runs, T0 - 60)), "suggested.yaml")
    lab = ShellOrigin(session="tmux session 'lab'", user="alice", tmux_session="lab")
    trainer = _run(
        600, T0, "alice", ["python3", "/home/alice/train_big.py"], lab.to_json(), "training", "x"
    )
    # replay lists the runs whose verdict would change: the trainer stays rogue.
    changes = replay([*runs, trainer], config)
    assert [c.run.root_pid for c in changes if c.run.user == "alice"] == [
        200,
        400,
        401,
        402,
        403,
        404,
    ]
    assert 600 not in {c.run.root_pid for c in changes}
