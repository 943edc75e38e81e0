"""scripts/setup.sh filters pip's per-package warnings about local index directories.

Issue 33, fresh user D: `bash scripts/setup.sh` printed 50 lines (114 with --test) of
`WARNING: Location 'file:///opt/pypi/simple/<name>/' is ignored: it is neither a file nor
a directory.`: the host's pip configuration (~/.config/pip/pip.conf extra-index-url =
file:///opt/pypi/simple file:///opt/pypi-more/simple) names local indexes that lack some
packages, and pip warns once per package and index. setup.sh runs pip through
scripts/pip-quiet.awk: one line instead, every other line unchanged.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO


def warning(url: str) -> str:
    return f"WARNING: Location '{url}' is ignored: it is neither a file nor a directory."


def test_pip_index_warnings_become_one_line_naming_each_index(tmp_path: Path) -> None:
    lines = [warning(f"file://{tmp_path}/simple/p{i}/") for i in range(22)]
    lines += [warning(f"file:///nonexistent-rw/simple/p{i}/") for i in range(92)]
    lines.insert(5, "ERROR: No matching distribution found for nothing-such")
    (tmp_path / "simple").mkdir()
    done = subprocess.run(
        ["awk", "-f", str(REPO / "scripts/pip-quiet.awk")],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines() == [
        "ERROR: No matching distribution found for nothing-such",
        "setup.sh: hid 114 pip warning(s): the local index directories in pip's "
        "configuration (extra-index-url) lack those packages: "
        f"file://{tmp_path}/simple/, file:///nonexistent-rw/simple/ (does not exist)",
    ]


def test_setup_runs_every_pip_install_through_the_filter() -> None:
    script = (REPO / "scripts/setup.sh").read_text()
    calls = [line.strip() for line in script.splitlines() if "-m pip " in line]
    # The pip self-upgrade is silenced whole; every other pip call goes through pip_quiet.
    assert calls == [
        'pip_quiet() { { .venv/bin/python -m pip "$@" 2>&1 1>&3 3>&- '
        "| awk -f scripts/pip-quiet.awk >&2; } 3>&1; }",
        ".venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true",
    ]


def test_pip_quiet_keeps_pips_exit_status_and_stdout(tmp_path: Path) -> None:
    venv_bin = tmp_path / ".venv/bin"
    venv_bin.mkdir(parents=True)
    fake = venv_bin / "python"
    fake.write_text(
        "#!/bin/sh\necho out\n"
        f'echo "{warning("file:///nonexistent-rw/simple/x/")}" >&2\necho err >&2\nexit 3\n'
    )
    fake.chmod(0o755)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts/pip-quiet.awk").write_text((REPO / "scripts/pip-quiet.awk").read_text())
    fn = next(
        line for line in (REPO / "scripts/setup.sh").read_text().splitlines()
        if line.startswith("pip_quiet()")
    )  # fmt: skip
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{fn}\npip_quiet install x"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (3, "out\n")
    assert done.stderr.splitlines() == [
        "err",
        "setup.sh: hid 1 pip warning(s): the local index directories in pip's configuration "
        "(extra-index-url) lack those packages: file:///nonexistent-rw/simple/ (does not exist)",
    ]
