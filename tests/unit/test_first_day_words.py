"""What a first-day user read that was wrong (session j): each test asserts the text or
exit code the user gets, and failed before its fix."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.cli import main
from rogue_watchdog.config import ConfigError, load_config, parse_config
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.procfs import boot_id
from rogue_watchdog.state import StateDB
from tests.unit.test_trust_hostile import PY, cron_chain, host

RULE = "sanctioned:\n  - {name: my-sleeper, cmdline: '*train.py*', origin: {any: true}}\n"
MATCHED = datetime(2026, 12, 7, 5, 17, 23, tzinfo=UTC)
MID_RUN = (
    "sanctioned by rule 'my-sleeper' from 2026-12-07T05:17:23Z (matched while it ran; it "
    "was rogue before); kept for its life"
)


def _rescan(tmp_path: Path, before: Scanner, extra: str, now: datetime) -> tuple[Scanner, list]:
    """A config reload (the daemon's): a new Scanner keeping what the old one knew."""
    cfg = tmp_path / "config.yaml"
    base = cfg.read_text().replace(RULE, "")
    cfg.write_text(base + extra)
    scanner = Scanner(load_config(str(cfg)))
    scanner.keep_origins_of(before)
    return scanner, scanner.scan(now).jobs


def test_a_rule_added_while_it_ran_is_not_said_to_have_sanctioned_it_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = Scanner(load_config(str(host(tmp_path, cron_chain()))))
    (job,) = [j for j in first.scan().jobs if j.root_pid == 903]
    assert job.verdict == "rogue"
    # The operator adds the rule while it runs: sanctioned from then, for its life.
    added, jobs = _rescan(tmp_path, first, RULE, MATCHED)
    assert [(j.verdict, j.reason) for j in jobs if j.root_pid == 903] == [
        ("sanctioned", "matches rule 'my-sleeper'")
    ]
    # ...and stays sanctioned once the rule is gone, with when it became so.
    removed, jobs = _rescan(tmp_path, added, "", MATCHED)
    (job,) = [j for j in jobs if j.root_pid == 903]
    assert (job.verdict, job.reason) == (
        "sanctioned",
        MID_RUN + " (now: no rule matches its command line)",
    )
    (changed,) = [f for f in removed.scan(MATCHED).findings if f.kind == "sanctioned-changed"]
    assert changed.message == (
        f"sanctioned job PID 903 `{PY} /opt/pipeline/train.py` stays sanctioned by rule "
        "'my-sleeper' until it exits: it was from 2026-12-07T05:17:23Z (matched while it "
        "ran; it was rogue before) (its crontab entry was removed; if it started now: no rule "
        "matches its command line); a "
        "new run is judged by the rules and the source as they are then"
    )
    # What the daemon records is what a one-shot explain reads.
    db = StateDB(str(tmp_path / "state"))
    db.set_sanctioned_procs(
        removed.sanctioned, boot_id(str(tmp_path / "proc")), 0.0, removed.sanctioned_matched
    )
    db.close()
    cfg = tmp_path / "config.yaml"
    assert main(["explain", "903", "--config", str(cfg)]) == 0
    assert MID_RUN in capsys.readouterr().out


def test_a_process_sanctioned_at_its_first_look_still_says_when_it_started(
    tmp_path: Path,
) -> None:
    first = Scanner(load_config(str(host(tmp_path, cron_chain(), extra=RULE))))
    first.scan()
    _, jobs = _rescan(tmp_path, first, "", MATCHED)
    (job,) = [j for j in jobs if j.root_pid == 903]
    assert job.reason.startswith(
        "sanctioned by rule 'my-sleeper' when it started; kept for its life"
    )


def test_already_undone_says_when_in_iso_8601_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")
    db = StateDB(str(tmp_path / "state"))
    aid = db.record_action("cli:root", "terminate", "PID 42", "ok", {}, 0.0, undo={"op": "x"})
    db.mark_undone(aid, MATCHED.timestamp())
    db.close()
    assert main(["undo", str(aid), "--config", str(cfg)]) == 1
    assert capsys.readouterr().out == (f"action {aid} was already undone at 2026-12-07T05:17:23Z\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "enforcement: {mode: obsrve}",
            "enforcement.mode: must be observe or terminate, got 'obsrve'",
        ),
        (
            "services: {sanctioned_ports: [{name: x, port: 80, proto: sctp}]}",
            "services.sanctioned_ports[0].proto: must be tcp or udp, got 'sctp'",
        ),
        (
            "alerts: {sinks: [{type: log, name: o, min_severity: loud}]}",
            "alerts.sinks[0].min_severity: must be one of info, warning, high, critical, "
            "got 'loud'",
        ),
        ("queue: {slurm: maybe}", "queue.slurm: expected true, false or auto, got 'maybe'"),
        (
            "slurm: {drain_on: [rogu]}",
            "slurm.drain_on[0]: expected one of ('rogue', 'excess'), got 'rogu'",
        ),
        # What was written is host text: quoted, its control characters escaped.
        (
            'enforcement: {mode: "obs\\nerve\\u202e"}',
            "enforcement.mode: must be observe or terminate, got 'obs\\nerve\\u202e'",
        ),
    ],
)
def test_an_enum_error_echoes_the_value_written(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text + "\n", "c.yaml")
    assert str(exc.value) == "c.yaml:1: " + message


REPO = Path(__file__).resolve().parents[2]


def test_gpu_view_without_nvml_is_documented_as_it_behaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # By design (docs/status.md, docs/scan-json-schema.md): while NVML is unavailable no
    # job can be placed, so `--gpu N` lists every job with a note; exit 2 is only for a
    # GPU NVML, answering, does not list. The README said exit 2 for both.
    cfg = host(tmp_path, cron_chain())
    assert main(["scan", "--gpu", "0", "--config", str(cfg)]) == 1  # the rogue job's finding
    out = capsys.readouterr().out.splitlines()
    assert out[3] == (
        "GPU 0: NVML is unavailable, so no job can be placed on a GPU: every training job is listed"
    )
    rows = {
        line.split("|")[1].strip(): line.split("|")[3].strip()
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| `rogue-watchdog scan [")
        or line.startswith("| `rogue-watchdog status [")
    }
    assert rows["`rogue-watchdog scan [--config F] [--gpu N] [--json]`"].endswith(
        "2 usage/config error or a `--gpu N` that NVML, answering, does not list (while NVML is "
        "unavailable, `--gpu N` lists every job with a note and the exit code follows the "
        "findings)"
    )
    assert (
        "2 usage or a `--gpu N` that NVML, answering, does not list (while NVML is "
        in (rows["`rogue-watchdog status [--gpu N] [--severity LEVEL] [--limit N] [--json]`"])
    )
