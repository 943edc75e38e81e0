"""Verdicts: command line AND user AND origin, then max_instances by age."""

from __future__ import annotations

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import Job, Origin, Proc, origin_from_json
from rogue_watchdog.policy.allowlist import judge

CFG = parse_config(
    """
sanctioned:
  - name: pipeline
    cmdline: "/usr/bin/python3 /opt/pipe/train.py*"
    user: mlops
    origin: {systemd_unit: "train-pipeline*.service"}
    max_instances: 2
  - name: weekly
    cmdline_regex: "retrain\\\\.py"
    origin: {cron_file: /etc/cron.d/retrain, cron_line: 4}
  - name: research
    cmdline: "*"
    origin: {slurm_account: research, slurm_job_name: "exp-*"}
""",
    "t.yaml",
)

UNIT = origin_from_json({"kind": "systemd", "unit": "train-pipeline.service"})
CRON = origin_from_json({"kind": "cron", "file": "/etc/cron.d/legacy", "line": 7})


def job(pid: int, cmd: str, user: str, origin: Origin) -> Job:
    proc = Proc(pid, 1, pid * 10, "S", "python3", cmdline=tuple(cmd.split()), user=user)
    return Job(pid, [pid], user, proc.cmdline, pid * 10, None, [], [proc], origin=origin)


def test_same_script_from_cron_is_rogue_and_says_why() -> None:
    jobs = [job(10, "/usr/bin/python3 /opt/pipe/train.py --epochs 3", "mlops", CRON)]
    jobs = judge(jobs, CFG)
    assert jobs[0].verdict == "rogue"
    assert jobs[0].reason == (
        "not sanctioned: rule 'pipeline' matches the command line but origin must be "
        "systemd unit 'train-pipeline*.service'"
    )


def test_instances_over_the_cap_are_excess_oldest_win() -> None:
    cmd = "/usr/bin/python3 /opt/pipe/train.py"
    jobs = [job(p, cmd, "mlops", UNIT) for p in (10, 20, 30)]
    jobs = judge(jobs, CFG)
    assert [j.verdict for j in jobs] == ["sanctioned", "sanctioned", "excess"]
    assert jobs[2].rule == "pipeline"
    assert jobs[2].reason == (
        "rule 'pipeline' allows 2 instance(s); this is instance 3 (running: root PIDs 10, 20)"
    )


def test_wrong_user_is_rogue() -> None:
    jobs = [job(10, "/usr/bin/python3 /opt/pipe/train.py", "alice", UNIT)]
    jobs = judge(jobs, CFG)
    assert jobs[0].verdict == "rogue"
    assert "user must be 'mlops', is 'alice'" in jobs[0].reason


def test_cron_line_pin_and_slurm_pins() -> None:
    right = origin_from_json({"kind": "cron", "file": "/etc/cron.d/retrain", "line": 4})
    wrong = origin_from_json({"kind": "cron", "file": "/etc/cron.d/retrain", "line": 5})
    slurm = origin_from_json(
        {"kind": "slurm", "job_id": "7", "account": "research", "job_name": "exp-3"}
    )
    other = origin_from_json(
        {"kind": "slurm", "job_id": "8", "account": "research", "job_name": "legacy"}
    )
    jobs = [
        job(1, "python retrain.py", "root", right),
        job(2, "python retrain.py", "root", wrong),
        job(3, "python x.py", "bob", slurm),
        job(4, "python x.py", "bob", other),
    ]
    jobs = judge(jobs, CFG)
    assert [(j.verdict, j.rule) for j in jobs] == [
        ("sanctioned", "weekly"),
        ("rogue", None),
        ("sanctioned", "research"),
        ("rogue", None),
    ]
    assert "origin must be cron file '/etc/cron.d/retrain' line 4" in jobs[1].reason


def test_empty_allowlist_makes_everything_rogue() -> None:
    jobs = [job(10, "torchrun train.py", "root", UNIT)]
    jobs = judge(jobs, parse_config("", "e.yaml"))
    assert (jobs[0].verdict, jobs[0].reason) == ("rogue", "not sanctioned: the allowlist is empty")


def test_unit_pin_never_sanctions_another_users_unit_of_that_name() -> None:
    # Any user can write ~/.config/systemd/user/train.service running the same script.
    config = parse_config(
        "sanctioned:\n"
        "  - name: pipeline\n    cmdline: '*/train.py'\n"
        "    origin: {systemd_unit: train.service}\n"
        "  - name: mlops-own\n    cmdline: '*/own.py'\n    user: mlops\n"
        "    origin: {systemd_unit: own.service}\n"
    )
    user_unit = origin_from_json(
        {"kind": "systemd", "unit": "train.service", "user": "eve", "uid": 1001}
    )
    system_unit = origin_from_json({"kind": "systemd", "unit": "train.service"})
    own = origin_from_json({"kind": "systemd", "unit": "own.service", "user": "mlops", "uid": 1002})
    jobs = [
        job(10, "/usr/bin/python3 /srv/train.py", "eve", user_unit),
        job(11, "/usr/bin/python3 /srv/train.py", "svc", system_unit),
        job(12, "/usr/bin/python3 /srv/own.py", "mlops", own),
    ]
    jobs = judge(jobs, config)
    assert [j.verdict for j in jobs] == ["rogue", "sanctioned", "sanctioned"]
    assert jobs[0].reason.endswith(
        "origin is user `eve`'s own unit `train.service`; a unit pin matches a user unit "
        "only with 'user:' naming its owner"
    )
