"""The incident's week, replayed against real cron with the real daemon (every minute
instead of Sundays 02:00).

Seven events, one running ``rogue-watchdog run`` subprocess, the operator's CLI:

1. the pipeline, pinned to its cron line with ``max_instances: 1``
   (``flock -n SANDBOX/a.lock python3 SANDBOX/week/train_fake.py``, file A line 4);
2. the ghost: the same script from a retired cron file (file B line 4, ``b.lock``).
   ``disable-source`` comments B out while the ghost still runs; past the 30 s origin
   reuse and into the pipeline's next run, the ghost stays "started by B:4, entry since
   disabled", the pipeline's next run stays sanctioned, and ``terminate F<ghost>``
   still finds the live ghost;
3. a kill and a respawn (file C): ``terminate`` it, cron starts it again: ``respawned``;
4. an unknown queue entry (a home-grown queue command): ``queue-unsanctioned``;
5. a retired service on its own port, started with ``setsid`` and launching a trainer:
   ``rogue-service`` naming the port, "started the run";
6. 224 all-NaN tensors shipped by a fallback: ``poisoned-weights``;
7. a deploy that silently stopped: ``deploy-stale``.

Finally nothing of the pipeline was ever called rogue, excess, or a source to disable.
Wall time: the wait for cron's next minute plus one more minute (about 2-2.5 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rogue_watchdog.cli import build_parser
from rogue_watchdog.render import COMMAND_WORDS
from tests.conftest import Spawned, need, need_program, need_root, poll, run_cli
from tests.system.cronharness import PYTHON, CronHarness
from tests.system.test_respawn_cron import DaemonProc, _check_alive, _query, _start_daemon
from tests.weights.builders import st_array, write_safetensors

pytestmark = pytest.mark.system

# Sleeps as long as its crontab says (TRAIN_S), so one script serves the pipeline (a
# short run that ends before the next minute) and the ghost (a long one).
TRAINER = "import os, time\ntime.sleep(float(os.environ.get('TRAIN_S', '120')))\n"
SERVICE = """import json, os, socket, subprocess, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
child = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "train_job.py")])
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"port": s.getsockname()[1], "pid": os.getpid(), "child": child.pid}, fh)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""
NAMES = [f"model.layers.{i // 7}.proj{i % 7}.weight" for i in range(224)]


def _findings(d: DaemonProc, kind: str | None = None) -> list[dict[str, Any]]:
    if not (d.state_dir / "state.db").exists():
        return []
    sql = "SELECT * FROM findings" + (" WHERE kind=?" if kind else "") + " ORDER BY id"
    rows = _query(d.state_dir, sql, (kind,) if kind else ())
    return [{**dict(r), "details": json.loads(r["details_json"])} for r in rows]


def _one(d: DaemonProc, kind: str, pred: Any = lambda f: True) -> dict[str, Any] | None:
    _check_alive(d)
    found = [f for f in _findings(d, kind) if pred(f)]
    return found[0] if found else None


def _origin_of(d: DaemonProc, pid: int) -> dict[str, Any]:
    # One row per run (job_runs): ``jobs`` keeps one row per signature, so the next
    # minute's run of the same cron line replaces its root PID there. The row is written
    # on the tick that first sees the run, which may come after another job's finding.
    def rows_() -> list[Any] | None:
        sql = "SELECT origin_json FROM job_runs WHERE root_pid=?"
        return _query(d.state_dir, sql, (pid,)) or None

    rows = poll(f"PID {pid}'s run row", rows_, 30)
    assert len(rows) == 1, f"PID {pid}: {len(rows)} run rows"
    origin: dict[str, Any] = json.loads(rows[0]["origin_json"])
    return origin


