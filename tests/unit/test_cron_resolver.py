"""CronResolver and AtResolver over synthetic lineages and the fixture tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from rogue_watchdog.lineage.at import AtResolver, job_commands, parse_job_name
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.model import Origin, Proc
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import nobody_python
from tests.fixtures.proc.fakeproc import root_owned

HOST = Path(__file__).resolve().parent.parent / "fixtures" / "cron" / "host"
NOW = datetime(2026, 11, 29, 22, 0, 0, tzinfo=ZoneInfo("UTC"))
LEGACY_CMD = "/usr/bin/python3 /opt/legacy/train_weekly.py --epochs 5 >> /var/log/legacy.log 2>&1"
LEGACY_ARGV = ("/usr/bin/python3", "/opt/legacy/train_weekly.py", "--epochs", "5")
SED = "s/^/# disabled by rogue-watchdog: /"


def proc(
    pid: int,
    ppid: int,
    cmdline: tuple[str, ...],
    exe: str | None = None,
    user: str = "root",
    cgroup: tuple[str, ...] = ("0::/",),
) -> Proc:
    exe = exe or cmdline[0]
    return Proc(pid, ppid, 1000, "S", exe.rsplit("/", 1)[-1][:15], pid, pid, 0, user, exe,
                cmdline, cgroup)  # fmt: skip


INIT = proc(1, 0, ("/sbin/init",))
CRON = proc(100, 1, ("/usr/sbin/cron", "-f"))


def cron_chain(job: tuple[str, ...], command: str, user: str = "root") -> list[Proc]:
    """trainer → /bin/sh -c CMD → CRON → cron → init, as Debian cron builds it."""
    child = proc(298, 100, ("CRON",), exe="/usr/sbin/cron")
    shell = proc(299, 298, ("/bin/sh", "-c", command), exe="/usr/bin/dash", user=user)
    return [proc(300, 299, job, user=user), shell, child, CRON, INIT]


def ctx_for(root: Path, tmp_path: Path) -> ResolveContext:
    return ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(tmp_path / "noproc")),
        now=NOW,
        cron_files=(str(root / "etc/crontab"),),
        cron_d_dir=str(root / "etc/cron.d"),
        cron_spool_dirs=(str(root / "var/spool/cron/crontabs"),),
    )


@pytest.fixture
def ctx(tmp_path: Path) -> ResolveContext:
    return ctx_for(HOST, tmp_path)


def test_weekly_legacy_retrain(ctx: ResolveContext) -> None:
    origin = CronResolver().resolve(cron_chain(LEGACY_ARGV, LEGACY_CMD, "mlops"), ctx)
    assert origin is not None
    path = f"{HOST}/etc/cron.d/legacy-retrain"
    assert origin.kind == "cron"
    assert origin.fields == {
        "file": path,
        "line": 5,
        "entry": f"0 2 * * 0 mlops {LEGACY_CMD}",
        "user": "mlops",
        "schedule": "0 2 * * 0",
        "next_run": "2026-12-06T02:00:00+00:00",
    }
    assert origin.remediation == f"sed -i '5{SED}' {path}"
    notes = [e for e in origin.evidence if e.startswith("also matches")]
    assert notes == [
        f"also matches {path}.dpkg-old:1, which cron does not read "
        "(its name has characters other than letters, digits, _ and -)",
        f"also matches {HOST}/etc/cron.d/retrain~:1, which cron does not read "
        "(its name has characters other than letters, digits, _ and -)",
    ]
    assert not any(e.startswith("ambiguous") for e in origin.evidence)


def test_user_crontab_remediation_uses_crontab_l_line(ctx: ResolveContext) -> None:
    argv = ("/usr/bin/python3", "/home/alice/train_sweep.py", "--lr", "3e-4")
    lineage = cron_chain(argv, " ".join(argv), "alice")
    origin = CronResolver().resolve(lineage, ctx)
    assert origin is not None
    assert origin.fields["file"] == f"{HOST}/var/spool/cron/crontabs/alice"
    assert (origin.fields["line"], origin.fields["user"]) == (6, "alice")
    assert origin.fields["schedule"] == "@hourly"
    assert origin.fields["next_run"] == "2026-11-29T23:00:00+00:00"
    # Line 6 of the spool file is line 3 of `crontab -l` (3 header lines hidden).
    assert origin.remediation == f"crontab -u alice -l | sed '3{SED}' | crontab -u alice -"


def test_reboot_entry(ctx: ResolveContext) -> None:
    argv = ("/usr/bin/python3", "/opt/warmup/train_warmup.py")
    origin = CronResolver().resolve(cron_chain(argv, " ".join(argv)), ctx)
    assert origin is not None
    assert (origin.fields["line"], origin.fields["schedule"]) == (4, "@reboot")
    assert origin.fields["next_run"] == "when cron starts"


def test_percent_command_and_cron_tz(ctx: ResolveContext) -> None:
    # What cron hands to sh -c: up to the first unescaped %, with \% made a %.
    cmd = '/usr/local/bin/eval-nightly --tag "$(date +%F)" '
    argv = ("/usr/local/bin/eval-nightly", "--tag", "2026-11-29")
    origin = CronResolver().resolve(cron_chain(argv, cmd), ctx)
    assert origin is not None
    assert origin.fields["file"] == f"{HOST}/etc/cron.d/nightly_eval"
    assert origin.fields["line"] == 3
    assert origin.fields["next_run"] == "2026-11-30T02:30:00+01:00"
    assert any("CRON_TZ=Europe/Berlin" in e for e in origin.evidence)


def test_run_parts_chain_reports_line_and_script(ctx: ResolveContext) -> None:
    command = "cd / && run-parts --report /etc/cron.daily"
    trainer = proc(310, 309, ("/usr/bin/python3", "/opt/retrain/train.py"))
    script = proc(309, 308, ("/bin/sh", "/etc/cron.daily/retrain"), exe="/usr/bin/dash")
    runner = proc(308, 299, ("run-parts", "--report", "/etc/cron.daily"), "/usr/bin/run-parts")
    chain = cron_chain(("x",), command)
    origin = CronResolver().resolve([trainer, script, runner, *chain[1:]], ctx)
    assert origin is not None
    assert origin.fields["file"] == f"{HOST}/etc/cron.d/daily-jobs"
    assert origin.fields["line"] == 2
    assert origin.fields["script"] == "/etc/cron.daily/retrain"
    assert origin.remediation == "chmod -x /etc/cron.daily/retrain"


def test_daemonised_job_reparented_to_init(ctx: ResolveContext) -> None:
    trainer = proc(400, 1, LEGACY_ARGV, user="mlops")
    origin = CronResolver().resolve([trainer, INIT], ctx)
    assert origin is not None
    assert origin.kind == "cron"
    assert (origin.fields["file"], origin.fields["line"]) == (
        f"{HOST}/etc/cron.d/legacy-retrain",
        5,
    )
    assert any("re-parented to PID 1" in e for e in origin.evidence)


def test_daemonised_job_in_cron_service_cgroup(ctx: ResolveContext) -> None:
    cg = ("1:name=systemd:/system.slice/cron.service", "0::/system.slice/cron.service")
    trainer = proc(400, 1, LEGACY_ARGV, user="mlops", cgroup=cg)
    origin = CronResolver().resolve([trainer, INIT], ctx)
    assert origin is not None
    assert origin.fields["line"] == 5
    assert any("cron's cgroup" in e for e in origin.evidence)


def test_reparented_process_of_another_service_is_not_cron(ctx: ResolveContext) -> None:
    trainer = proc(400, 1, LEGACY_ARGV, cgroup=("0::/system.slice/retrain.service",))
    assert CronResolver().resolve([trainer, INIT], ctx) is None


def test_same_command_from_a_login_shell_is_not_cron(ctx: ResolveContext) -> None:
    trainer = proc(500, 499, LEGACY_ARGV)
    bash = proc(499, 498, ("-bash",), exe="/usr/bin/bash")
    sshd = proc(498, 1, ("sshd: mlops@pts/0",), exe="/usr/sbin/sshd")
    assert CronResolver().resolve([trainer, bash, sshd, INIT], ctx) is None


def test_comm_named_cron_is_not_a_cron_daemon(ctx: ResolveContext) -> None:
    trainer = proc(600, 599, ("/usr/bin/python3", "/srv/train_x.py"))
    fake = Proc(599, 1, 1, "S", "cron", exe="/usr/bin/python3", cmdline=("python3", "f.py"))
    assert CronResolver().resolve([trainer, fake, INIT], ctx) is None


def test_cron_ancestor_without_a_live_entry(ctx: ResolveContext) -> None:
    argv = ("/usr/bin/python3", "/opt/gone/train_gone.py")
    origin = CronResolver().resolve(cron_chain(argv, " ".join(argv)), ctx)
    assert origin is not None
    assert origin.kind == "cron"
    assert origin.fields["file"] is None and origin.fields["line"] is None
    assert origin.remediation is None
    assert any("no live entry matches" in e for e in origin.evidence)


def test_exact_match_of_another_user_is_not_its_entry(tmp_path: Path) -> None:
    # cron runs an entry as the entry's user: a job shell running as mlops was not
    # started by the line that runs the same command as "other".
    root = tmp_path / "host"
    shutil.copytree(HOST, root)
    (root / "etc/cron.d/another").write_text(f"0 5 * * * other {LEGACY_CMD}\n")
    origin = CronResolver().resolve(
        cron_chain(LEGACY_ARGV, LEGACY_CMD, "mlops"), ctx_for(root, tmp_path)
    )
    assert origin is not None
    assert origin.fields["file"] == f"{root}/etc/cron.d/legacy-retrain"
    assert not [e for e in origin.evidence if e.startswith("ambiguous")]
    assert (
        f"not {root}/etc/cron.d/another:1: PID 299 runs as mlops, and cron runs that entry as other"
    ) in origin.evidence


def test_edit_invalidates_the_parse_cache(tmp_path: Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(HOST, root)
    ctx = ctx_for(root, tmp_path)
    lineage = cron_chain(LEGACY_ARGV, LEGACY_CMD, "mlops")
    first = CronResolver().resolve(lineage, ctx)
    assert first is not None and first.fields["line"] == 5
    path = root / "etc/cron.d/legacy-retrain"
    path.write_text("# moved down\n" + path.read_text())
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    second = CronResolver().resolve(lineage, ctx)
    assert second is not None and second.fields["line"] == 6


def test_anacron_job(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "etc/cron.d").mkdir(parents=True)
    (root / "etc/crontab").write_text("")
    (root / "etc/anacrontab").write_text("1\t5\tcron.daily\trun-parts --report /etc/cron.daily\n")
    anacron = proc(700, 1, ("/usr/sbin/anacron", "-d", "-q", "-s"))
    shell = proc(701, 700, ("/bin/sh", "-c", "run-parts --report /etc/cron.daily"), "/bin/dash")
    runner = proc(702, 701, ("run-parts", "--report", "/etc/cron.daily"), "/usr/bin/run-parts")
    script = proc(703, 702, ("/etc/cron.daily/retrain",), exe="/usr/bin/python3")
    origin = CronResolver().resolve([script, runner, shell, anacron, INIT], ctx_for(root, tmp_path))
    assert origin is not None
    assert origin.fields["file"] == f"{root}/etc/anacrontab"
    assert origin.fields["line"] == 1
    assert origin.fields["script"] == "/etc/cron.daily/retrain"
    assert origin.fields["next_run"] is None


def test_unreadable_paths_never_raise(tmp_path: Path) -> None:
    ctx = ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(tmp_path / "noproc")),
        now=NOW,
        cron_files=(str(tmp_path / "none"),),
        cron_d_dir=str(tmp_path / "none.d"),
        cron_spool_dirs=(str(tmp_path / "spool"),),
    )
    origin = CronResolver().resolve(cron_chain(LEGACY_ARGV, LEGACY_CMD), ctx)
    assert origin is not None and origin.fields["file"] is None
    assert CronResolver().resolve([proc(5, 1, LEGACY_ARGV), INIT], ctx) is None
    assert CronResolver().resolve([], ctx) is None


NOT_AGAIN = "nothing will start it again"


def _spool_ctx(root: Path, tmp_path: Path, spool: Path) -> ResolveContext:
    return ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(tmp_path / "noproc")),
        now=NOW,
        cron_files=(str(root / "etc/crontab"),),
        cron_d_dir=str(root / "etc/cron.d"),
        cron_spool_dirs=(str(spool),),
    )


def test_crontab_path_that_is_not_a_file_is_no_proof_the_entry_is_gone(tmp_path: Path) -> None:
    """Tester's case: an unread candidate made the resolver say "nothing will start it"."""
    root = tmp_path / "host"
    (root / "etc/cron.d").mkdir(parents=True)
    (root / "etc/crontab").mkdir()  # a directory where cron expects a file
    spool = root / "spool"
    spool.mkdir()
    argv = ("/usr/bin/python3", "/opt/gone/train_gone.py")
    origin = CronResolver().resolve(
        cron_chain(argv, " ".join(argv)), _spool_ctx(root, tmp_path, spool)
    )
    assert origin is not None and origin.kind == "cron"
    assert origin.fields["file"] is None and origin.fields["line"] is None
    assert f"could not read {root}/etc/crontab (not a regular file): the entry may be there" in (
        origin.evidence
    )
    assert not any(NOT_AGAIN in e for e in origin.evidence)
    assert origin.remediation == (f"sudo grep -rnF -- /opt/gone/train_gone.py {root}/etc/crontab")
    # Not found is not gone: the table never claims the entry was removed.
    assert "entry_state" not in origin.fields
    assert origin.describe() == "cron, entry not found (some crontabs could not be read)"


