"""Real cron + real tmux: a learning period, ``allowlist suggest``, enforcing it, ``diff``.

During learning a cron pipeline runs and a person starts a one-off in tmux; ``suggest``
proposes exactly the pipeline (its cron file and line, user, max_instances) and lists the
tmux job as not proposed; ``check-config`` accepts the file. Under it the pipeline's next
run is sanctioned and a ghost started later from another cron file with the same script is
rogue; ``allowlist diff`` against a rule tightened to another line lists the run it would
flag.

Issue 35 cases 6 and 7 on real cron and a real user's tmux session: a cron ghost whose
script its user also started by hand is never proposed, and ``diff`` marks its runs; a
script of the same name in another folder is another job (warned, proposed); a crontab
line removed since its run is never proposed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rogue_watchdog.config import Rule, parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import need, need_program, need_root, run_cli
from tests.system.cronharness import PYTHON, CronHarness

pytestmark = pytest.mark.system


def _daemon(text: str) -> Daemon:
    return Daemon(parse_config(text, "learn.yaml"), None)


def mine(rules: Sequence[Rule], h: CronHarness) -> list[Rule]:
    """The proposed rules for this test's jobs: other tests on the host run cron jobs too,
    and the daemon sees the whole host."""
    return [r for r in rules if r.cmdline_regex and str(h.sandbox) in r.cmdline_regex.pattern]


def _ticks(d: Daemon, n: int) -> None:
    for _ in range(n):
        d.tick(time.time())
        time.sleep(0.5)


def rules_only(suggested: str, state: object) -> str:
    """The rules of a `suggest` file, as docs/first-week.md says to copy them: its closing
    ``daemon: state_dir`` (the history it read, for `allowlist diff`) is checked and cut."""
    head, sep, tail = suggested.partition("\ndaemon:\n")
    assert sep and tail.strip() == f'state_dir: "{state}"', suggested[-300:]
    return head + "\n"


def test_learn_suggest_enforce_and_diff_on_real_cron(tmp_path: Path) -> None:
    need_root()
    need_program("cron", "tmux", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    sock = str(h.sandbox / "tmux.sock")
    try:
        h.ensure_cron()
        pipe = h.trainer("pipeline")
        adhoc = h.trainer("adhoc")
        cron_d = h.add_cron_d(
            ["# pipeline", 'MAILTO=""', "SHELL=/bin/sh", f"* * * * * root {PYTHON} {pipe}"]
        )
        subprocess.run(
            ["tmux", "-S", sock, "new-session", "-d", "-s", "exp", f"{PYTHON} {adhoc}"],
            check=True,
        )
        first = h.wait_for([pipe], h.seconds_to_fire() + 12)[pipe]
        state = h.sandbox / "state"
        base = "nvml: {enabled: false}\n"
        learning = _daemon(base + f"daemon: {{state_dir: '{state}', learn_until: 1h}}\n")
        _ticks(learning, 3)
        seen = {j.root_pid: j for j in learning.last.result.jobs} if learning.last else {}
        assert seen[first].verdict == "rogue"
        # The one-off must have been seen while learning (else nothing below says anything).
        one_off = [j for j in seen.values() if j.cmdline == (PYTHON, str(adhoc))]
        assert [j.origin.kind for j in one_off] == ["shell"], sorted(
            (j.root_pid, j.cmdline) for j in seen.values()
        )
        os.kill(first, signal.SIGKILL)  # the run ends before the next one starts
        time.sleep(0.5)
        _ticks(learning, 1)
        learning.db.close()

        out = run_cli(
            "allowlist", "suggest", "--state-dir", str(state), "--since", "1h", "--min-runs", "1"
        )
        assert out.returncode == 0, out.stderr
        suggested = parse_config(out.stdout, "suggested.yaml")
        # Only this test's jobs: other tests on the host run cron jobs of their own.
        assert [
            (r.origin.get("cron_file"), r.origin.get("cron_line"), r.user, r.max_instances)
            for r in suggested.sanctioned
            if r.cmdline_regex is not None and str(h.sandbox) in r.cmdline_regex.pattern
        ] == [(str(cron_d), 4, "root", 1)]
        not_proposed = [
            line for line in out.stdout.splitlines() if line.startswith("# seen, not proposed: ")
        ]
        assert [line for line in not_proposed if str(adhoc) in line] == [
            line
            for line in not_proposed
            if line.startswith(f"# seen, not proposed: `{PYTHON} {adhoc}` (user root, shell")
            and ": started by hand in a shell or tmux; runs: 1," in line
        ]
        assert any(str(adhoc) in line for line in not_proposed), out.stdout
        cfg_file = h.sandbox / "allowlist.yaml"
        cfg_file.write_text(
            rules_only(out.stdout, state) + base + f"daemon: {{state_dir: '{state}'}}\n"
        )
        cfg_file.chmod(0o600)
        check = run_cli("check-config", str(cfg_file))
        assert check.returncode == 0, check.stderr

        # A retired cron file running the pipeline's own script (another shell command).
        ghost_d = h.add_cron_d(['MAILTO=""', f"* * * * * root cd / && {PYTHON} {pipe}"])
        deadline = time.monotonic() + h.seconds_to_fire() + 12
        while len(h.ours(pipe)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        enforcing = Daemon(parse_config(cfg_file.read_text(), str(cfg_file)), str(cfg_file))
        _ticks(enforcing, 3)
        assert enforcing.last is not None and enforcing.last.result is not None
        verdicts = sorted(
            (str(j.origin.fields.get("file")), j.verdict)
            for j in enforcing.last.result.jobs
            if j.cmdline == (PYTHON, str(pipe))
        )
        assert verdicts == sorted([(str(cron_d), "sanctioned"), (str(ghost_d), "rogue")])
        sanctioned_pid = next(
            j.root_pid
            for j in enforcing.last.result.jobs
            if j.cmdline == (PYTHON, str(pipe)) and j.verdict == "sanctioned"
        )
        enforcing.db.close()

        tight = h.sandbox / "tight.yaml"
        tight.write_text(cfg_file.read_text().replace("cron_line: 4", "cron_line: 5"))
        tight.chmod(0o600)
        diff = run_cli("allowlist", "diff", "--config", str(tight), "--since", "1h")
        assert diff.returncode == 1, diff.stdout + diff.stderr
        flagged = [
            line.split(": ")[0].split(" ", 1)[1]
            for line in diff.stdout.splitlines()[:-1]
            if "sanctioned -> rogue" in line and str(pipe) in line
        ]
        assert flagged == [f"PID {sanctioned_pid} sanctioned -> rogue"], diff.stdout
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
        with contextlib.suppress(Exception):
            h.close()


def test_one_script_from_two_cron_files_is_never_proposed_silently(tmp_path: Path) -> None:
    need_root()
    need_program("cron", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    try:
        h.ensure_cron()
        pipe = h.trainer("pipeline")
        cron_d = h.add_cron_d(['MAILTO=""', f"* * * * * root {PYTHON} {pipe}"])
        ghost_d = h.add_cron_d(['MAILTO=""', f"* * * * * root cd / && {PYTHON} {pipe}"])
        deadline = time.monotonic() + h.seconds_to_fire() + 12
        while len(h.ours(pipe)) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        state = h.sandbox / "state"
        learning = _daemon(
            f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{state}', learn_until: 1h}}\n"
        )
        _ticks(learning, 3)
        learning.db.close()
        args = ("allowlist", "suggest", "--state-dir", str(state), "--since", "1h")
        out = run_cli(*args, "--min-runs", "1")
        assert out.returncode == 0, out.stderr
        assert mine(parse_config(out.stdout, "s.yaml").sanctioned, h) == []
        lines = out.stdout.splitlines()
        assert f"# not proposed: {PYTHON} {pipe} runs from 2 origins:" in lines
        for path in (cron_d, ghost_d):
            assert any(
                line.startswith(f"#     file {path}, line 2, schedule * * * * *, last edit ")
                for line in lines
            ), out.stdout
        chosen = run_cli(*args, "--min-runs", "1", "--prefer", f"{cron_d}:2")
        assert chosen.returncode == 0, chosen.stderr
        rules = mine(parse_config(chosen.stdout, "s.yaml").sanctioned, h)
        assert [(r.origin.get("cron_file"), r.origin.get("cron_line")) for r in rules] == [
            (str(cron_d), 2)
        ]
        ghosts = [line for line in chosen.stdout.splitlines() if "suspected ghost" in line]
        assert len(ghosts) == 1 and f"cron {ghost_d}:2 " in ghosts[0], chosen.stdout
        assert (
            f"suspected ghost: runs the same script as the preferred cron {cron_d}:2 (* * * * *)"
        ) in ghosts[0]
    finally:
        with contextlib.suppress(Exception):
            h.close()


def test_case6_and_7_ghost_run_by_hand_namesake_and_removed_line_on_real_cron(
    tmp_path: Path,
) -> None:
    need_root()
    need_program("cron", "tmux", "pgrep", "useradd", "userdel", "runuser")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    sock_dir = h.sandbox / "tmux"
    sock = str(sock_dir / "sock")
    bob = ""
    try:
        h.ensure_cron()
        bob = h.add_user()  # te_bob
        pipe, other, sneaky, retired = (
            h.trainer(n) for n in ("pipeline", "other", "sneaky", "retired")
        )  # every one is .../train_fake.py: one bare name, four paths
        pipe_d = h.add_cron_d(['MAILTO=""', f"* * * * * root {PYTHON} {pipe}"])
        other_d = h.add_cron_d(['MAILTO=""', f"* * * * * {bob} {PYTHON} {other}"])
        ghost_d = h.add_cron_d(['MAILTO=""', f"* * * * * {bob} {PYTHON} {sneaky}"])
        retired_d = h.add_cron_d(['MAILTO=""', f"* * * * * root {PYTHON} {retired}"])
        h.wait_for([pipe, other, sneaky, retired], h.seconds_to_fire() + 12)
        # te_bob starts the ghost's script by hand, in his own tmux session.
        sock_dir.mkdir(mode=0o700)
        shutil.chown(sock_dir, bob)
        subprocess.run(
            ["runuser", "-u", bob, "--", "tmux", "-S", sock, "new-session", "-d", "-s",
             "sneak", f"{PYTHON} {sneaky}"],
            check=True,
        )  # fmt: skip
        state = h.sandbox / "state"
        learning = _daemon(
            f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{state}', learn_until: 1h}}\n"
        )
        _ticks(learning, 3)
        seen = learning.last.result.jobs if learning.last and learning.last.result else []
        kinds = sorted((j.origin.kind, j.user) for j in seen if j.cmdline == (PYTHON, str(sneaky)))
        assert kinds == [("cron", bob), ("shell", bob)], kinds
        learning.db.close()
        retired_d.unlink()  # removed after its run was recorded
        os.utime("/etc/cron.d")

        args = ("allowlist", "suggest", "--state-dir", str(state), "--since", "1h")
        out = run_cli(*args, "--min-runs", "1")
        assert out.returncode == 0, out.stderr
        rules = mine(parse_config(out.stdout, "s.yaml").sanctioned, h)
        assert sorted((r.origin.get("cron_file"), r.user) for r in rules) == sorted(
            [(str(pipe_d), "root"), (str(other_d), bob)]
        ), out.stdout
        lines = out.stdout.splitlines()
        # Case 7: the other folder's train_fake.py is warned about, never a ghost.
        assert any(
            line.startswith(
                f"# warning: same script name elsewhere: {other} by user {bob} (cron {other_d}:2"
            )
            for line in lines
        ), out.stdout
        assert not any("ghost" in line and str(other) in line for line in lines), out.stdout
        # Case 7: the removed line is not proposed, and says why.
        assert any(
            line.startswith(f"# seen, not proposed: `{PYTHON} {retired}` (user root, cron ")
            and "its source is gone (its crontab entry is removed now)" in line
            for line in lines
        ), out.stdout
        # Case 6: the ghost is not proposed; te_bob's run by hand is its suspect.
        at = lines.index(f"# not proposed: {PYTHON} {sneaky} runs from 2 origins:")
        assert lines[at + 1].startswith(f"#   cron {ghost_d}:2 (* * * * *), user {bob}: runs: 1,")
        assert lines[at + 3].startswith(f"#   suspect: also run by hand by {bob} at "), out.stdout
        assert "tmux" in lines[at + 3]

        # Enforcing the ghost's rule anyway (--prefer): diff marks each of its runs.
        chosen = run_cli(*args, "--min-runs", "1", "--prefer", f"{ghost_d}:2")
        assert chosen.returncode == 0, chosen.stderr
        cfg_file = h.sandbox / "candidate.yaml"
        cfg_file.write_text(
            rules_only(chosen.stdout, state) + f"daemon: {{state_dir: '{state}'}}\n"
        )
        cfg_file.chmod(0o600)
        diff = run_cli("allowlist", "diff", "--config", str(cfg_file), "--since", "1h")
        assert diff.returncode == 1, diff.stdout + diff.stderr
        dl = diff.stdout.splitlines()
        ghost_runs = [
            i for i, line in enumerate(dl)
            if "rogue -> sanctioned" in line and f"`{PYTHON} {sneaky}` (user {bob}, cron" in line
        ]  # fmt: skip
        assert len(ghost_runs) == 1, diff.stdout
        assert dl[ghost_runs[0] + 1].startswith(f"    suspect: also run by hand by {bob} at ")
        pipe_runs = [line for line in dl if "rogue -> sanctioned" in line and str(pipe) in line]
        assert len(pipe_runs) == 1, diff.stdout  # each run once
        after = dl[dl.index(pipe_runs[0]) + 1]
        assert not after.startswith("    suspect:"), diff.stdout
    finally:
        if bob:
            subprocess.run(
                ["runuser", "-u", bob, "--", "tmux", "-S", sock, "kill-server"],
                capture_output=True,
            )
        with contextlib.suppress(Exception):
            h.close()
