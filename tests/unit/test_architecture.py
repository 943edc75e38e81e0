"""Shape of the code a newcomer reads (issue 30): no function in ``watchdog/`` over 100
lines. The import layers and the package's acyclic inside are `lint-imports`'s
(``.importlinter``); this checks what import-linter cannot."""

from __future__ import annotations

import ast
from pathlib import Path

import rogue_watchdog

MAX_FUNCTION_LINES = 100

# Functions allowed over the limit, each with the reason. Keep it short: a new entry needs
# a reason a reviewer accepts, and an entry whose function shrank fails the test below.
ALLOWED_LONG: dict[str, str] = {}


def function_lengths(root: Path) -> dict[str, int]:
    """Lines (``end_lineno - lineno + 1``, decorators excluded) of every function and
    method under ``root``, keyed ``path:Class.name`` with ``path`` relative to ``root``."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{where}:{prefix}{child.name}"
                lengths[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, where, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, where, f"{prefix}{child.name}.")
            else:
                visit(child, where, prefix)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), path.relative_to(root).as_posix(), "")
    return lengths


def test_no_function_over_the_limit() -> None:
    lengths = function_lengths(Path(rogue_watchdog.__file__).parent)
    over = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES}
    offenders = sorted(
        (f"{name} {n} lines" for name, n in over.items() if name not in ALLOWED_LONG),
    )
    assert not offenders, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them into named steps: {offenders}"
    )
    # An allowance outlives its need: drop it once the function is short (or gone).
    stale = sorted(name for name in ALLOWED_LONG if name not in over)
    assert not stale, f"ALLOWED_LONG names functions no longer over the limit: {stale}"


def test_the_measure_counts_nested_and_methods(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "class C:\n    def f(self):\n        def g():\n            pass\n        return g\n"
    )
    assert function_lengths(tmp_path) == {"m.py:C.f": 4, "m.py:C.f.g": 2}
