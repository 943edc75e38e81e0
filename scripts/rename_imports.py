"""Codemod for the installed import name ``rogue_watchdog`` (issue 33, docs/dependencies.md).

The source folder stays ``watchdog/``; it installs as the import package ``rogue_watchdog``
(pyproject.toml maps one onto the other), so PyPI's ``watchdog`` can share an environment.
This rewrites what still names the package ``watchdog``:

- inside ``watchdog/``: every absolute ``from watchdog... import`` / ``import watchdog...``
  becomes relative (``from ..policy import jobs``), and a registry reference
  ``"watchdog.a.b:attr"`` becomes ``".a.b:attr"`` (:func:`rogue_watchdog.model.load_ref`
  resolves a leading dot against the package);
- everywhere else (tests, bench, scripts, docs, README, CI, packaging): ``watchdog.<module>``,
  ``from watchdog import``, ``import watchdog`` and ``-m watchdog`` become ``rogue_watchdog``.

Idempotent: re-run it after merging branches written against the old name, then
``ruff check --fix . && ruff format .`` (import order) and the architecture test
(tests/unit/test_import_name.py), which fails on anything this missed.

Usage: ``python scripts/rename_imports.py [--check]`` from anywhere; ``--check`` changes
nothing and exits 1 when a file would change.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = "watchdog"  # the folder, and the name being replaced
INSTALLED = "rogue_watchdog"  # the import name it installs as

# Files that must name PyPI's `watchdog` or the folder as such.
KEEP = {
    "scripts/rename_imports.py",
    "docs/dependencies.md",
    "tests/system/test_pypi_watchdog.py",
    "tests/unit/test_import_name.py",
}
# What else is rewritten, outside the package.
OUTSIDE_GLOBS = (
    "tests/**/*.py",
    "bench/**/*.py",
    "scripts/**/*.py",
    "scripts/**/*.sh",
    "docs/**/*.md",
    "README.md",
    ".ci/*",
    ".importlinter",
    "debian/rules",
    "systemd/*",
    "deploy/**/*",
)

_FROM = re.compile(r"^(?P<indent>[ \t]*)from[ \t]+watchdog(?P<mod>(?:\.\w+)*)[ \t]+import\b", re.M)
_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)import[ \t]+watchdog(?P<mod>(?:\.\w+)*)"
    r"[ \t]+as[ \t]+(?P<alias>\w+)[ \t]*$",
    re.M,
)
_REF = re.compile(r"""(?P<q>["'])watchdog(?P<ref>(?:\.\w+)+:\w+)(?P=q)""")


def _submodules() -> list[str]:
    pkg = REPO / SOURCE
    names = {p.stem for p in pkg.glob("*.py")} | {
        p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()
    }
    return sorted(names, key=len, reverse=True)


def _relative(path: Path, target: str) -> str:
    """``target`` (``watchdog.a.b``) as a relative module name seen from file ``path``."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    here = parts if parts[-1] == "__init__" else parts[:-1]
    if here and here[-1] == "__init__":
        here = here[:-1]
    want = target.split(".")
    common = 0
    while common < min(len(here), len(want)) and here[common] == want[common]:
        common += 1
    dots = "." * (len(here) - common + 1)
    rest = ".".join(want[common:])
    return dots + rest


def inside(path: Path, text: str) -> str:
    """Make a package module's imports of its own package relative."""

    def from_(m: re.Match[str]) -> str:
        return f"{m['indent']}from {_relative(path, SOURCE + m['mod'])} import"

    def import_(m: re.Match[str]) -> str:
        target = SOURCE + m["mod"]
        parent, _, leaf = target.rpartition(".")
        if not parent:
            raise SystemExit(f"{path}: `import watchdog as ...`: rewrite by hand")
        return f"{m['indent']}from {_relative(path, parent)} import {leaf} as {m['alias']}"

    text = _FROM.sub(from_, text)
    text = _IMPORT.sub(import_, text)
    return _REF.sub(lambda m: f"{m['q']}{m['ref']}{m['q']}", text)


def outside(text: str, subs: list[str]) -> str:
    """Point code, docs and packaging outside the package at the installed name."""
    not_after = r"(?<![\w./-])"
    text = re.sub(
        not_after + r"watchdog(?=\.(?:" + "|".join(map(re.escape, subs)) + r"|__\w+__)\b)",
        INSTALLED,
        text,
    )
    text = re.sub(r"\b(from|import)([ \t]+)watchdog\b(?![\w.-])", rf"\1\2{INSTALLED}", text)
    text = re.sub(r"(-m[ \t]+|\"-m\",[ \t]*\")watchdog\b(?![\w.-])", rf"\1{INSTALLED}", text)
    return re.sub(r"^(root_package[ \t]*=[ \t]*)watchdog$", rf"\1{INSTALLED}", text, flags=re.M)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    subs = _submodules()
    changed: list[str] = []
    files = [(p, True) for p in sorted((REPO / SOURCE).rglob("*.py"))]
    for pattern in OUTSIDE_GLOBS:
        files += [(p, False) for p in sorted(REPO.glob(pattern)) if p.is_file()]
    seen: set[Path] = set()
    for path, in_pkg in files:
        rel = path.relative_to(REPO).as_posix()
        if path in seen or rel in KEEP or ".venv" in path.parts:
            continue
        seen.add(path)
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = inside(path, text) if in_pkg else outside(text, subs)
        if new != text:
            changed.append(rel)
            if not check:
                path.write_text(new)
    for rel in changed:
        print(("would change " if check else "changed ") + rel)
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