def test_grep_hint_names_the_script_of_any_interpreter(tmp_path: Path) -> None:
    """pypy3 runs a script like python3 does (one shared rule): grep for the script."""
    root = tmp_path / "host"
    (root / "etc/cron.d").mkdir(parents=True)
    (root / "etc/crontab").mkdir()
    spool = root / "spool"
    spool.mkdir()
    argv = ("/usr/bin/pypy3", "-u", "/opt/gone/train_gone.py")
    origin = CronResolver().resolve(
        cron_chain(argv, " ".join(argv)), _spool_ctx(root, tmp_path, spool)
    )
    assert origin is not None
    assert origin.remediation == f"sudo grep -rnF -- /opt/gone/train_gone.py {root}/etc/crontab"


def test_unlistable_spool_dir_and_oversized_crontab(tmp_path: Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(HOST, root)
    spool_file = root / "not-a-dir"
    spool_file.write_text("")  # listdir fails (not a directory), like EACCES would
    big = root / "etc/cron.d/huge"
    with big.open("wb") as fh:
        fh.truncate((1 << 20) + 1)  # over the 1 MiB cap; sparse
    ctx = ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(tmp_path / "noproc")),
        now=NOW,
        cron_files=(str(root / "etc/crontab"),),
        cron_d_dir=str(root / "etc/cron.d"),
        cron_spool_dirs=(str(spool_file),),
    )
    argv = ("/usr/bin/python3", "/opt/gone/train_gone.py")
    origin = CronResolver().resolve(cron_chain(argv, " ".join(argv)), ctx)
    assert origin is not None
    assert origin.fields["file"] is None
    assert not any(NOT_AGAIN in e for e in origin.evidence)
    unread = [e for e in origin.evidence if "the entry may be there" in e]
    assert unread == [
        f"could not read {spool_file} (not a directory): the entry may be there",
        f"could not read {big} (too large: {(1 << 20) + 1} bytes, limit {1 << 20}): "
        "the entry may be there",
    ]
    assert origin.remediation == (f"sudo grep -rnF -- /opt/gone/train_gone.py {spool_file} {big}")
    # A job whose entry was read still resolves; the unread files are mentioned.
    found = CronResolver().resolve(cron_chain(LEGACY_ARGV, LEGACY_CMD, "mlops"), ctx)
    assert found is not None
    assert (found.fields["file"], found.fields["line"]) == (
        f"{root}/etc/cron.d/legacy-retrain",
        5,
    )
    assert found.remediation == f"sed -i '5{SED}' {root}/etc/cron.d/legacy-retrain"
    assert any(e.startswith(f"could not read {big} (too large") for e in found.evidence)


