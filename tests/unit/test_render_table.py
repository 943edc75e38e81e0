# ruff: noqa: E501  (the expected tables are kept one rendered line per literal)
"""The scan table for people: columns sized to the terminal, GPU first, colour on a tty.

A fixed scan result is rendered at 80 and 200 columns and compared line for line: the
three jobs share one interpreter path, which must not hide which job is which.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import (
    CronOrigin,
    Finding,
    GpuHeld,
    GpuInfo,
    Job,
    NvmlStatus,
    OrphanOrigin,
    ScanResult,
    SlurmOrigin,
)
from rogue_watchdog.policy.guard import protection, with_advice
from rogue_watchdog.render import (
    filter_gpu,
    output_width,
    paint,
    result_table,
    shorten_command,
    use_colour,
)

GIB = 1024**3
PY = "/root/.pyenv/versions/3.11.7/bin/python"


def fixed_result() -> ScanResult:
    cron = CronOrigin(
        file="/etc/cron.d/legacy-retrain",
        line=3,
        schedule="0 3 * * *",
        remediation="sed -i '3s/^/# /' /etc/cron.d/legacy-retrain",
    )
    slurm = SlurmOrigin(job_id=812, job_name="sweep", account="research")
    orphan = OrphanOrigin(remediation="kill -TERM 61000")
    jobs = [
        Job(
            root_pid=48213,
            pids=[48213, 48220],
            user="alice",
            cmdline=(PY, "/home/alice/experiments/llm/train_big.py", "--epochs", "40"),
            start_ticks=1,
            gpu_memory_bytes=4 * GIB,
            gpu_uuids=["GPU-3"],
            lineage=[],
            origin=cron,
            verdict="rogue",
            reason="not sanctioned: rule 'research-slurm' matches the command line but origin "
            "must be Slurm account 'research'",
            gpus=[GpuHeld("GPU-3", 3, 4 * GIB)],
        ),
        Job(
            root_pid=51001,
            pids=[51001],
            user="research",
            cmdline=(PY, "/srv/research/sweeps/train_small.py", "--lr", "3e-4"),
            start_ticks=2,
            gpu_memory_bytes=2 * GIB,
            gpu_uuids=["GPU-3"],
            lineage=[],
            origin=slurm,
            verdict="sanctioned",
            rule="research-slurm",
            reason="matches rule 'research-slurm'",
            gpus=[GpuHeld("GPU-3", 3, 2 * GIB)],
        ),
        Job(
            root_pid=61000,
            pids=[61000, 61001],
            user="bob",
            cmdline=(PY, "/home/bob/scratch/train_eval.py", "--ckpt", "/data/ckpt/last.pt"),
            start_ticks=3,
            gpu_memory_bytes=None,
            gpu_uuids=[],
            lineage=[],
            origin=orphan,
            verdict="rogue",
            reason="not sanctioned: the command line matches no rule",
        ),
    ]
    return ScanResult(
        host="gpu-07",
        time=datetime(2027, 1, 15, 8, 0, tzinfo=UTC),
        duration_s=0.1,
        nvml=NvmlStatus(available=True, driver_version="550.54.15"),
        gpus=[
            GpuInfo(0, "GPU-0", "NVIDIA H200", 140 * GIB, 0),
            GpuInfo(3, "GPU-3", "NVIDIA H200", 140 * GIB, 10 * GIB),
        ],
        # Judged as a scan judges them: sanctioned ones protected, the rest advised.
        jobs=with_advice(jobs, protection(jobs, parse_config("", "c.yaml"))),
        findings=[
            Finding(
                "rogue-job", "high", "rogue training job PID 48213 on GPU 3 (4.0 GiB), ...", 48213
            ),
        ],
    )


CONFIG = "config: /etc/rogue-watchdog/config.yaml (2 sanctioned rules)"

AT_80 = [
    'rogue-watchdog scan  host gpu-07  2027-01-15T08:00:00+00:00',
    'config: /etc/rogue-watchdog/config.yaml (2 sanctioned rules)',
    'NVML: driver 550.54.15, 2 GPU(s)',
    '  GPU 0  NVIDIA H200  0 B used of 140.0 GiB  GPU-0',
    '    sanctioned 0 B, unsanctioned 0 B, not attributable 0 B',
    '  GPU 3  NVIDIA H200  10.0 GiB used of 140.0 GiB  GPU-3',
    '    sanctioned 2.0 GiB, unsanctioned 4.0 GiB, not attributable 4.0 GiB',
    '',
    'VERDICT        PID USER     PROCS GPU GPU MEM  COMMAND',
    'rogue        48213 alice        2 3   4.0 GiB  python …/train_big.py --epochs 40',
    '    from cron /etc/cron.d/legacy-retrain:3 (0 3 * * *)',
    "    why: not sanctioned: rule 'research-slurm' matches the command line but",
    "         origin must be Slurm account 'research'",
    '    restarts it: on schedule, its cron line (0 3 * * *)',
    '    stop: rogue-watchdog disable-source 48213 && rogue-watchdog terminate 48213',
    '          # --dry-run first to preview',
    'sanctioned   51001 research     1 3   2.0 GiB  python …/train_small.py --lr 3e-4',
    "    from Slurm job 812 `sweep` account research",
    'rogue        61000 bob          2 -         -  python …/train_eval.py --ckpt …/…',
    '    from orphan (parent exited)',
    '    why: not sanctioned: the command line matches no rule',
    '    stop: rogue-watchdog terminate 61000, or by hand: kill -TERM 61000 61001',
    '',
    'Findings (1):',
    '  [high] rogue-job: rogue training job PID 48213 on GPU 3 (4.0 GiB), ...',
]  # fmt: skip

AT_200 = [
    'rogue-watchdog scan  host gpu-07  2027-01-15T08:00:00+00:00',
    'config: /etc/rogue-watchdog/config.yaml (2 sanctioned rules)',
    'NVML: driver 550.54.15, 2 GPU(s)',
    '  GPU 0  NVIDIA H200  0 B used of 140.0 GiB: sanctioned 0 B, unsanctioned 0 B, not attributable 0 B  GPU-0',
    '  GPU 3  NVIDIA H200  10.0 GiB used of 140.0 GiB: sanctioned 2.0 GiB, unsanctioned 4.0 GiB, not attributable 4.0 GiB  GPU-3',
    '',
    'VERDICT        PID USER     PROCS GPU GPU MEM  ORIGIN                                         COMMAND',
    'rogue        48213 alice        2 3   4.0 GiB  cron /etc/cron.d/legacy-retrain:3 (0 3 * * *)  /root/.pyenv/versions/3.11.7/bin/python /home/alice/experiments/llm/train_big.py --epochs 40',
    "    why: not sanctioned: rule 'research-slurm' matches the command line but origin must be Slurm account 'research'",
    '    restarts it: on schedule, its cron line (0 3 * * *)',
    '    stop: rogue-watchdog disable-source 48213 && rogue-watchdog terminate 48213  # --dry-run first to preview',
    "sanctioned   51001 research     1 3   2.0 GiB  Slurm job 812 `sweep` account research         /root/.pyenv/versions/3.11.7/bin/python /srv/research/sweeps/train_small.py --lr 3e-4",
    'rogue        61000 bob          2 -         -  orphan (parent exited)                         /root/.pyenv/versions/3.11.7/bin/python /home/bob/scratch/train_eval.py --ckpt /data/ckpt/last.pt',
    '    why: not sanctioned: the command line matches no rule',
    '    stop: rogue-watchdog terminate 61000, or by hand: kill -TERM 61000 61001',
    '',
    'Findings (1):',
    '  [high] rogue-job: rogue training job PID 48213 on GPU 3 (4.0 GiB), ...',
]  # fmt: skip


@pytest.mark.parametrize(("width", "expected"), [(80, AT_80), (200, AT_200)])
def test_table_at_80_and_200_columns(width: int, expected: list[str]) -> None:
    text = result_table(fixed_result(), config_line=CONFIG, width=width, colour=False)
    assert text.splitlines() == expected
    assert all(len(line) <= width for line in text.splitlines())
    assert "None" not in text


def test_columns_env_sets_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert output_width(io.StringIO()) == 80
    monkeypatch.delenv("COLUMNS")
    assert output_width(io.StringIO()) == 100_000  # piped: whole lines


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_tty_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_colour(Tty()) is True
    assert use_colour(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "")
    assert use_colour(Tty()) is False
    text = result_table(fixed_result(), width=200, colour=True).splitlines()
    assert text[6].startswith("\x1b[31;1mrogue     \x1b[0m   48213 alice")
    assert text[10].startswith("\x1b[32msanctioned\x1b[0m   51001")
    assert text[-1].startswith("  \x1b[31m[high]\x1b[0m rogue-job: ")
    assert paint("x", "rogue", False) == "x"


def test_shorten_command_keeps_script_and_arguments() -> None:
    argv = ["/root/.pyenv/versions/3.11.7/bin/python", "/home/a/exp/train_big.py", "--epochs", "4"]
    assert shorten_command(argv, 200) == " ".join(argv)
    assert shorten_command(argv, 60) == "python /home/a/exp/train_big.py --epochs 4"
    assert shorten_command(argv, 30) == "python …/train_big.py --epoch…"
    assert shorten_command(argv, 33) == "python …/train_big.py --epochs 4"
    assert shorten_command(["x\ny"], 10) == "x\\ny"  # escaped, never a forged row


def test_filter_gpu_keeps_that_gpu_its_jobs_and_their_findings() -> None:
    narrowed = filter_gpu(fixed_result(), 3)
    assert [g.index for g in narrowed.gpus] == [3]
    assert [j.root_pid for j in narrowed.jobs] == [48213, 51001]
    assert [f.root_pid for f in narrowed.findings] == [48213]
    empty = filter_gpu(fixed_result(), 0)
    assert [g.index for g in empty.gpus] == [0]
    assert empty.jobs == [] and empty.findings == []


def test_readme_shows_what_scan_gpu_3_prints() -> None:
    """The README answers the GPU-3 question with this very table (finding cut short)."""
    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text().split("\n")
    start = readme.index("rogue-watchdog scan  host gpu-07  2027-01-15T08:00:00+00:00")
    block = readme[start : readme.index("```", start)]
    result = filter_gpu(fixed_result(), 3)
    shown = result_table(result, config_line=CONFIG, width=80, colour=False).splitlines()
    assert block[:-1] == shown[:-1]
    assert block[-1].endswith(", user alice, …")
    assert shown[-1].startswith(block[-1].removesuffix("user alice, …"))


def test_a_gpu_view_keeps_what_the_scan_could_not_see() -> None:
    result = fixed_result()
    result.findings.append(Finding("pid-namespace", "high", "most GPU PIDs are invisible"))
    result.findings.append(Finding("queue-unsanctioned", "high", "queue entry 17 waiting"))
    kinds = [f.kind for f in filter_gpu(result, 0).findings]
    assert kinds == ["pid-namespace"]  # blind spots stay; other host findings do not
