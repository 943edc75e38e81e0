"""Fixtures of the weights tests: llama.cpp's C GGUF reader, built once per test run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import need

from .ggml.build import GgmlUnavailable, build_reader
from .loaders import Reading, ggml_reader


@pytest.fixture(scope="session")
def ggml_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reader executable (about 20 s to build; cached for the whole run)."""
    try:
        return build_reader(tmp_path_factory.mktemp("ggml"))
    except GgmlUnavailable as exc:
        need(False, f"llama.cpp's GGUF reader: {exc}")
        raise


@pytest.fixture(scope="session")
def ggml(ggml_exe: Path) -> Callable[[Path], Reading]:
    """Read a GGUF file as ggml's gguf_init_from_file + to_float does."""
    return ggml_reader(ggml_exe)
