"""The ``disable-source`` hint names what is backed up for the source it disables.

A fresh user (first day, sandbox from docs/first-week.md) read ``rogue-watchdog
disable-source … F3 (backs up the crontab; …)`` in status, scan and explain for a line
in a ``cron.d`` file: every cron origin said ``the crontab``, whatever its file. Now: a
user's crontab (the spool file, what ``crontab -l`` lists), a ``cron.d`` file (the
configured folder, a sandbox's included), ``/etc/crontab`` by name, and a run-parts
script, which is renamed aside (nothing is copied).
"""

from __future__ import annotations

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import CronOrigin, Job, Origin, SystemdOrigin
from rogue_watchdog.policy.guard import protection, with_advice

UNDO = "; the undo command it prints, with the action id, restores it)"


def _hint(origin: Origin, config_text: str = "") -> str:
    """The stop-source hint of a rogue job of ``origin``, as status/scan/explain say it."""
    job = Job(
        root_pid=4242, pids=[4242], user="alice",
        cmdline=("/usr/bin/python3", "/opt/legacy/train.py"), start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=origin, verdict="rogue",
        reason="not sanctioned",
    )  # fmt: skip
    config = parse_config(config_text, "/w/c.yaml")
    [judged] = with_advice([job], protection([job], config), config=config)
    hint = judged.advice.stop_source("F3")
    assert hint is not None
    return hint


def _cron(file: str, script: str | None = None) -> CronOrigin:
    return CronOrigin(
        file=file, line=4, user="alice", schedule="* * * * *", entry="* * * * * x",
        remediation=f"sed -i '4s/^/# /' {file}", script=script,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("file", "paths", "said"),
    [
        # Before: `(backs up the crontab; …)` for each of the cron ones.
        ("/etc/cron.d/legacy-retrain", "", "backs up the cron.d file /etc/cron.d/legacy-retrain"),
        (
            "/srv/sandbox/crond/legacy-retrain",
            "paths: {cron_d: /srv/sandbox/crond}\n",
            "backs up the cron.d file /srv/sandbox/crond/legacy-retrain",
        ),
        ("/etc/crontab", "", "backs up /etc/crontab"),
        (
            "/var/spool/cron/crontabs/alice",
            "",
            "backs up the user crontab of alice (what crontab -l lists for it)",
        ),
        (
            "/srv/sandbox/spool/bob",
            "paths: {cron_spool: [/srv/sandbox/spool]}\n",
            "backs up the user crontab of bob (what crontab -l lists for it)",
        ),
    ],
)
def test_a_cron_hint_names_the_file_it_backs_up(file: str, paths: str, said: str) -> None:
    hint = _hint(_cron(file), paths)
    assert hint.startswith(f"rogue-watchdog disable-source --config /w/c.yaml F3 ({said}{UNDO}")
    assert "the crontab;" not in hint


def test_a_run_parts_hint_says_the_script_is_renamed() -> None:
    origin = _cron("/etc/crontab", script="/etc/cron.daily/retrain")
    hint = _hint(origin)
    assert "(renames /etc/cron.daily/retrain aside (run-parts skips it)" + UNDO in hint, hint


def test_other_kinds_keep_their_words() -> None:
    unit = SystemdOrigin(unit="retrain.service", remediation="systemctl disable --now x")
    assert unit.disables_text() == "backs up the unit states"
    assert Origin().disables_text() is None