def test_no_unread_file_keeps_the_entry_gone_verdict(tmp_path: Path) -> None:
    # Missing files and a subdirectory in a spool dir (/var/spool/cron/crontabs listed
    # from /var/spool/cron) are no reason for doubt.
    root = tmp_path / "host"
    (root / "spool/crontabs").mkdir(parents=True)
    argv = ("/usr/bin/python3", "/opt/gone/train_gone.py")
    origin = CronResolver().resolve(
        cron_chain(argv, " ".join(argv)), _spool_ctx(root, tmp_path, root / "spool")
    )
    assert origin is not None
    assert origin.remediation is None
    assert any(NOT_AGAIN in e for e in origin.evidence)
    assert not any("may be there" in e for e in origin.evidence)


_RESOLVE_AS_NOBODY = """
import json, sys
from datetime import datetime
from zoneinfo import ZoneInfo
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.model import Proc
from rogue_watchdog.sources.procfs import ProcessTable
root = sys.argv[1]
def p(pid, ppid, argv, exe, user="alice"):
    return Proc(pid, ppid, 1000, "S", exe.rsplit("/", 1)[-1][:15], pid, pid, 0, user, exe,
                tuple(argv), ("0::/",))
argv = ["/usr/bin/python3", "/home/alice/train_sweep.py", "--lr", "3e-4"]
lineage = [p(300, 299, argv, argv[0]), p(299, 298, ["/bin/sh", "-c", " ".join(argv)],
           "/usr/bin/dash"), p(298, 100, ["CRON"], "/usr/sbin/cron", "root"),
           p(100, 1, ["/usr/sbin/cron", "-f"], "/usr/sbin/cron", "root"),
           p(1, 0, ["/sbin/init"], "/sbin/init", "root")]
ctx = ResolveContext(table=ProcessTable(root + "/noproc"), exe_owner=lambda p: 0,
                     now=datetime(2026, 11, 29, 22, tzinfo=ZoneInfo("UTC")),
                     cron_files=(root + "/etc/crontab",), cron_d_dir=root + "/etc/cron.d",
                     cron_spool_dirs=(root + "/var/spool/cron/crontabs",))
o = CronResolver().resolve(lineage, ctx)
print(json.dumps([o.fields, list(o.evidence), o.remediation]))
"""


