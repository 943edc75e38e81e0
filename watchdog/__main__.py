"""``python -m rogue_watchdog`` and the ``rogue-watchdog`` command run the command line."""

import sys


def entry() -> int:
    """The ``rogue-watchdog`` console script (pyproject.toml ``[project.scripts]``).

    Returns:
        The command's exit status; 70 (internal error) when the command line cannot be
        imported: a broken installation must not exit 1, which ``verify-weights``
        documents as "non-finite" and ``scan`` as "rogue".
    """
    try:
        from .cli import main
    except Exception as exc:
        print(f"rogue-watchdog: internal error (exit 70): cannot load: {exc!r}", file=sys.stderr)
        return 70
    return main()


if __name__ == "__main__":
    sys.exit(entry())
