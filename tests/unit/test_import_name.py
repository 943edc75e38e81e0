"""The package never names itself (issue 33): the folder is ``watchdog/``, the installed
import name ``rogue_watchdog`` (docs/dependencies.md), so PyPI's ``watchdog`` can share
the environment. Inside the package every import of its own modules is relative and
every ``"module:attribute"`` registry reference starts with a dot; outside, code imports
``rogue_watchdog``. A file that breaks this is fixed by ``python scripts/rename_imports.py``.
"""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
import sys

from tests.conftest import REPO

PACKAGE = REPO / "watchdog"
FIX = "run `python scripts/rename_imports.py` (docs/dependencies.md)"


def _submodules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
    }


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _is_self(name: str | None) -> bool:
    return name is not None and (name == "watchdog" or name.startswith("watchdog."))


def _absolute_self_imports(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(_is_self(n) for n in names):
            lines.append(node.lineno)
    return lines


def test_package_imports_itself_only_relatively() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        bad += [f"{path.relative_to(REPO)}:{n}" for n in _absolute_self_imports(tree)]
    assert not bad, f"absolute imports of the package's own name ({FIX}): {bad}"


def test_package_strings_never_name_the_package() -> None:
    """Registry references, ``sys.modules`` keys, ``-m`` arguments and texts shown to users
    name the installed package through ``__name__``/a leading dot, never ``watchdog.``."""
    named = re.compile(r"(?<![\w./-])watchdog\.(?:" + "|".join(sorted(_submodules())) + r")\b")
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and (named.search(node.value) or node.value == "watchdog")
            ):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not bad, f"strings naming the package as `watchdog` ({FIX}): {bad}"


def test_tests_bench_and_scripts_import_the_installed_name() -> None:
    bad = []
    for top in ("tests", "bench", "scripts"):
        for path in sorted((REPO / top).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            bad += [f"{path.relative_to(REPO)}:{n}" for n in _absolute_self_imports(tree)]
    assert not bad, f"`watchdog` imported by its folder name ({FIX}): {bad}"


def test_codemod_has_nothing_left_to_change() -> None:
    """Code, docs and packaging merged from a branch written against the old name."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "rename_imports.py"), "--check"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{FIX}:\n{done.stdout}{done.stderr}"


def test_the_registries_hold_the_installed_packages_own_objects() -> None:
    # Typed lists of imported objects (issue 30): no "module:attribute" names to load.
    from rogue_watchdog.actions.planners import PLANNERS
    from rogue_watchdog.daemon.alerts.delivery import SINK_FACTORIES
    from rogue_watchdog.lineage import RESOLVERS
    from rogue_watchdog.model import ORIGIN_KINDS
    from rogue_watchdog.weights.api import _VERIFIERS

    objs: list[object] = [*ORIGIN_KINDS, *RESOLVERS, *PLANNERS, *PLANNERS.values()]
    objs += [*SINK_FACTORIES.values(), *_VERIFIERS.values()]
    assert len(objs) > 30
    for obj in objs:
        assert obj.__module__.startswith("rogue_watchdog."), (obj, obj.__module__)
    # Nor does any string in the package name its code as "module:attribute" (a dotted
    # or relative module, or ``{__name__}:X``; fault points are named "area:step").
    refs = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and re.fullmatch(r"(\.|\w+\.)[\w.]*:[A-Za-z_]\w*", text):
                refs.append(f"{path}: {text}")
            parts = node.values if isinstance(node, ast.JoinedStr) else []
            for named, after in itertools.pairwise(parts):
                if (
                    isinstance(named, ast.FormattedValue)
                    and ast.unparse(named.value) == "__name__"
                    and re.match(r":[A-Z]", str(getattr(after, "value", "")))
                ):
                    refs.append(f"{path}: {ast.unparse(node)}")
    assert refs == []
    assert "watchdog" not in sys.modules or not str(
        getattr(sys.modules["watchdog"], "__file__", "") or ""
    ).startswith(str(PACKAGE)), "the source folder was imported as `watchdog` beside it"
