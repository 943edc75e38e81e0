"""The import path that makes a ``--code DIR`` checkout the rogue-watchdog a bench measures.

The package is imported as ``rogue_watchdog`` while its folder is ``watchdog/``
(docs/dependencies.md); the venv's editable install maps that name to the venv's own
checkout. A directory holding a ``rogue_watchdog`` symlink to ``DIR/watchdog``, put on
``PYTHONPATH`` (searched before the editable install's finder), measures DIR instead.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def import_path(code: Path) -> str:
    """``PYTHONPATH`` for children measuring checkout ``code``: its alias directory, then
    ``code`` itself (a checkout from before the rename imports ``watchdog`` absolutely).

    Raises:
        OSError: The alias directory cannot be made in the temporary directory.
    """
    code = code.resolve()
    key = hashlib.sha256(str(code).encode()).hexdigest()[:12]
    alias = Path(tempfile.gettempdir()) / f"rogue-watchdog-code-{key}"
    link = alias / "rogue_watchdog"
    if not link.is_symlink():
        alias.mkdir(mode=0o755, exist_ok=True)
        tmp = alias / f".link-{os.getpid()}"
        tmp.symlink_to(code / "watchdog")
        tmp.replace(link)
    return f"{alias}{os.pathsep}{code}"