def test_spool_dir_unreadable_for_a_non_root_scan() -> None:
    """Real EACCES: Debian's spool dir is mode 1730, so a scan as nobody cannot list it."""
    root = Path(tempfile.mkdtemp(prefix="rw-cron-nobody-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        shutil.copytree(HOST / "etc", root / "etc")
        spool = root / "var/spool/cron/crontabs"
        shutil.copytree(HOST / "var/spool/cron/crontabs", spool)
        for d in (root / "var", root / "var/spool", root / "var/spool/cron"):
            os.chmod(d, 0o755)
        os.chmod(spool, 0o1730)
        with nobody_python("cronsim", "rogue_watchdog.lineage.cron") as as_nobody:
            res = subprocess.run(
                [*as_nobody, "-c", _RESOLVE_AS_NOBODY, str(root)],
                cwd="/",
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert res.returncode == 0, res.stderr
        fields, evidence, remediation = json.loads(res.stdout)
    finally:
        shutil.rmtree(root)
    assert fields["file"] is None
    assert (
        f"could not read {spool} (permission denied): the entry may be there; run as root"
        in evidence
    )
    assert not any(NOT_AGAIN in e for e in evidence)
    assert remediation == f"sudo grep -rnF -- /home/alice/train_sweep.py {spool}"


# -- at ---------------------------------------------------------------------------------

AT_JOB = """#!/bin/sh
# atrun uid=0 gid=0
# mail root 0
umask 22
OLDPWD=/; export OLDPWD
cd /srv/ml || {
\t echo 'Execution directory inaccessible' >&2
\t exit 1
}
/usr/bin/python3 /srv/ml/train_at.py
"""


def test_parse_job_name_and_commands() -> None:
    queue, job, when = parse_job_name("a0000101c8be6a (deleted)") or ("", 0, None)
    assert (queue, job) == ("a", 1)
    assert when is not None and when.isoformat() == "2026-11-29T22:02:00+00:00"
    assert parse_job_name(".SEQ") is None
    assert job_commands(AT_JOB) == "/usr/bin/python3 /srv/ml/train_at.py"


def _resolve_at_job(tmp_path: Path, spool: Path) -> tuple[Origin | None, ResolveContext]:
    """Resolve job 1 of ``spool`` run by atd: the job shell (PID 52) reads it on fd 0."""
    fd = tmp_path / "proc/52/fd"
    fd.mkdir(parents=True)
    os.symlink(f"{spool}/a0000101c8be6a (deleted)", fd / "0")
    ctx = ResolveContext(table=ProcessTable(str(tmp_path / "proc")), now=NOW, exe_owner=root_owned)
    atd = proc(50, 1, ("/usr/sbin/atd",), user="daemon")
    child = proc(51, 50, ("/usr/sbin/atd",), user="daemon")
    shell = proc(52, 51, ("sh",), exe="/usr/bin/dash")
    trainer = proc(53, 52, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    return AtResolver().resolve([trainer, shell, child, atd, INIT], ctx), ctx


def test_at_job_via_fd0_and_self_rescheduling(tmp_path: Path) -> None:
    spool = tmp_path / "atjobs"
    spool.mkdir()
    (spool / "=0000101c8be6a").write_text(AT_JOB)
    (spool / "a0000201c8c000").write_text(AT_JOB)  # the copy it queued for next time
    (spool / "a0000301c8c000").write_text(AT_JOB.replace("train_at", "other"))
    origin, ctx = _resolve_at_job(tmp_path, spool)
    assert origin is not None
    assert origin.kind == "at"
    assert origin.fields["job"] == 1
    assert origin.fields["queue"] == "a"
    assert origin.fields["user"] == "root"
    assert origin.fields["command"] == "/usr/bin/python3 /srv/ml/train_at.py"
    assert origin.fields["pending_same_command"] == [2]
    assert origin.remediation == "atrm 2"  # the queued copy: atrm leaves a running job
    assert AtResolver().resolve(cron_chain(LEGACY_ARGV, LEGACY_CMD), ctx) is None


def test_at_spool_fifo_is_skipped_without_blocking(tmp_path: Path) -> None:
    """A FIFO among the queued jobs (any user can make one where atd's spool is
    writable) is skipped by the safe reader; the real jobs are still compared."""
    spool = tmp_path / "atjobs"
    spool.mkdir()
    (spool / "=0000101c8be6a").write_text(AT_JOB)
    os.mkfifo(spool / "a0000201c8c000")
    (spool / "a0000301c8c000").write_text(AT_JOB)
    origin, _ = _resolve_at_job(tmp_path, spool)
    assert origin is not None
    assert origin.fields["pending_same_command"] == [3]


def _resolve_ended_at_run(tmp_path: Path, wrapper: tuple[str, ...] | None = None) -> Origin | None:
    """A run of an at job seen only at its exec (simulator seed 67601): its lineage
    reaches atd, but its shell's fds are gone (the run ended; atd removed its file).
    ``wrapper``: a command between the job's shell and the trainer."""
    (tmp_path / "proc").mkdir(exist_ok=True)
    ctx = ResolveContext(table=ProcessTable(str(tmp_path / "proc")), now=NOW, exe_owner=root_owned)
    atd = proc(50, 1, ("/usr/sbin/atd",), user="daemon")
    child = proc(51, 50, ("/usr/sbin/atd",), user="daemon")
    shell = proc(52, 51, ("sh",), exe="/usr/bin/dash")
    below = [proc(54, 52, wrapper, exe="/usr/bin/bash")] if wrapper else []
    trainer = proc(53, below[0].pid if below else 52, ("/usr/bin/python3", "/srv/ml/train_at.py"))
    return AtResolver().resolve([trainer, *below, shell, child, atd, INIT], ctx)


def test_a_run_whose_job_file_is_gone_names_the_queued_copies_that_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 67601's class (I15): whichever run of a re-queuing at job an action targets,
    also one that already ended, its origin says the queued copy will run it again.
    BEFORE (603682b): ``pending_same_command == []``, ``restarts() is None`` (terminate
    said ``ok``)."""
    from rogue_watchdog.lineage import at

    spool = tmp_path / "atjobs"
    spool.mkdir()
    (spool / "=0000301c8c000").write_text(AT_JOB)  # another run, running: not queued
    (spool / "a0000401c8c100").write_text(AT_JOB)  # the copy queued for next time
    (spool / "a0000501c8c100").write_text(AT_JOB.replace("train_at", "other"))
    monkeypatch.setattr(at, "AT_SPOOLS", (str(tmp_path / "missing"), str(spool)))
    origin = _resolve_ended_at_run(tmp_path)
    assert origin is not None and origin.kind == "at"
    assert origin.fields["job"] is None
    assert origin.fields["pending_same_command"] == [4]
    assert origin.fields["queued_match"] == "/srv/ml/train_at.py"
    assert origin.remediation == "atrm 4"
    again = origin.restarts()
    assert again is not None and again.after_terminate
    assert again.line() == (
        "restarts it: on schedule, at job(s) 4 of the same user queued that run "
        "`/srv/ml/train_at.py` (it re-queues itself; this run's own job file was not read)"
    )
    # Matched by command alone: disable-source leaves it to a person (`atrm 4`).
    assert not origin.disable_handled()
    # A job whose commands run a wrapper script that runs the trainer: the copy names
    # the shell's child (`bash train_at.sh`), not the job.
    (spool / "a0000601c8c100").write_text(AT_JOB.replace("/usr/bin/python3", "bash").replace(
        "train_at.py", "train_at.sh"))  # fmt: skip
    wrapped = _resolve_ended_at_run(tmp_path, wrapper=("bash", "/srv/ml/train_at.sh"))
    assert wrapped is not None and wrapped.fields["pending_same_command"] == [6]
    assert wrapped.fields["queued_match"] == "/srv/ml/train_at.sh"
    # Kept and read live: once the copy runs, nothing queued is named.
    (spool / "a0000401c8c100").rename(spool / "=0000401c8c100")
    assert isinstance(origin, at.AtOrigin)
    now = at.with_live_queue(origin)
    assert now.pending_same_command == () and now.restarts() is None
    assert not any(e.startswith("queued jobs ") for e in now.evidence)


def test_a_run_whose_job_file_and_queue_are_unread_says_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not read is not "never again": neither the run's job file nor a spool was read."""
    from rogue_watchdog.lineage import at

    monkeypatch.setattr(at, "AT_SPOOLS", (str(tmp_path / "missing"),))
    origin = _resolve_ended_at_run(tmp_path)
    assert origin is not None and origin.fields["pending_same_command"] == []
    again = origin.restarts()
    assert again is not None and again.when == "unknown" and again.after_terminate
    # A spool read that holds no copy of it: it does not come back.
    (tmp_path / "atjobs").mkdir()
    monkeypatch.setattr(at, "AT_SPOOLS", (str(tmp_path / "atjobs"),))
    origin = _resolve_ended_at_run(tmp_path)
    assert origin is not None and origin.restarts() is None


@pytest.mark.parametrize("how", ["undo", "by hand"])
def test_a_line_re_enabled_reads_live_again(tmp_path: Path, how: str) -> None:
    """Fresh user E (issue 33): the run whose line `disable-source` commented out kept
    `entry since disabled` after `undo` restored the line (the recheck was sticky), next
    to `its source was re-enabled by rogue-watchdog undo`. Before: the rechecked origin
    read `cron …/legacy-retrain:5 (0 2 * * 0), entry since disabled`, no next run, no
    remediation. After: the line's state now, the disabled spell kept as history."""
    from rogue_watchdog.actions.disable import marker_line
    from rogue_watchdog.model import CronOrigin

    root = tmp_path / "host"
    shutil.copytree(HOST, root)
    ctx = ctx_for(root, tmp_path)
    resolver = CronResolver()
    live = resolver.resolve(cron_chain(LEGACY_ARGV, LEGACY_CMD, "mlops"), ctx)
    assert isinstance(live, CronOrigin) and live.entry_state is None
    path = root / "etc/cron.d/legacy-retrain"
    text = path.read_text()
    raw = live.entry
    assert raw is not None
    off = marker_line(raw, 1_800_000_000.0, "rogue job") if how == "undo" else f"#{raw}"
    path.write_text(text.replace(raw, off))
    disabled = resolver.recheck(live, ctx)
    assert isinstance(disabled, CronOrigin)
    where = f"cron {root}/etc/cron.d/legacy-retrain:5 ({live.schedule})"
    assert disabled.describe() == f"{where}, entry since disabled"
    assert disabled.next_run is None and disabled.remediation is None
    assert resolver.recheck(disabled, ctx) == disabled  # still off: unchanged
    path.write_text(text)  # `rogue-watchdog undo` restores the file byte for byte
    again = resolver.recheck(disabled, ctx)
    assert isinstance(again, CronOrigin)
    assert again.describe() == where
    assert again.entry_state is None and again.source_gone() is None
    assert (again.next_run, again.remediation) == (live.next_run, live.remediation)
    assert again.restarts() == live.restarts()
    assert again.evidence[0] == (
        f"started by {root}/etc/cron.d/legacy-retrain:5; the line was disabled while this "
        "process ran and is live again now: cron starts it on its schedule"
    )
    path.unlink()
    assert resolver.recheck(again, ctx).describe() == f"{where}, entry since removed"
