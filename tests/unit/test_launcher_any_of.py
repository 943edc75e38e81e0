"""is_launcher's one alternation answers as its patterns one by one do.

The alternation (rogue_watchdog.policy.jobs.any_of) is a speed-up of the launcher check on
every process of a first scan and every exec event; these cases compare it with the
pattern-by-pattern answer on command lines where the program span decides.
"""

from __future__ import annotations

from itertools import product

from rogue_watchdog.config import DEFAULT_LAUNCHERS
from rogue_watchdog.config.base import Regex
from rogue_watchdog.model import Proc
from rogue_watchdog.policy.jobs import any_of, is_launcher

PATTERN_SETS = [
    tuple(Regex(p) for p in DEFAULT_LAUNCHERS),
    (Regex(r"train[^\s/]*\.py"), Regex(r"^/usr/bin/python3")),
    (Regex(r"(?i:TORCHRUN)"), Regex(r"--rank")),  # a flag scoped to its own pattern
    (Regex(r"a|b"), Regex(r"^c$")),
    (Regex(r"zzz"),),
]
COMMAND_LINES = [
    ("python3", "/srv/train.py", "--rank", "3"),
    ("vim", "train.py"),
    ("tail", "-f", "/srv/train_x.py"),
    ("/usr/bin/python3", "-m", "torch.distributed.run", "x.py"),
    ("/opt/TorchRun", "--nproc", "8"),
    ("deepspeed", "train.py"),
    ("bash", "-c", "torchrun x"),
    ("c",),
    ("sleep", "3600"),
    ("pgrep", "-f", "python3 train.py"),
]
EXES = [None, "/usr/bin/python3", "/srv/bin/train_fast.py", "/usr/bin/vim"]


def one_by_one(proc: Proc, launchers: tuple[Regex, ...]) -> bool:
    from rogue_watchdog.lineage.base import is_wrapper, runs_program

    if proc.kernel_thread or not proc.cmdline or is_wrapper(proc):
        return False
    return any(
        runs_program(proc.cmdline, p) or bool(proc.exe and p.search(proc.exe)) for p in launchers
    )


def test_the_alternation_answers_as_the_patterns_do() -> None:
    checked = 0
    for launchers, cmdline, exe in product(PATTERN_SETS, COMMAND_LINES, EXES):
        proc = Proc(4242, 1, 0, "S", cmdline[0][-15:], exe=exe, cmdline=cmdline)
        assert is_launcher(proc, launchers) == one_by_one(proc, launchers), (launchers, proc)
        checked += 1
    assert checked == len(PATTERN_SETS) * len(COMMAND_LINES) * len(EXES)
    assert any_of(PATTERN_SETS[0]) is not None


def test_no_pattern_matches_nothing_and_an_uncompilable_join_falls_back() -> None:
    assert any_of(()) is None
    proc = Proc(1, 0, 0, "S", "python3", cmdline=("python3", "train.py"))
    assert is_launcher(proc, ()) is False
    # Python's re refuses a global flag inside a group: searched one by one instead.
    flagged = (Regex(r"(?i)TRAIN\.py"), Regex(r"torchrun"))
    assert any_of(flagged) is None
    assert is_launcher(proc, flagged) is True


class _Table:
    """What LauncherCache.matching reads of a process table."""

    def __init__(self, procs: list[Proc]) -> None:
        self.procs = {p.pid: p for p in procs}
        self.generation = 1
        self.changed: set[int] = set()
        self.removed: set[int] = set()


def test_processes_alike_are_matched_once_with_each_ones_answer() -> None:
    # matching() answers once per (command line, executable, kernel thread): every
    # combination here, each on several PIDs, a zombie and a kernel thread among them,
    # must get the answer is_launcher gives that process alone.
    from rogue_watchdog.policy.jobs import LauncherCache

    launchers = PATTERN_SETS[1]
    procs: list[Proc] = []
    pid = 100
    for cmdline, exe in product(COMMAND_LINES, EXES):
        for state, kthread in (("S", False), ("S", False), ("Z", False), ("S", True)):
            procs.append(
                Proc(pid, 1, pid, state, "x", exe=exe, cmdline=cmdline, kernel_thread=kthread)
            )
            pid += 1
    table = _Table(procs)
    want = sorted(p.pid for p in procs if not p.is_zombie and is_launcher(p, launchers))
    assert want  # the case has launchers, and processes alike that are not
    assert LauncherCache().matching(table, launchers) == want  # type: ignore[arg-type]
