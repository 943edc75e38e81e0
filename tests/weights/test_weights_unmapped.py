"""Reading without a memory map (the daemon's ship watch): the same verdicts, and a
file cut short under the check is a report instead of SIGBUS.

A read through ``mmap(2)`` past the end of a file that shrank after it was mapped
raises SIGBUS, which kills the whole process: the daemon with its ship watch, every
other check and the status socket. The daemon therefore verifies with
``ScanContext(mapped=False)`` (``pread(2)`` per chunk); this module checks that this
reader answers exactly as the mapped one on every fuzzed file, and that a shrinking
file is reported not verified.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings

from rogue_watchdog.weights.api import verify_file
from rogue_watchdog.weights.scan import ScanContext

from .fuzzgen import STRATEGIES, Case

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fmt", sorted(STRATEGIES))
def test_read_and_mapped_give_the_same_report(fmt: str, tmp_path: Path) -> None:
    mapped, read = ScanContext(chunk_bytes=4096), ScanContext(chunk_bytes=4096, mapped=False)

    @settings(
        max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @seed(20261203)
    @given(case=STRATEGIES[fmt])
    def check(case: Case) -> None:
        path = tmp_path / f"case{case.suffix}"
        path.write_bytes(case.data)
        a, b = verify_file(path, mapped), verify_file(path, read)
        assert a.to_dict() == b.to_dict(), case.mutations

    check()


SHRINK = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from rogue_watchdog.weights.api import verify_file
    from rogue_watchdog.weights.scan import ScanContext
    path = Path({path!r})
    cut = []
    def progress(n):
        if not cut:  # after the first chunk, a writer truncates the file to 1 MiB
            os.truncate(path, 1 << 20)
            cut.append(n)
    ctx = ScanContext(progress=progress, chunk_bytes=1 << 20, mapped={mapped})
    report = verify_file(path, ctx)
    print(report.status.value, report.error)
    """
)


def _shrink(tmp_path: Path, mapped: bool) -> subprocess.CompletedProcess[str]:
    header = b'{"w":{"dtype":"F32","shape":[4194304],"data_offsets":[0,16777216]}}'
    header += b" " * (-len(header) % 8)
    path = tmp_path / "model.safetensors"
    with path.open("wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header)
        fh.truncate(8 + len(header) + (16 << 20))  # 16 MiB of zeros: finite

    def no_core() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    script = SHRINK.format(repo=str(REPO), path=str(path), mapped=mapped)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=60, preexec_fn=no_core, check=False,
    )  # fmt: skip


def test_a_file_cut_short_under_the_read_check_is_not_verified(tmp_path: Path) -> None:
    done = _shrink(tmp_path, mapped=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "not-verified the file shrank while it was read: bytes 1048656..2097232 of the "
        "16777296 it had are gone"
    )


def test_the_mapped_check_dies_of_sigbus_there(tmp_path: Path) -> None:
    # Why the daemon does not map: the same cut kills a mapped check's whole process.
    done = _shrink(tmp_path, mapped=True)
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stdout, done.stderr)
