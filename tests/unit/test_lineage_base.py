"""The shared lineage rules: which programs are interpreters, and the script they run."""

from __future__ import annotations

import pytest

from rogue_watchdog.lineage.base import is_interpreter, script_argument


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (("/usr/bin/python3.11", "-u", "/opt/x/train.py", "--lr", "1"), "/opt/x/train.py"),
        (("pypy3", "/opt/x/train.py"), "/opt/x/train.py"),
        (("/usr/bin/Rscript", "fit.R"), "fit.R"),
        (("perl5.36", "-w", "job.pl"), "job.pl"),
        (("zsh", "/home/a/run.sh"), "/home/a/run.sh"),
        (("python3", "-m", "trainer"), "trainer"),
        (("python3",), None),
        (("/usr/bin/torchrun", "train.py"), None),
        (("/opt/python3-tools/train",), None),
        ((), None),
    ],
)
def test_script_argument(argv: tuple[str, ...], script: str | None) -> None:
    assert script_argument(argv) == script


def test_is_interpreter_takes_paths_and_names() -> None:
    assert is_interpreter("/usr/bin/ruby3.1")
    assert is_interpreter("node")
    assert not is_interpreter("/usr/bin/python3-config")
    assert not is_interpreter("nodejs-helper")
