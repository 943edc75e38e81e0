"""rogue-watchdog beside PyPI's ``watchdog`` (the file-events library) in one environment
(issue 33): installed in either order, and after uninstalling either, every command and
the weights API of the one left work, and no file belongs to both distributions.

Before the package was installed as ``rogue_watchdog`` both owned ``watchdog/``: every
command died with ``ImportError: cannot import name '__version__' from 'watchdog'``,
exit 1, which ``verify-weights`` documents as "non-finite".

Each scenario is a throwaway venv, made with the real ``python -m venv`` and changed
only with its own ``pip install`` / ``pip uninstall``: rogue-watchdog's wheel is built
here from this checkout, PyPI's ``watchdog`` wheel is downloaded once per run. Both are
installed ``--no-deps``; rogue-watchdog's dependencies come from this checkout's venv
through a ``.pth`` directory of links (without rogue-watchdog itself and without any
``watchdog``), so a run downloads one small wheel instead of every dependency.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, need

pytestmark = pytest.mark.system

# Entries of this checkout's site-packages that the throwaway venvs must not see.
_NOT_DEPS = ("rogue_watchdog", "rogue-watchdog", "__editable__", "watchdog", "pip", "setuptools")


def _run(*argv: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from / with this test's PYTHONPATH dropped: from this checkout (the
    current directory on ``sys.path`` of ``python -c``) its folder would be ``watchdog``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=300, check=False,
        cwd="/", env=env,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """rogue-watchdog's wheel built from a copy of this checkout, and PyPI's watchdog."""
    d = tmp_path_factory.mktemp("wheels")
    src = d / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "watchdog", "man"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, src / name)
    # Built as pip builds it for a user (isolated: pyproject's build requirements).
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", d, src)
    got = _run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary",
               ":all:", "-d", d, "watchdog", check=False)  # fmt: skip
    need(got.returncode == 0, f"pip download watchdog failed (no index?): {got.stderr[-500:]}")
    (ours,) = d.glob("rogue_watchdog-*.whl")
    (theirs,) = d.glob("watchdog-*.whl")
    return {"rogue-watchdog": ours, "watchdog": theirs}


@pytest.fixture(scope="module")
def deps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of links to this venv's installed packages, less the two under test."""
    d = tmp_path_factory.mktemp("deps")
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if entry.name.endswith(".pth") or entry.name.lower().startswith(_NOT_DEPS):
            continue
        (d / entry.name).symlink_to(entry)
    return d


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finite and a non-finite safetensors file."""
    import numpy as np
    from safetensors.numpy import save_file

    d = tmp_path_factory.mktemp("weights")
    save_file({"w": np.ones((4, 4), np.float32)}, str(d / "finite.safetensors"))
    save_file({"w": np.array([1.0, np.nan, 3.0], np.float32)}, str(d / "nan.safetensors"))
    return {"finite": d / "finite.safetensors", "nan": d / "nan.safetensors"}


class Venv:
    """A throwaway virtual environment changed only by its own pip."""

    def __init__(self, root: Path, deps: Path, wheels: dict[str, Path]) -> None:
        self.root = root
        self.wheels = wheels
        base = getattr(sys, "_base_executable", sys.executable)
        _run(base, "-m", "venv", root)
        self.python = root / "bin" / "python"
        purelib = _run(
            self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        )
        self.site = Path(purelib.stdout.strip())
        (self.site / "zz-rogue-watchdog-test-deps.pth").write_text(f"{deps}\n")

    def install(self, name: str) -> None:
        _run(
            self.python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", self.wheels[name]
        )

    def uninstall(self, name: str) -> None:
        _run(self.python, "-m", "pip", "uninstall", "-q", "-y", name)

    def files(self, name: str) -> set[str]:
        """The files pip says distribution ``name`` installed (its RECORD)."""
        shown = _run(self.python, "-m", "pip", "show", "-f", name).stdout
        listed = shown.split("Files:\n", 1)[1].splitlines()
        return {line.strip() for line in listed if line.strip()}

    def check_rogue_watchdog(self, weights: dict[str, Path]) -> None:
        """Every command answers as documented, and the weights API imports and verifies."""
        exe = self.root / "bin" / "rogue-watchdog"
        assert "usage: rogue-watchdog" in _run(exe, "--help").stdout
        assert _run(exe, "--version").returncode == 0
        finite = _run(exe, "verify-weights", "--no-progress", weights["finite"], check=False)
        assert finite.returncode == 0, finite.stdout + finite.stderr
        nan = _run(exe, "verify-weights", "--no-progress", weights["nan"], check=False)
        assert nan.returncode == 1, nan.stdout + nan.stderr
        assert "ImportError" not in nan.stderr and "non-finite" in (nan.stdout + nan.stderr)
        ran = weights["finite"].parent / "deployed"
        ok = _run(exe, "gate", "--no-progress", "--weights", weights["finite"], "--",
                  "touch", ran)  # fmt: skip
        assert ok.returncode == 0 and ran.exists()
        ran.unlink()
        refused = _run(exe, "gate", "--no-progress", "--weights", weights["nan"], "--",
                       "touch", ran, check=False)  # fmt: skip
        assert refused.returncode == 124 and not ran.exists(), refused.stderr  # NaN found
        api = _run(
            self.python, "-c",
            "import sys\n"
            "from rogue_watchdog.weights import NonFiniteWeightsError, require_finite, verify\n"
            "assert verify(sys.argv[1]).exit_code == 0\n"
            "try:\n    require_finite(sys.argv[2])\nexcept NonFiniteWeightsError:\n"
            "    print('refused')\n",
            weights["finite"], weights["nan"],
        )  # fmt: skip
        assert api.stdout == "refused\n"
        mod = _run(self.python, "-m", "rogue_watchdog", "--help")
        assert "usage: rogue-watchdog" in mod.stdout

    def check_pypi_watchdog(self) -> None:
        """PyPI's watchdog imports as its users import it."""
        code = (
            "import watchdog, watchdog.events, watchdog.version\n"
            "from watchdog.observers import Observer\n"
            "assert not hasattr(watchdog, '__version__') or watchdog.__version__ != '0.1.0'\n"
            "print(watchdog.version.VERSION_STRING)\n"
        )
        assert _run(self.python, "-c", code).stdout.strip()


@pytest.fixture
def venv(tmp_path: Path, deps: Path, wheels: dict[str, Path]) -> Iterator[Venv]:
    yield Venv(tmp_path / "venv", deps, wheels)


@pytest.mark.parametrize("first", ["rogue-watchdog", "watchdog"])
def test_both_installed_in_either_order_then_each_uninstalled(
    venv: Venv, weights: dict[str, Path], first: str
) -> None:
    second = "watchdog" if first == "rogue-watchdog" else "rogue-watchdog"
    venv.install(first)
    venv.install(second)
    assert not venv.files("rogue-watchdog") & venv.files("watchdog")
    venv.check_rogue_watchdog(weights)
    venv.check_pypi_watchdog()

    venv.uninstall("watchdog")
    venv.check_rogue_watchdog(weights)
    gone = _run(venv.python, "-c", "import watchdog", check=False)
    assert gone.returncode != 0  # nothing of PyPI's watchdog left behind, nor of ours

    venv.install("watchdog")
    venv.uninstall("rogue-watchdog")
    venv.check_pypi_watchdog()
    assert not (venv.root / "bin" / "rogue-watchdog").exists()
    assert _run(venv.python, "-c", "import rogue_watchdog", check=False).returncode != 0