def _flock_of(pid: int) -> str:
    """The lock path of the flock wrapping ``pid`` (tells the pipeline from the ghost)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
    argv = Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0")
    return argv[2].decode() if len(argv) > 2 and argv[0].endswith(b"flock") else ""


#: Everything the operator's commands printed during the week (hints are pasted from it).
PRINTED: list[str] = []


def _cli(config: Path, *args: str) -> tuple[int, str]:
    res = run_cli(*args, "--config", str(config), timeout=120)
    PRINTED.append(res.stdout + res.stderr)
    return res.returncode, res.stdout + res.stderr


# A printed command: the program, its verb, then words up to the text around it (a
# bracket, a semicolon, a comma, a backtick); a quoted path may hold anything but '.
VERBS = sorted(
    next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
)
HINT = re.compile(
    rf"rogue-watchdog (?:{'|'.join(map(re.escape, VERBS))})(?![\w-])"
    r"(?: (?:'[^']*'|[^\s;,()`']+))*"
)
#: Verbs that act: pasted with --dry-run (the hint's own words otherwise unchanged).
ACTS = ("terminate", "disable-source", "undo")


def hints(texts: list[str]) -> dict[str, str]:
    """Every ``rogue-watchdog VERB ...`` command in ``texts``, once each, in order, with
    the text that printed it; a verb named alone in backticks (```rogue-watchdog undo`
    restores it``) is prose."""
    found: dict[str, str] = {}
    for text in texts:
        for m in HINT.finditer(text):
            cmd = m.group(0).rstrip(".:")
            if text[m.end() : m.end() + 1] == "`" and len(cmd.split()) == 2:
                continue
            found.setdefault(cmd, text)
    return found


def paste(cmd: str) -> tuple[int, str]:
    """Run a printed command as a person pastes it into a root shell elsewhere: from /,
    with the installed ``rogue-watchdog`` on PATH and no test pin on which daemon to ask;
    an acting one with ``--dry-run`` added."""
    env = {k: v for k, v in os.environ.items() if k != "ROGUE_WATCHDOG_SOCKET"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    assert cmd.split()[1] != "ship", cmd  # it writes a deploy directory: not pasted here
    line = cmd + (" --dry-run" if cmd.split()[1] in ACTS else "")
    done = subprocess.run(
        line, shell=True, cwd="/", env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout + done.stderr


def test_the_week(spawned: Spawned) -> None:
    need_root()
    need_program("cron", "pgrep", "flock")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    daemon: DaemonProc | None = None
    try:
        h.ensure_cron()
        sb = h.sandbox
        week = h.trainer("week")
        week.write_text(TRAINER)
        respawner = h.trainer("respawn")
        lock_a, lock_b = sb / "a.lock", sb / "b.lock"
        pipe_cmd = f"flock -n {lock_a} {PYTHON} {week}"
        ghost_cmd = f"flock -n {lock_b} {PYTHON} {week}"
        file_a = h.add_cron_d(
            ["# the pipeline", 'MAILTO=""', "TRAIN_S=40", f"* * * * * root {pipe_cmd}"]
        )
        file_b = h.add_cron_d(
            ["# retired", 'MAILTO=""', "TRAIN_S=600", f"* * * * * root {ghost_cmd}"]
        )
        file_c = h.add_cron_d(
            ["# retired too", 'MAILTO=""', "", f"* * * * * root {PYTHON} {respawner}"]
        )
        # The ghost's kin: a line that runs a wrapper script, which daemonises the trainer.
        xtrain = h.trainer("x")
        launcher = xtrain.parent / "launch_bg.sh"
        launcher.write_text(f"#!/bin/sh\nsetsid {PYTHON} {xtrain} >/dev/null 2>&1 &\n")
        launcher.chmod(0o755)
        file_d = h.add_cron_d(["# wrapper", 'MAILTO=""', "", f"* * * * * root {launcher}"])
        fire_at = time.time() + h.seconds_to_fire()

        # Event 4: an unknown entry in a home-grown queue.
        gpuq = sb / "gpuq"
        gpuq.write_text(
            "#!/bin/sh\necho '"
            '{"id": "17", "user": "svc-old", "name": "legacy-retrain", "state": "waiting"}'
            "'\n"
        )
        gpuq.chmod(0o755)
        # Events 6 and 7: a NaN model in one deploy dir; a deploy that stopped in another.
        deploy, serve, runs = sb / "deploy", sb / "serve", sb / "runs"
        for p in (deploy, serve, runs):
            p.mkdir()
        nan = np.full((4, 8), np.nan, dtype=np.float16)
        poisoned = write_safetensors(
            deploy / "model.safetensors", {n: st_array(nan, "F16") for n in NAMES}
        )
        good = np.ones((4, 8), dtype=np.float16)
        served = write_safetensors(
            serve / "model.safetensors", {n: st_array(good, "F16") for n in NAMES[:4]}
        )
        newer = write_safetensors(
            runs / "ckpt-200.safetensors", {n: st_array(good, "F16") for n in NAMES[:4]}
        )
        now = time.time()
        os.utime(served, (now - 80 * 3600, now - 80 * 3600))
        os.utime(newer, (now - 30 * 3600, now - 30 * 3600))

        root = sb / "daemon"
        root.mkdir()
        config = root / "config.yaml"
        config.write_text(
            "nvml:\n  enabled: false\n"
            f"daemon:\n  interval_s: 1\n  state_dir: {root / 'state'}\n"
            f"  socket: {root / 's.sock'}\n"
            f"alerts:\n  sinks:\n    - {{type: log, path: {root / 'alerts.log'}}}\n"
            "sanctioned:\n  - name: pipeline\n"
            f"    cmdline: '{PYTHON} {week}'\n"
            f"    origin: {{cron_file: {file_a}, cron_line: 4}}\n"
            "    max_instances: 1\n"
            f"queue:\n  slurm: false\n  command: [{gpuq}]\n"
            "ship_gates:\n"
            f"  - {{name: prod, deploy_dir: {deploy}}}\n"
            f"  - {{name: serve, deploy_dir: {serve}, train_dir: {runs}, stale_after_s: 3600}}\n"
        )
        daemon = _start_daemon(sb, "week", config)

        # Event 5: a retired service, started with setsid from a shell that exits.
        svc_dir = sb / "svc"
        svc_dir.mkdir()
        (svc_dir / "old_service.py").write_text(SERVICE)
        (svc_dir / "train_job.py").write_text("import time\ntime.sleep(300)\n")
        ports = svc_dir / "ports.json"
        spawned.start(
            ["/bin/sh", "-c", f"{PYTHON} {svc_dir / 'old_service.py'} {ports} & exit 0"],
            env={"PATH": "/usr/bin:/bin"},
        ).wait(timeout=10)
        svc = poll("the service", lambda: ports.exists() and json.loads(ports.read_text()), 20)

        d = daemon
        queue = poll("queue-unsanctioned", lambda: _one(d, "queue-unsanctioned"), 60)
        service = poll(
            "rogue-service",
            lambda: _one(d, "rogue-service", lambda f: f["root_pid"] == svc["child"]),
            60,
        )
        poison = poll("poisoned-weights", lambda: _one(d, "poisoned-weights"), 60)
        stale = poll("deploy-stale", lambda: _one(d, "deploy-stale"), 60)

        # Cron's minute: the pipeline, the ghost and the respawner start.
        time.sleep(max(0.0, fire_at - time.time()))
        pids = poll("pipeline and ghost", lambda: len(h.ours(week)) == 2 and h.ours(week), 40)
        by_lock = {_flock_of(p): p for p in pids}
        pipe1, ghost = by_lock[str(lock_a)], by_lock[str(lock_b)]
        first = h.wait_for([respawner], 40)[respawner]
        ghost_f = poll(
            "ghost finding", lambda: _one(d, "rogue-job", lambda f: f["root_pid"] == ghost), 30
        )
        # The hint carries the daemon's --config: pasted anywhere, it acts under the
        # configuration and on the state database that made it (issue 33).
        assert (
            f"; to stop the source: rogue-watchdog disable-source --config {config} "
            f"F{ghost_f['id']} (backs up the "
            f"cron.d file {file_b}; the undo command it prints, "
            "with the action id, restores it), or by hand: sed -i "
            f"'4s/^/# disabled by rogue-watchdog: /' {file_b}"
        ) in ghost_f["message"]
        origin = _origin_of(d, ghost)
        assert (origin["file"], origin["line"], origin.get("entry_state")) == (str(file_b), 4, None)
        assert _origin_of(d, pipe1)["file"] == str(file_a)
        xpid = h.wait_for([xtrain], 40)[xtrain]
        x_f = poll(
            "wrapper finding", lambda: _one(d, "rogue-job", lambda f: f["root_pid"] == xpid), 30
        )
        x_origin = _origin_of(d, xpid)
        assert (x_origin["kind"], x_origin["file"], x_origin["line"]) == ("cron", str(file_d), 4)
        assert (x_origin["launch_script"], x_origin["confidence"]) == (str(launcher), "high")
        d_before = file_d.read_bytes()
        rc, out = _cli(config, "disable-source", f"F{x_f['id']}")
        assert rc == 0, out
        assert file_d.read_text().splitlines()[3].startswith("# disabled by rogue-watchdog at ")
        found = re.search(r"\(action (\d+)\)", out)
        assert found, out
        x_action = int(found.group(1))
        c_f = poll(
            "respawner finding", lambda: _one(d, "rogue-job", lambda f: f["root_pid"] == first), 30
        )

        # Fix the ghost's source while it runs; kill the respawner.
        rc, out = _cli(config, "disable-source", f"F{ghost_f['id']}")
        assert rc == 0, out
        assert file_b.read_text().splitlines()[3].startswith("# disabled by rogue-watchdog at ")
        disabled_at = time.time()
        rc, out = _cli(config, "terminate", f"F{c_f['id']}")
        # Its cron line still runs: stopped, but it will come back (issue 31, case 4).
        assert rc == 1, out
        assert (
            "outcome: will-return\nwill come back: its source restarts it; disable-source first\n"
        ) in out, out

        # The pipeline's next run (its first ended after 40 s) and the respawn.
        second = h.wait_for([respawner], 75 + fire_at - time.time())[respawner]
        pipe2 = poll(
            "the pipeline's next run",
            lambda: next((p for p in h.ours(week) if p not in (pipe1, ghost)), None),
            75 + fire_at - time.time(),
        )
        assert _flock_of(pipe2) == str(lock_a)
        respawned = poll(
            "respawned",
            lambda: _one(
                d, "respawned", lambda f: f["details"]["origin"].get("file") == str(file_c)
            ),
            60,  # the comeback is at the next minute's tick; the run is slower under load
        )
        # Past the daemon's 30 s origin reuse, with the pipeline's next run seen.
        poll("30 s after the disable", lambda: time.time() - disabled_at > 32, 40)
        poll(
            "the daemon sees the next run",
            lambda: _query(d.state_dir, "SELECT 1 FROM jobs WHERE root_pid=?", (pipe2,)),
            20,
        )
        time.sleep(3)

        # -- event 1 and 2: the ghost keeps its origin, the pipeline stays sanctioned ----
        rc, out = _cli(config, "explain", str(ghost))
        assert f"evidence: started by {file_b}:4, entry since disabled" in out, out
        # explain says each fact once: no "(kind cron)" after a description that starts with it.
        assert f"Origin: cron {file_b}:4 (* * * * *), entry since disabled" in out.splitlines()
        assert (
            "Remediation: none needed for the source (its crontab entry was disabled); the "
            f"running job must still be stopped: rogue-watchdog terminate --config {config} {ghost}"
        ) in out
        ghost_now = _findings(d, "rogue-job")
        ghost_open = [f for f in ghost_now if f["id"] == ghost_f["id"]]
        assert ghost_open and ghost_open[0]["resolved_at"] is None  # still running, still open
        origin = _origin_of(d, ghost)  # the daemon's own view, re-resolved since
        assert (origin["file"], origin["line"], origin["entry_state"]) == (
            str(file_b),
            4,
            "disabled",
        )
        assert any(
            e.startswith(f"started by {file_b}:4, entry since disabled") for e in origin["evidence"]
        ), origin["evidence"]
        jobs = {r["root_pid"]: r for r in _query(d.state_dir, "SELECT * FROM jobs")}
        assert jobs[pipe2]["verdict"] == "sanctioned"
        pipeline_pids = {pipe1, pipe2}
        for f in _findings(d):
            where = f"finding {f['id']} {f['kind']}: {f['message']}"
            assert f["root_pid"] not in pipeline_pids, where
            assert f["details"].get("origin", {}).get("file") != str(file_a), where
            stop = f["message"].partition("to stop")[2]
            assert str(file_a) not in stop, where
            assert f["kind"] != "excess-instances", where
        # `terminate F<ghost>` finds the live ghost (not "is not running").
        rc, out = _cli(config, "terminate", f"F{ghost_f['id']}")
        assert rc == 0, out
        assert f"PID {ghost}" in out

        # The wrapper's line, disabled, did not start another trainer at the next minute.
        assert h.ours(xtrain) == [xpid]
        # The admin undoes that fix: the file is back byte for byte.
        rc, out = _cli(config, "undo", str(x_action))
        assert rc == 0, out
        assert file_d.read_bytes() == d_before

        # -- the week as data: `report --since 1h` shows each event in order ----------
        rc_report = run_cli(
            "report", "--state-dir", str(d.state_dir), "--since", "1h", "--format", "json"
        )
        assert rc_report.returncode == 0, rc_report.stderr
        timeline = json.loads(rc_report.stdout)["timeline"]
        assert [e["time"] for e in timeline] == sorted(e["time"] for e in timeline)

        def at(what: str, prefix: str) -> int:
            hits = [
                i
                for i, e in enumerate(timeline)
                if e["what"] == what and e["text"].startswith(prefix)
            ]
            assert hits, (what, prefix, timeline)
            return hits[0]

        for f in (queue, service, poison, stale, ghost_f, c_f, respawned):
            at("opened", f"F{f['id']} ")
        # The fix follows what it fixed: the ghost's source disabled after its finding
        # opened; C's run terminated after its finding, and its respawn after that.
        assert at("opened", f"F{ghost_f['id']} ") < at("action", "A") <= len(timeline)
        disables = [i for i, e in enumerate(timeline) if e["kind"] == "disable-source"]
        terminates = [i for i, e in enumerate(timeline) if e["kind"] == "terminate"]
        assert disables and min(disables) > at("opened", f"F{x_f['id']} ")
        assert terminates and at("opened", f"F{c_f['id']} ") < min(terminates)
        assert min(terminates) < at("opened", f"F{respawned['id']} ")
        # ...and the undo of the wrapper's fix comes after that fix, named.
        fixed = at("action", f"A{x_action} ")
        assert at("undone", f"A{x_action} undone: disable-source") > fixed
        text = run_cli("report", "--state-dir", str(d.state_dir), "--since", "1h")
        assert text.returncode == 0, text.stderr
        # 80 columns, but a path or an advised command wider than that has a line of its
        # own, whole (issue 33: a hard wrap broke the paste).
        wide = [
            x for x in text.stdout.splitlines()
            if len(x) > 80 and " " in x.strip()
            and x.strip().lstrip("`").split()[0] not in COMMAND_WORDS
        ]  # fmt: skip
        assert wide == [], wide

        # -- every command the week printed works as printed (issue 33) ----------------
        rc, out = _cli(config, "status")
        assert rc in (0, 1), out
        printed = [f["message"] for f in _findings(d)] + PRINTED
        pasted = hints(printed)
        verbs = {c.split()[1] for c in pasted}
        assert {"disable-source", "terminate", "undo"} <= verbs, pasted
        for cmd, where in pasted.items():
            assert f" --config {config} " in f"{cmd} ", cmd  # every hint names the daemon's file
            rc, out = paste(cmd)
            pid = re.fullmatch(r"rogue-watchdog terminate --config \S+ (\d+)", cmd)
            if pid and not os.path.exists(f"/proc/{pid.group(1)}"):
                # A run the week ended since: the hint was right when printed.
                assert rc == 2 and "is not running (it exited)" in out, (cmd, out, where)
                continue
            assert rc in (0, 1), (cmd, rc, out, where)  # 1: refused or nothing left, said why
            for wrong in ("no finding", "no action", "usage:", "/var/lib/rogue-watchdog"):
                assert wrong not in out, (cmd, out, where)

        # -- event 3: kill and respawn ------------------------------------------------
        assert respawned["root_pid"] == second
        assert (respawned["details"]["origin"]["file"], respawned["details"]["origin"]["line"]) == (
            str(file_c),
            4,
        )
        # -- event 4: the queue --------------------------------------------------------
        assert (queue["severity"], queue["details"]["job_id"], queue["details"]["user"]) == (
            "high",
            "17",
            "svc-old",
        )
        # -- event 5: the retired service ----------------------------------------------
        assert service["details"]["listening"] == [
            {"proto": "tcp", "address": "127.0.0.1", "port": svc["port"], "pid": svc["pid"]}
        ]
        assert (
            f"(PID {svc['pid']} listening on 127.0.0.1:{svc['port']}/tcp), started the run"
            in (service["message"])
        )
        # -- event 6: 224 all-NaN tensors ----------------------------------------------
        assert (poison["severity"], poison["message"]) == (
            "critical",
            f"ship gate prod: {poisoned} holds non-finite weights: 224 of 224 tensors "
            f"non-finite (7168 NaN, 0 +Inf, 0 -Inf); next: move it out of {deploy} before "
            "anything loads it (quarantine: true on gate prod has the daemon do that, "
            f"undoably); deploy the last good checkpoint to {poisoned} through "
            "``rogue-watchdog ship`` (it copies only weights that verify finite; "
            "``rogue-watchdog verify-weights`` tells whether a checkpoint does)",
        )
        # -- event 7: the deploy that stopped ------------------------------------------
        assert stale["severity"] == "high"
        assert stale["message"].startswith(
            f"ship gate serve: the deploy step did not run: newest good output {newer} ("
        )
        assert "is 2 d 2 h newer than deployed" in stale["message"]  # exactly 50 h
        # 30 h plus however long the test has run so far.
        assert re.search(
            r"it has waited 1 d 6 h( \d+ min)?( \d+ s)? \(limit 1 h\)", stale["message"]
        ), stale["message"]
    finally:
        if daemon is not None:
            daemon.stop()
        h.close()
