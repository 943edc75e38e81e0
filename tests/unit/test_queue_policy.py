"""queue: settings, findings for unsanctioned entries, home-grown queues, enforcer guards."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.config.queue import QueueRule, QueueSettings
from rogue_watchdog.model import NvmlStatus, ScanResult
from rogue_watchdog.policy.guard import ScanProtection
from rogue_watchdog.queue.actions import QueueEnforcer, build_queue_enforcers
from rogue_watchdog.queue.generic import CommandQueue, parse_json_lines
from rogue_watchdog.queue.model import QueueEntry
from rogue_watchdog.queue.slurm import QueueError, SlurmQueue
from rogue_watchdog.queue.source import (
    QueueSource,
    build_queue_sources,
    entry_finding,
    one_shot_queue_findings,
    queue_findings,
)
from rogue_watchdog.state import StateDB

T0 = 1_700_000_000.0

# A scan whose guard protects nothing (no sanctioned job, no pin): queue rules decide.
SCAN = ScanResult("h", datetime.now(UTC), 0.0, NvmlStatus(False), protection=ScanProtection())


def entry(job_id: str = "3", **kw: object) -> QueueEntry:
    vals: dict[str, object] = dict(
        queue="slurm", job_id=job_id, user="svc-old", account=None, partition="gpu",
        name="legacy-retrain", state="PENDING", reason="Priority", submit_time=T0,
        priority=100, requests_gpu=True,
    )  # fmt: skip
    vals.update(kw)
    return QueueEntry(**vals)  # type: ignore[arg-type]


def test_queue_section_parses() -> None:
    cfg = parse_config(
        "queue:\n  slurm: auto\n  command: /usr/local/bin/gpuq list --json\n"
        "  action: hold\n  command_timeout_s: 3\n  sanctioned:\n"
        "    - {name: pipeline, user: svc-train, job_name: 'retrain-*'}\n",
        "t.yaml",
    )
    q = cfg.queue
    assert (q.slurm, q.command, q.action, q.command_timeout_s) == (
        None, ("/usr/local/bin/gpuq", "list", "--json"), "hold", 3.0,
    )  # fmt: skip
    assert q.sanctioned == (QueueRule("pipeline", user="svc-train", job_name="retrain-*", line=7),)
    assert parse_config("queue: {slurm: false}\n").queue.slurm is False


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "queue: {slurm: maybe}",
            "t.yaml:1: queue.slurm: expected true, false or auto, got 'maybe'",
        ),
        ("queue: {action: kill}", "queue.action: must be none, hold or cancel, got 'kill'"),
        ("queue:\n  sanctioned:\n    - {name: x}", "queue.sanctioned[0]: needs at least one of"),
        ("queue:\n  sanctioned:\n    - {user: x}", "queue.sanctioned[0].name: required key"),
        (
            "queue:\n  sanctioned:\n    - {name: a, user: x}\n    - {name: a, user: y}",
            "t.yaml:4: queue.sanctioned[1].name: duplicate rule name 'a'",
        ),
        ("queue: {command: []}", "queue.command: must not be empty"),
        ("queue: {owner: x}", "unknown key 'owner'"),
    ],
)
def test_queue_section_errors(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "t.yaml")
    assert error in str(exc.value)


def test_rules_need_every_pinned_key_and_never_match_unknown_values() -> None:
    rule = QueueRule("r", user="svc-*", account="ml")
    assert rule.matches(entry(user="svc-train", account="ml"))
    assert not rule.matches(entry(user="svc-train", account="other"))
    assert not rule.matches(entry(user="svc-train", account=None))
    assert QueueRule("n", job_name="legacy-*").matches(entry())


def test_findings_pending_and_running_only_unsanctioned() -> None:
    settings = QueueSettings(sanctioned=(QueueRule("ok", user="alice"),))
    entries = [
        entry("1", user="alice"),
        entry("2"),
        entry("3", state="RUNNING", reason=None, start_time=T0 + 60, account="ml"),
        entry("4", state="COMPLETED"),
        entry("5", user=None, name=None, reason="JobHeldAdmin", priority=0),
    ]
    out = queue_findings(entries, settings)
    assert [f.details["job_id"] for f in out] == ["2", "3", "5"]
    when = entry_finding(entry()).message.split(" since ")[1].split(" ")[0]
    assert out[0].message == (
        f"Slurm job 2 `legacy-retrain` by user svc-old waiting for a GPU since {when} "
        "(partition gpu, reason Priority); to remove it: scancel 2"
    )
    assert out[1].message.startswith("Slurm job 3 `legacy-retrain` by user svc-old running since")
    assert "(account ml, partition gpu)" in out[1].message
    assert out[2].message.startswith("Slurm job 5 (no name) by user unknown waiting")
    assert out[2].message.endswith("; held; to remove it: scancel 5")
    d = out[0].details
    assert (d["fingerprint"], d["state"], d["queue_state"], d["job_name"], d["user"]) == (
        "slurm:2", "pending", "PENDING", "legacy-retrain", "svc-old",
    )  # fmt: skip
    assert all((f.kind, f.severity) == ("queue-unsanctioned", "high") for f in out)


def test_json_lines_queue() -> None:
    text = (
        '{"id": 17, "user": "svc-old", "name": "legacy-retrain", "state": "waiting",'
        ' "submitted": "2025-03-01T02:00:00+00:00", "gpus": 2}\n'
        "\n"
        '{"job_id": "18", "job_name": "ok", "pool": "a100", "state": "running",'
        ' "started": 1700000000}\n'
        "not json\n"
        '{"user": "x"}\n'
        "[1]\n"
    )
    entries, problems = parse_json_lines(text)
    assert [(e.job_id, e.name, e.phase, e.partition) for e in entries] == [
        ("17", "legacy-retrain", "pending", None),
        ("18", "ok", "running", "a100"),
    ]
    assert entries[0].submit_time == 1740794400.0 and entries[0].extra == {"gpus": 2}
    assert entries[1].start_time == 1700000000.0
    assert problems == ["line 4: not JSON", "line 5: no id", "line 6: not an object"]
    f = entry_finding(entries[0])
    assert f.message.startswith("command queue job 17 `legacy-retrain` by user svc-old waiting")
    assert "scancel" not in f.message


def test_command_queue_runs_a_real_command(tmp_path: Path) -> None:
    script = tmp_path / "gpuq.py"
    script.write_text(
        'import sys\nprint(\'{"id": "1", "user": "bob", "state": "queued"}\')\n'
        "print('oops')\nsys.exit(int(sys.argv[1]))\n"
    )
    settings = QueueSettings(slurm=False, command=(sys.executable, str(script), "0"))
    source = QueueSource(CommandQueue(settings.command or ()), settings)
    out = source.findings(T0, None)
    assert [f.kind for f in out] == ["queue-unsanctioned", "queue-output-malformed"]
    assert (
        out[1].message
        == "queue:command: 1 line(s) of the queue command's output were ignored (line 2: not JSON)"
    )
    failing = CommandQueue((sys.executable, str(script), "3"))
    with pytest.raises(QueueError, match="exit 3"):
        failing.entries()
    cfg = parse_config(f"queue: {{slurm: false, command: [{sys.executable}, {script}, '3']}}")
    assert [s.name for s in build_queue_sources(cfg)] == ["queue:command"]
    (warn,) = one_shot_queue_findings(cfg)
    assert (warn.kind, warn.severity) == ("queue-unavailable", "warning")
    assert parse_config("queue: {slurm: false}").queue.command is None
    assert build_queue_sources(parse_config("queue: {slurm: false}")) == []


class FakeSlurm(SlurmQueue):
    """Slurm whose listing and ``scontrol show`` answers the test sets."""

    def __init__(self, entries: list[QueueEntry], now: dict[str, QueueEntry | None]) -> None:
        super().__init__()
        self._entries = entries
        self.now = now

    def entries(self) -> list[QueueEntry]:
        return list(self._entries)

    def show(self, job_id: str) -> QueueEntry | None:
        return self.now.get(job_id)


def _setup(
    tmp_path: Path, entries: list[QueueEntry], now: dict[str, QueueEntry | None], action: str,
    rc: int = 0,
) -> tuple[QueueSource, QueueEnforcer, StateDB, RecordingRunner]:  # fmt: skip
    settings = QueueSettings(
        sanctioned=(QueueRule("ok", user="alice"),),
        action=action,  # type: ignore[arg-type]
    )
    source = QueueSource(FakeSlurm(entries, now), settings)
    db = StateDB(tmp_path / "state")
    runner = RecordingRunner(
        default=CommandResult(rc, "", "" if rc == 0 else "Access/permission denied")
    )
    return source, QueueEnforcer(source, settings, db, mode="terminate", runner=runner), db, runner


def test_enforcer_guards(tmp_path: Path) -> None:
    pending, running = entry("2"), entry("3", state="RUNNING")
    held = entry("4", reason="JobHeldUser", priority=0)
    weird = entry("-h")  # never passed to scontrol as an option
    now: dict[str, QueueEntry | None] = {
        "2": pending,
        "3": running,
        "4": held,
        "-h": weird,
    }
    source, enf, db, runner = _setup(tmp_path, [pending, running, held, weird], now, "hold")
    source.findings(T0, None)
    assert enf.act(T0, SCAN, None) == []
    assert runner.calls == [("scontrol", "hold", "2")]  # not running, held, or odd ids
    # Sanctioned by the time of the re-check (e.g. the listing was stale): untouched.
    now["5"] = entry("5", user="alice")
    source.backend._entries = [entry("5")]  # type: ignore[attr-defined]
    source.findings(T0, None)
    enf.act(T0, SCAN, None)
    # Gone by the time of the re-check: untouched.
    source.backend._entries = [entry("6")]  # type: ignore[attr-defined]
    now["6"] = None
    source.findings(T0, None)
    enf.act(T0, SCAN, None)
    assert runner.calls == [("scontrol", "hold", "2")]
    assert [(a.kind, a.target, a.outcome) for a in db.actions()] == [
        ("scontrol-hold", "slurm job 2", "ok")
    ]


def test_enforcer_failure_is_a_finding_and_retried_later(tmp_path: Path) -> None:
    e = entry("7", state="RUNNING")
    source, enf, db, runner = _setup(tmp_path, [e], {"7": e}, "cancel", rc=1)
    source.findings(T0, None)
    (failed,) = enf.act(T0, SCAN, None)
    assert (failed.kind, failed.details["fingerprint"]) == ("remediation-failed", "queue:scancel:7")
    assert "Access/permission denied" in failed.message
    assert enf.act(T0 + 10, SCAN, None) == []  # not before retry_s
    assert len(runner.calls) == 1
    assert len(enf.act(T0 + 301, SCAN, None)) == 1
    assert [a.outcome for a in db.actions()] == ["failed: `Access/permission denied`"] * 2
    assert all(a.undo is None for a in db.actions())


def test_enforcers_only_in_terminate_mode_with_an_action(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "s")
    base = "queue: {slurm: true, action: hold}\n"
    cfg = parse_config(base)
    sources = build_queue_sources(cfg)
    assert build_queue_enforcers(cfg, db, sources) == []  # observe mode
    cfg = parse_config(base + "enforcement: {mode: terminate}\n")
    (enf,) = build_queue_enforcers(cfg, db, build_queue_sources(cfg))
    assert enf.enabled and enf.settings.action == "hold"
    cfg = parse_config("queue: {slurm: true}\nenforcement: {mode: terminate}\n")
    assert build_queue_enforcers(cfg, db, build_queue_sources(cfg)) == []  # action none


def test_the_guard_keeps_a_sanctioned_jobs_slurm_job_and_pinned_accounts(tmp_path: Path) -> None:
    """Trust IV: queue actions take their targets from the one guard. The Slurm job a
    sanctioned training job runs in, and an entry of an account the allowlist pins, are
    never cancelled, whatever the queue rules say."""
    from rogue_watchdog.model import Job, SlurmOrigin
    from rogue_watchdog.policy.guard import protection

    running = entry("8", state="RUNNING")
    pinned = entry("9", state="RUNNING", account="research")
    other = entry("10", state="RUNNING")
    now: dict[str, QueueEntry | None] = {"8": running, "9": pinned, "10": other}
    source, enf, _db, runner = _setup(tmp_path, [running, pinned, other], now, "cancel")
    config = parse_config(
        "sanctioned:\n  - name: research\n    cmdline: '*train.py*'\n"
        "    origin: {slurm_account: research}\n",
        "c.yaml",
    )
    job = Job(
        50, [50], "bob", ("python3", "train.py"), 1, None, [], [],
        origin=SlurmOrigin(job_id=8, account="sweeps"), verdict="sanctioned", rule="x",
    )  # fmt: skip
    scan = ScanResult(
        "h", datetime.now(UTC), 0.0, NvmlStatus(False), jobs=[job],
        protection=protection([job], config),
    )  # fmt: skip
    source.findings(T0, None)
    assert enf.act(T0, scan, None) == []
    assert runner.calls == [("scancel", "10")]
