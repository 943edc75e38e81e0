"""Issue 35 item 6: a busy shared GPU box, run for three minutes under the shipped config.

The box (tests/system/busybox.py): two real users; a notebook kernel under a Jupyter
server and a vLLM-shaped inference server, both holding GPU memory and listening on
127.0.0.1; an Xorg-like graphics process outside ``/usr/*/Xorg``; a 0.3 s CUDA probe every
5 s from a user's tmux loop; vim, less, ``tail -f``, ``watch grep`` and ``py_compile`` on
training files; the sanctioned pipeline on a private real cron, whose runs overlap; and
two rogues: BOB's nohup'd ``train_sneaky.py`` in his tmux session, and his forgotten
cron line running the same script every minute (the ghost). The fake NVML library lists
the GPU users. Two daemons watch it with config/example.yaml plus only the box's paths:
the *paging* one sanctions the pipeline; the *learning* one is in its learning period,
and ``allowlist suggest`` reads its history.

What a person must be paged for is the two rogues and the pipeline's excess runs, each
once. Everything else on the box is ordinary use of a shared GPU host.

One run of the box (about 3.5 minutes) serves every test in this module. Alerts about
processes outside the box (other tests on a shared host) are never judged; a part of the
box stopped by someone else fails ``test_the_box_ran_undisturbed`` (rerun then).

``bench/busy_box.py`` runs the same box and prints pages per hour.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import need, need_program, need_root
from tests.system.busybox import CRON_LINE, PYTHON, ROGUES, BusyBox, Outcome, Page

pytestmark = pytest.mark.system

DURATION_S = 180.0


@pytest.fixture(scope="module")
def box() -> Iterator[Outcome]:
    need_root()
    need_program("cron", "tmux", "gcc", "vim", "less", "watch", "useradd", "userdel")
    need(os.path.exists(PYTHON), f"needs {PYTHON}")
    bb = BusyBox()
    try:
        out = bb.run(DURATION_S)
        if os.environ.get("BUSYBOX_DUMP"):  # every alert, finding and log, for a look
            out.dump(Path(os.environ["BUSYBOX_DUMP"]))
        yield out
    finally:
        bb.close()


def _pages(out: Outcome, daemon: str) -> list[Page]:
    return [p for p in out.mine(daemon) if p.is_page]


def _show(pages: list[Page]) -> str:
    return "\n".join(f"{p.event} {p.severity} {p.kind} [{p.role}] {p.message[:200]}" for p in pages)


def _findings(out: Outcome, role: str) -> list[dict[str, Any]]:
    return [f for f in out.findings if f["role"] == role]


def test_the_box_ran_undisturbed(box: Outcome) -> None:
    # Nothing but this module stops a part of the box; if something did (another test's
    # enforcing daemon on a shared host), the numbers below are not the box's.
    assert box.signals == [] and box.lost == []
    assert box.window_s >= DURATION_S
    for role in ("kernel", "vllm", "xorg", "rogue", "jupyter"):
        assert len(box.pids(role)) == 1, (role, box.roles)
    assert len(box.pids("probe")) >= 20  # every 5 s plus its own 0.3 s, for 3 minutes
    assert len(box.pids("ghost")) >= 2  # cron's minute came at least twice
    assert len(box.pids("pipeline")) >= 2


def test_both_rogues_are_found_with_their_origin(box: Outcome) -> None:
    (nohup,) = box.pids("rogue")
    found = [f for f in _findings(box, "rogue") if f["kind"] == "rogue-job"]
    assert found and all(f["root_pid"] == nohup for f in found)
    assert all(f["severity"] == "high" for f in found)
    assert f"user {box.users['bob']}, `python3 " in found[0]["message"]
    assert "from shell tmux session `sneak`" in found[0]["message"]
    assert found[0]["details"]["origin_kind"] == "shell"
    ghost = [f for f in _findings(box, "ghost") if f["kind"] == "rogue-job"]
    assert ghost, box.findings
    where = f"from cron {box.cron_files['ghost']}:{CRON_LINE} (* * * * *)"
    assert all(where in f["message"] for f in ghost), [f["message"] for f in ghost]
    assert {f["severity"] for f in ghost} == {"high"}


def test_the_pipeline_is_never_rogue_and_its_overlaps_are_excess(box: Outcome) -> None:
    pages = [p for p in _pages(box, "paging") if p.role == "pipeline"]
    assert pages, "no overlapping run of the pipeline was paged"
    assert {p.kind for p in pages} == {"excess-instances"}, _show(pages)
    assert all(p.root_pid in box.pids("pipeline") for p in pages)
    for p in pages:
        # The pipeline's own line is never a target: stop the run, keep the source.
        assert "rogue-watchdog disable-source" not in p.message, p.message
        assert "flock -n" in p.message, p.message
    kinds = {f["kind"] for f in _findings(box, "pipeline")}
    assert kinds == {"excess-instances"}, kinds


def test_what_only_mentions_training_raises_nothing(box: Outcome) -> None:
    # vim, less, tail -f, watch grep, py_compile on train.py, a tmux window named
    # `train`, the users' shells and tmux servers: none is a part with a role, so any
    # finding about them is attributed to "<user>:other".
    others = {"alice:other", "bob:other", "box:other"}
    assert [f["message"] for f in box.findings if f["role"] in others] == []
    for daemon in ("paging", "learning"):
        assert _show([p for p in box.mine(daemon) if p.role in others]) == ""


def test_no_false_high_page(box: Outcome) -> None:
    # The notebook, the inference server, the graphics process and the probe are GPU
    # use on a shared box, not training a person must stop: warnings at most.
    false = [p for p in _pages(box, "paging") if p.high and not p.true]
    assert _show(false) == ""


def test_each_incident_is_paged_once(box: Outcome) -> None:
    # Each rogue exactly once: the ghost's runs every minute are one periodic finding,
    # and GPU memory appearing a tick after the open is part of the open, not a reminder.
    # Each excess run at most once (the first excess run at least).
    pages = [p for p in _pages(box, "paging") if p.high]
    per = Counter(p.incident for p in pages)
    assert {r: per[r] for r in ROGUES} == {r: 1 for r in ROGUES}, _show(pages)
    excess = {k: n for k, n in per.items() if k.startswith("excess:")}
    assert excess and set(excess.values()) == {1}, _show(pages)


def test_learning_pages_nothing_high(box: Outcome) -> None:
    # During daemon.learn_until every finding about a job opens at info, rogue-service
    # included: learning watches, it does not page.
    assert _show([p for p in _pages(box, "learning") if p.high]) == ""


def test_suggest_proposes_the_pipeline_only(box: Outcome) -> None:
    assert box.suggest_rc == 0, box.suggest
    doc = yaml.safe_load(box.suggest) or {}
    rules = box.proposed()
    assert [(r["user"], r["origin"]) for r in rules] == [
        ("root", {"cron_file": str(box.cron_files["pipeline"]), "cron_line": CRON_LINE})
    ], box.suggest
    assert rules[0]["cmdline_regex"].startswith(f"^{PYTHON} "), rules[0]
    # Nothing proposed (rules, exemptions) names the rogues' script; the comments say why
    # the ghost is not proposed: its user also ran the script by hand.
    assert "train_sneaky" not in json.dumps(doc), box.suggest
    assert f"suspect: also run by hand by {box.users['bob']} at " in box.suggest
